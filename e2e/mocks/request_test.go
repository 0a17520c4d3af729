package mocks

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseRequestLimits(t *testing.T) {
	const maxLen = 100
	for _, tc := range []struct {
		name    string
		ep      endpoint
		body    string
		want    limits
		wantErr string
	}{
		{"completions default 16", epCompletions, `{"prompt":"a b c"}`, limits{max: 16}, ""},
		{"completions max_tokens", epCompletions, `{"prompt":"a","max_tokens":3,"min_tokens":2,"ignore_eos":true}`, limits{max: 3, min: 2, ignoreEOS: true}, ""},
		{"completions ignore max_completion_tokens", epCompletions, `{"prompt":"a","max_completion_tokens":3}`, limits{max: 16}, ""},
		{"chat default rest of context", epChat, `{"messages":[{"role":"user","content":"hi"}]}`, limits{max: maxLen - 7}, ""},
		{"chat max_tokens", epChat, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, limits{max: 5}, ""},
		{"chat max_completion_tokens wins", epChat, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"max_completion_tokens":9}`, limits{max: 9}, ""},
		{"generate default 128", epGenerate, `{"text":"a"}`, limits{max: 128}, ""},
		{"generate sampling params", epGenerate, `{"input_ids":[5,6],"sampling_params":{"max_new_tokens":4,"min_new_tokens":1,"ignore_eos":true}}`, limits{max: 4, min: 1, ignoreEOS: true}, ""},
		{"zero max", epCompletions, `{"prompt":"a","max_tokens":0}`, limits{}, "max_tokens must be at least 1, got 0."},
		{"min above max", epCompletions, `{"prompt":"a","max_tokens":1,"min_tokens":2}`, limits{}, "min_tokens must be less than or equal to max_tokens=1, got 2."},
		{"negative min", epChat, `{"messages":[{"role":"user","content":"hi"}],"min_tokens":-1}`, limits{}, "min_tokens must be greater than or equal to 0"},
		{"prompt too long", epCompletions, `{"prompt":"` + longPrompt(maxLen) + `"}`, limits{}, "This model's maximum context length is 100 tokens. However, your request has 100 input tokens."},
		{"prompt plus max too long", epCompletions, `{"prompt":"a b","max_tokens":99}`, limits{}, "However, you requested 101 tokens (2 in the messages, 99 in the completion)"},
		{"max_tokens not a number", epCompletions, `{"prompt":"a","max_tokens":"3"}`, limits{}, "max_tokens: json: cannot unmarshal"},
	} {
		r, err := parseRequest(tc.ep, []byte(tc.body), maxLen)
		if tc.wantErr != "" {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 || !strings.Contains(ae.msg, tc.wantErr) {
				t.Errorf("%s: error %v, want 400 containing %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || r.lim != tc.want {
			t.Errorf("%s: limits %+v, %v; want %+v", tc.name, r, err, tc.want)
		}
	}
}

func TestParsePromptShapes(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       [][]int
		batched    bool
		wantErr    string
	}{
		{"string", `{"prompt":"alpha bravo"}`, [][]int{{100, 101}}, false, ""},
		{"token ids", `{"prompt":[7,8,9]}`, [][]int{{7, 8, 9}}, false, ""},
		{"strings", `{"prompt":["alpha","bravo charlie"]}`, [][]int{{100}, {101, 102}}, true, ""},
		{"id lists", `{"prompt":[[1],[2,3]]}`, [][]int{{1}, {2, 3}}, true, ""},
		{"empty string", `{"prompt":"  "}`, nil, false, "prompt: the prompt cannot be empty"},
		{"empty list", `{"prompt":[]}`, nil, false, "prompt: the prompt cannot be empty"},
		{"empty item", `{"prompt":["a",""]}`, nil, false, "prompt[1]: the prompt cannot be empty"},
		{"out of vocabulary", `{"prompt":[1,32000]}`, nil, false, "token id 32000 is out of vocabulary"},
		{"negative id", `{"prompt":[[1],[-1]]}`, nil, false, "prompt[1]: token id -1 is out of vocabulary"},
		{"mixed", `{"prompt":[1,"a"]}`, nil, false, "prompt: want a string"},
		{"missing", `{"model":"m"}`, nil, false, "prompt: field required"},
		{"not an object", `[1]`, nil, false, "request body is not a JSON object"},
		{"trailing data", `{"prompt":"a"} {}`, nil, false, "data after the JSON object"},
		{"kv params not an object", `{"prompt":"a","kv_transfer_params":[1]}`, nil, false, "kv_transfer_params: must be an object"},
	} {
		r, err := parseRequest(epCompletions, []byte(tc.body), 8192)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(r.prompts) != len(tc.want) || r.batched != tc.batched {
			t.Fatalf("%s: %+v, %v", tc.name, r, err)
		}
		for i := range tc.want {
			if !slices.Equal(r.prompts[i], tc.want[i]) {
				t.Errorf("%s: prompt %d = %v, want %v", tc.name, i, r.prompts[i], tc.want[i])
			}
		}
	}
}

func TestParseBootstrap(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *bootstrap
		wantErr    string
	}{
		{"absent", `{"text":"a"}`, nil, ""},
		{"scalars", `{"text":"a","bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42}`,
			&bootstrap{hosts: []string{"10.0.0.1"}, ports: []int{8998}, rooms: []uint64{42}, roomSet: true}, ""},
		{"null port", `{"text":"a","bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":9223372036854775807}`,
			&bootstrap{hosts: []string{"h"}, ports: []int{0}, rooms: []uint64{1<<63 - 1}, roomSet: true}, ""},
		{"batch lists", `{"text":["a","b"],"bootstrap_host":["h1","h2"],"bootstrap_port":[1,null],"bootstrap_room":[5,6]}`,
			&bootstrap{hosts: []string{"h1", "h2"}, ports: []int{1, 0}, rooms: []uint64{5, 6}, roomSet: true}, ""},
		{"batch scalar host", `{"text":["a","b"],"bootstrap_host":"h","bootstrap_room":[5,6]}`,
			&bootstrap{hosts: []string{"h", "h"}, ports: []int{0, 0}, rooms: []uint64{5, 6}, roomSet: true}, ""},
		{"room missing", `{"text":"a","bootstrap_host":"h"}`,
			&bootstrap{hosts: []string{"h"}, ports: []int{0}, rooms: []uint64{0}}, ""},
		{"list length", `{"text":["a","b"],"bootstrap_room":[5]}`, nil, "bootstrap_room: 1 values for a batch of 2"},
		{"room too big", `{"text":"a","bootstrap_room":9223372036854775808}`, nil, "bootstrap_room: not an integer in [0, 2^63-1]"},
		{"room negative", `{"text":"a","bootstrap_room":-1}`, nil, "bootstrap_room: not an integer"},
		{"room float", `{"text":"a","bootstrap_room":1.5}`, nil, "bootstrap_room: not an integer"},
		{"port out of range", `{"text":"a","bootstrap_port":70000}`, nil, "bootstrap_port: not a port"},
		{"host not a string", `{"text":"a","bootstrap_host":[1]}`, nil, "bootstrap_host[0]"},
	} {
		r, err := parseRequest(epGenerate, []byte(tc.body), 8192)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := r.boot
		if (got == nil) != (tc.want == nil) || got != nil && (!slices.Equal(got.hosts, tc.want.hosts) ||
			!slices.Equal(got.ports, tc.want.ports) || !slices.Equal(got.rooms, tc.want.rooms) || got.roomSet != tc.want.roomSet) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseTokenize(t *testing.T) {
	for _, tc := range []struct {
		body    string
		want    []int
		wantErr string
	}{
		{`{"model":"m","prompt":"alpha"}`, []int{100}, ""},
		{`{"model":"m","messages":[{"role":"user","content":"alpha"}],"add_generation_prompt":false}`, Tokenize("<|user|>\nalpha\n"), ""},
		{`{"model":"m"}`, nil, "prompt or messages: field required"},
		{`{"prompt":3}`, nil, "prompt: json: cannot unmarshal"},
	} {
		got, err := parseTokenize([]byte(tc.body))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.body, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.body, got, err, tc.want)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello","max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"min_tokens":2}`,
		`{"prompt":[1,2,3],"kv_transfer_params":{"ret_first_tok":true,"disagg_spec":{"req_id":"x","receiver_host":"h","receiver_init_port":[1],"receiver_alloc_port":[2]}}}`,
		`{"text":["a","b"],"bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":[1,2],"sampling_params":{"max_new_tokens":3}}`,
		`{"input_ids":[[1],[2]],"bootstrap_room":[1,2]}`,
		`{}`, `null`, `[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, ep := range []endpoint{epCompletions, epChat, epGenerate} {
			r, err := parseRequest(ep, []byte(body), 512)
			if err != nil {
				var ae *apiError
				if !errors.As(err, &ae) || ae.status != 400 {
					t.Fatalf("error %v is not a 400", err)
				}
				continue
			}
			if len(r.prompts) == 0 || r.lim.max < 1 || r.lim.min > r.lim.max || r.lim.min < 0 {
				t.Fatalf("accepted a bad request: %+v", r)
			}
			for _, p := range r.prompts {
				if len(p) == 0 || len(p) >= 512 {
					t.Fatalf("accepted prompt of %d tokens", len(p))
				}
			}
			if b := r.boot; b != nil && (len(b.hosts) != len(r.prompts) || len(b.ports) != len(r.prompts) || len(b.rooms) != len(r.prompts)) {
				t.Fatalf("bootstrap lists do not match the batch: %+v", b)
			}
		}
		parseTokenize([]byte(body))
	})
}
