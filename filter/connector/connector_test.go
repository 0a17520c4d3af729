package connector

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/tokenest"
	"github.com/tidwall/gjson"
)

func TestParsePrefillAnswer(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		kv     KVStatus
		params string
		first  FirstToken
		usable map[config.Mode]bool
	}{
		{
			name: "nixl params", in: `{"id":"cmpl-1","created":17,"model":"m","choices":[{"text":"Hi","finish_reason":"length"}],"kv_transfer_params":{"remote_host":"h" , "tp_size":1}}`,
			kv: KVPresent, params: `{"remote_host":"h" , "tp_size":1}`,
			first:  FirstToken{Text: []byte(`"Hi"`), FinishReason: "length", ID: []byte(`"cmpl-1"`), Model: []byte(`"m"`), Created: 17},
			usable: map[config.Mode]bool{config.ModeNIXL: true, config.ModeOrchestrated: true, config.ModeLMCache: false, config.ModeSGLang: true},
		},
		{
			name: "lmcache first token", in: `{"choices":[{"text":" Paris\n","finish_reason":null},{"text":"x"}],"kv_transfer_params":{"first_tok":12366}}`,
			kv: KVPresent, params: `{"first_tok":12366}`,
			first:  FirstToken{OK: true, Token: 12366, Text: []byte(`" Paris\n"`)},
			usable: map[config.Mode]bool{config.ModeNIXL: true, config.ModeLMCache: true},
		},
		{
			name: "absent", in: `{"choices":[]}`, kv: KVAbsent, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeNIXL: false, config.ModeOrchestrated: false, config.ModeLMCache: false, config.ModeSGLang: true},
		},
		{name: "null", in: `{"kv_transfer_params":null}`, kv: KVNull, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeNIXL: false}},
		{name: "not an object", in: `{"kv_transfer_params":[1]}`, kv: KVNotObject, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeNIXL: false}},
		{name: "empty", in: `{"kv_transfer_params": { } }`, kv: KVEmpty, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeNIXL: false}},
		{name: "first_tok not an integer", in: `{"kv_transfer_params":{"first_tok":"5"},"choices":[{"text":null}]}`,
			kv: KVPresent, params: `{"first_tok":"5"}`, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeLMCache: false}},
		{name: "negative first_tok", in: `{"kv_transfer_params":{"first_tok":-1}}`,
			kv: KVPresent, params: `{"first_tok":-1}`, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeLMCache: false}},
		{name: "odd field types ignored", in: `{"id":5,"model":null,"created":"x","choices":{"text":"y"},"kv_transfer_params":{"first_tok":1.5}}`,
			kv: KVPresent, params: `{"first_tok":1.5}`, first: FirstToken{Text: []byte(`""`)},
			usable: map[config.Mode]bool{config.ModeLMCache: false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParsePrefillAnswer([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if a.KV != tt.kv || string(a.KVParams) != tt.params {
				t.Errorf("kv = %v %s, want %v %s", a.KV, a.KVParams, tt.kv, tt.params)
			}
			if n, err := ParseNIXLAnswerIn([]byte(tt.in), nil); err != nil || n.KV != tt.kv || string(n.KVParams) != tt.params {
				t.Errorf("nixl reader: kv = %v %s (%v), want %v %s", n.KV, n.KVParams, err, tt.kv, tt.params)
			}
			f, w := a.First, tt.first
			if f.OK != w.OK || f.Token != w.Token || string(f.Text) != string(w.Text) || f.FinishReason != w.FinishReason ||
				string(f.ID) != string(w.ID) || string(f.Model) != string(w.Model) || f.Created != w.Created {
				t.Errorf("first = %+v\nwant %+v", f, w)
			}
			for m, want := range tt.usable {
				if a.Usable(m) != want {
					t.Errorf("Usable(%s) = %v", m, !want)
				}
			}
		})
	}
	for _, bad := range []string{``, `<html>502</html>`, `[{}]`, `{"a":`} {
		if _, err := ParsePrefillAnswer([]byte(bad)); err == nil {
			t.Errorf("ParsePrefillAnswer(%q) accepted", bad)
		}
		if _, err := ParseNIXLAnswerIn([]byte(bad), nil); err == nil {
			t.Errorf("ParseNIXLAnswerIn(%q) accepted", bad)
		}
	}
	if KVEmpty.String() != "empty" || KVStatus(9).String() != "unknown" {
		t.Error("KVStatus.String")
	}
}

func TestRequestID(t *testing.T) {
	random := [16]byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	const generated = "00112233-4455-4677-8899-aabbccddeeff"
	tests := []struct{ header, want string }{
		{"3f2b8c1e-0a4d-4e5f-9b6a-7c8d9e0f1a2b", "3f2b8c1e-0a4d-4e5f-9b6a-7c8d9e0f1a2b"},
		{"01J9Z3K4M5N6P7Q8R9S0T1V2W3", "01J9Z3K4M5N6P7Q8R9S0T1V2W3"},
		{"trace.span:42_x", "trace.span:42_x"},
		{strings.Repeat("a", 128), strings.Repeat("a", 128)},
		{strings.Repeat("a", 129), generated},
		{"", generated},
		{"id with space", generated},
		{"id\r\nx-evil: 1", generated},
		{`"quoted"`, generated},
		{"a/b", generated},
		{"é", generated},
	}
	for _, tt := range tests {
		if got := RequestID(tt.header, random); got != tt.want {
			t.Errorf("RequestID(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, r := range [][16]byte{{}, random, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		if id := UUIDv4(r); !uuid.MatchString(id) {
			t.Errorf("UUIDv4(%x) = %q is not a v4 UUID", r, id)
		}
	}
	if UUIDv4([16]byte{}) != "00000000-0000-4000-8000-000000000000" {
		t.Error(UUIDv4([16]byte{}))
	}
}

func req(t *testing.T, api config.API, body string) Request {
	t.Helper()
	r, err := NewRequest(api, []byte(body))
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return r
}

func TestLMCacheCheck(t *testing.T) {
	chat, comp := config.APIChat, config.APICompletions
	tests := []struct {
		api    config.API
		body   string
		reason string // "" = eligible
	}{
		{comp, `{"prompt":"x","max_tokens":2}`, ""},
		{comp, `{"prompt":[1,2,3]}`, ""},
		{comp, `{"prompt":"x","max_tokens":null,"logprobs":null,"echo":false,"n":1,"best_of":1}`, ""},
		{comp, `{"prompt":"x","logprobs":0}`, "logprobs"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"tools":[],"logprobs":false,"top_logprobs":0}`, ""},
		{chat, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":2,"max_tokens":1}`, ""},
		{comp, `{"max_tokens":5}`, "no prompt"},
		{comp, `{"prompt":["a","b"]}`, "batched prompt"},
		{comp, `{"prompt":[[1,2],[3]]}`, "batched prompt"},
		{comp, `{"prompt":[]}`, "empty prompt"},
		{comp, `{"prompt":5}`, "prompt is neither text nor token ids"},
		{comp, `{"prompt":"x","echo":true}`, "echo"},
		{comp, `{"prompt":"x","logprobs":5}`, "logprobs"},
		{comp, `{"prompt":"x","n":2}`, "n > 1"},
		{comp, `{"prompt":"x","best_of":3}`, "best_of > 1"},
		{comp, `{"prompt":"x","max_tokens":1}`, "max_tokens 1"},
		{comp, `{"prompt":"x","max_tokens":0}`, "max_tokens 0"},
		{comp, `{"prompt":"x","max_tokens":2.5}`, "max_tokens 2.5"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":1,"max_tokens":50}`, "max_tokens 1"},
		{chat, `{"model":"m"}`, "no messages"},
		{chat, `{"messages":"hi"}`, "no messages"},
		{chat, `{"messages":["hi"]}`, "a message is not an object"},
		{chat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:"}}]}]}`, "non-text message content"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, "tools"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"logprobs":true}`, "logprobs"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"top_logprobs":3}`, "logprobs"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"n":4}`, "n > 1"},
		{config.APIResponses, `{"input":"x"}`, "the responses API"},
	}
	for _, tt := range tests {
		err := LMCacheCheck(req(t, tt.api, tt.body))
		switch {
		case tt.reason == "" && err != nil:
			t.Errorf("%s: unexpected %v", tt.body, err)
		case tt.reason != "" && (!errors.Is(err, ErrNotEligible) || err.Error() != "lmcache: cannot disaggregate: "+tt.reason):
			t.Errorf("%s: err = %v, want reason %q", tt.body, err, tt.reason)
		}
	}
}

func TestLMCacheDecodeLimits(t *testing.T) {
	tokens := []byte(`[1,2]`)
	tests := []struct {
		api  config.API
		body string
		max  string
		min  string
	}{
		{config.APICompletions, `{"prompt":"x","max_tokens":10}`, `9`, ``},
		{config.APICompletions, `{"prompt":"x"}`, `15`, ``},
		{config.APICompletions, `{"prompt":"x","max_tokens":null}`, `null`, ``},
		{config.APICompletions, `{"prompt":"x","max_tokens":3,"min_tokens":3}`, `2`, `2`},
		{config.APICompletions, `{"prompt":"x","min_tokens":0}`, `15`, `0`},
		{config.APIChat, `{"messages":[]}`, `null`, ``},
		{config.APIChat, `{"messages":[],"max_tokens":7}`, `6`, ``},
		{config.APIChat, `{"messages":[],"max_completion_tokens":null,"max_tokens":7}`, `6`, ``},
		{config.APIChat, `{"messages":[],"max_completion_tokens":40,"max_tokens":7,"min_tokens":1}`, `39`, `0`},
	}
	for _, tt := range tests {
		r := req(t, tt.api, tt.body)
		out := LMCacheDecode(r, tokens, 3).Apply([]byte(tt.body))
		o, err := ParseObject(out)
		if err != nil {
			t.Fatalf("%s → %s: %v", tt.body, out, err)
		}
		if string(o.Raw("max_tokens")) != tt.max || string(o.Raw("min_tokens")) != tt.min || string(o.Raw("prompt")) != `[1,2,3]` {
			t.Errorf("%s → %s: want max_tokens %s, min_tokens %q", tt.body, out, tt.max, tt.min)
		}
		if tt.api == config.APIChat && (o.Raw("messages") != nil || o.Raw("max_completion_tokens") != nil) {
			t.Errorf("chat fields leaked into the completion: %s", out)
		}
	}
}

func TestParseTokenizeAnswer(t *testing.T) {
	tests := []struct{ in, tokens string }{
		{`{"tokens":[1,2,3],"count":3}`, `[1,2,3]`},
		{`{"count":1,"tokens":[ 0 ]}`, `[ 0 ]`},
		{`{"tokens":[]}`, ``},
		{`{"tokens":[1,-2]}`, ``},
		{`{"tokens":[1,2.0]}`, ``},
		{`{"tokens":"1 2"}`, ``},
		{`{"count":3}`, ``},
		{`{"tokens":[1,2,3]`, ``},
	}
	for _, tt := range tests {
		got, err := ParseTokenizeAnswer([]byte(tt.in))
		if string(got) != tt.tokens || (err == nil) != (tt.tokens != "") {
			t.Errorf("ParseTokenizeAnswer(%s) = %s, %v", tt.in, got, err)
		}
	}
}

func TestLMCacheTokenizeSkipsTokenIDs(t *testing.T) {
	body, tokens := LMCacheTokenize(req(t, config.APICompletions, `{"model":"m","prompt":[5,6],"temperature":1}`))
	if body != nil || string(tokens) != `[5,6]` {
		t.Errorf("token-id prompt: body %s tokens %s", body, tokens)
	}
	body, tokens = LMCacheTokenize(req(t, config.APICompletions, `{"model":"m","prompt":"a","temperature":1,"add_special_tokens":false}`))
	if string(body) != `{"model":"m","prompt":"a","add_special_tokens":false}` || tokens != nil {
		t.Errorf("text prompt: body %s tokens %s", body, tokens)
	}
}

func TestSGLangBatches(t *testing.T) {
	tests := []struct {
		api   config.API
		body  string
		items int // 0 = single
		err   error
	}{
		{config.APIChat, `{"n":1}`, 0, nil},
		{config.APIChat, `{"n":2}`, 2, nil},
		{config.APIChat, `{"n":2.5}`, 0, nil},
		{config.APIChat, `{"n":4097}`, 0, ErrBatchTooLarge},
		{config.APIChat, `{"n":1e300}`, 0, ErrBatchTooLarge},
		{config.APICompletions, `{"prompt":"a"}`, 0, nil},
		{config.APICompletions, `{"prompt":[1,2,3,4,5]}`, 0, nil},
		{config.APICompletions, `{"prompt":["a"]}`, 1, nil},
		{config.APICompletions, `{"prompt":[[1],[2],[3]]}`, 3, nil},
		{config.APICompletions, `{"prompt":[]}`, 0, nil},
		{config.APICompletions, `{"prompt":["a"],"n":3}`, 3, nil},
		{config.APICompletions, `{"prompt":[` + strings.Repeat(`"a",`, 4096) + `"a"]}`, 0, ErrBatchTooLarge},
		{config.APIGenerate, `{"text":"a"}`, 0, nil},
		{config.APIGenerate, `{"text":["a","b"]}`, 2, nil},
		{config.APIGenerate, `{"input_ids":[1,2]}`, 0, nil},
		{config.APIGenerate, `{"input_ids":[[1],[2]]}`, 2, nil},
		{config.APIResponses, `{"input":["a","b"]}`, 0, nil},
	}
	for _, tt := range tests {
		rooms := 0
		edit, err := SGLang(req(t, tt.api, tt.body), &prefillEP, func() uint64 { rooms++; return ^uint64(0) })
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: err %v, want %v", tt.body, err, tt.err)
			continue
		}
		if err != nil {
			continue
		}
		out := edit.Apply([]byte(tt.body))
		room := gjson.GetBytes(out, "bootstrap_room")
		switch {
		case tt.items == 0 && (rooms != 1 || room.Raw != "9223372036854775807"):
			t.Errorf("%s: single request got %d rooms: %s", tt.body, rooms, out)
		case tt.items > 0 && (rooms != tt.items || len(room.Array()) != tt.items ||
			len(gjson.GetBytes(out, "bootstrap_host").Array()) != tt.items ||
			len(gjson.GetBytes(out, "bootstrap_port").Array()) != tt.items):
			t.Errorf("%s: want %d items: %s", tt.body, tt.items, out)
		}
	}
}

func TestSGLangDecodeLeavesBodyInPlace(t *testing.T) {
	in := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`)
	edit, err := SGLang(req(t, config.APIChat, string(in)), &prefillEP, func() uint64 { return 7 })
	if err != nil {
		t.Fatal(err)
	}
	if edit.Drain != 1 || string(edit.Prefix) != `{"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":7,` {
		t.Errorf("edit = drain %d prefix %s", edit.Drain, edit.Prefix)
	}
}

func TestOrchestratedDecodeErrors(t *testing.T) {
	r := req(t, config.APIChat, `{"messages":[]}`)
	if _, err := OrchestratedDecode(r, []byte(`[1]`), &prefillEP, nil); !errors.Is(err, ErrNotObject) {
		t.Errorf("list params: %v", err)
	}
	edit, err := OrchestratedDecode(r, []byte(`{"remote_host":"10.0.0.5"}`), &config.Endpoint{Name: "c", Cluster: "c"}, nil)
	if err != nil || string(edit.Apply([]byte(`{"messages":[]}`))) != `{"kv_transfer_params":{"remote_host":"10.0.0.5"},"messages":[]}` {
		t.Errorf("endpoint without host must keep the engine's remote_host: %v %s", err, edit.Prefix)
	}
}

func FuzzParsePrefillAnswer(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"text":"a"}],"kv_transfer_params":{"first_tok":1,"remote_host":"h"}}`,
		`{"kv_transfer_params":null}`, `{"kv_transfer_params":{}}`, `{"choices":{"text":1}}`, `nope`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParsePrefillAnswer(b)
		if err != nil {
			return
		}
		if (a.KV == KVPresent) != (a.KVParams != nil) {
			t.Fatalf("KV %v with params %q", a.KV, a.KVParams)
		}
		if a.KVParams != nil {
			if o, err := ParseObject(a.KVParams); err != nil || o.Len() == 0 {
				t.Fatalf("params %q: %v", a.KVParams, err)
			}
		}
		if r := gjson.ParseBytes(a.First.Text); r.Type != gjson.String || r.Raw != string(a.First.Text) {
			t.Fatalf("first token text %q is not one JSON string", a.First.Text)
		}
		if a.First.OK && a.First.Token < 0 {
			t.Fatalf("negative first token %d", a.First.Token)
		}
	})
}

func FuzzParseTokenizeAnswer(f *testing.F) {
	f.Add([]byte(`{"tokens":[1,2,3],"count":3}`))
	f.Add([]byte(`{"tokens":[]}`))
	f.Add([]byte(`{"tokens":[1,[2]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tokens, err := ParseTokenizeAnswer(b)
		if err != nil {
			return
		}
		ids := gjson.ParseBytes(tokens).Array()
		if len(ids) == 0 {
			t.Fatalf("empty token list %q accepted", tokens)
		}
		for _, id := range ids {
			if id.Type != gjson.Number || id.Num < 0 || strings.ContainsAny(id.Raw, ".eE-") {
				t.Fatalf("token %q accepted in %q", id.Raw, tokens)
			}
		}
		head, tail := withElem(tokens, 7)
		out := append(append([]byte(nil), head...), tail...)
		if n := len(gjson.ParseBytes(out).Array()); n != len(ids)+1 || !gjson.ValidBytes(out) {
			t.Fatalf("appendElem(%q) = %q", tokens, out)
		}
	})
}

func FuzzRequestID(f *testing.F) {
	f.Add("3f2b8c1e-0a4d-4e5f-9b6a-7c8d9e0f1a2b")
	f.Add("a b")
	f.Fuzz(func(t *testing.T, header string) {
		id := RequestID(header, [16]byte{1})
		if id != header && id != UUIDv4([16]byte{1}) {
			t.Fatalf("RequestID(%q) = %q", header, id)
		}
		if !wellFormedRequestID(id) {
			t.Fatalf("RequestID(%q) = %q is not well-formed", header, id)
		}
	})
}

// FuzzValidatedRequest: on any body NewRequest accepts, NewValidatedRequest
// (the plugin's path once tokenest validated the body) indexes and sanitises
// identically.
func FuzzValidatedRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hi","kv_transfer_params":{"x":1},"stream":true}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"}],"bootstrap_room":5,"n":2}`))
	f.Add([]byte(` { "a" : [1, {"b": "\u00e9"}] , "a": null } `))
	f.Add([]byte(`{"stream":true,"max_tokens":5,"stream":false,"max_completion_tokens":3,"min_tokens":1,"stream_options":{},"max_output_tokens":2,"max_tokens":9,"max_completion_tokens":4}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		want, err := NewRequest(config.APIChat, body)
		if err != nil {
			return
		}
		got, err := NewValidatedRequest(config.APIChat, body)
		if err != nil {
			t.Fatalf("validated body rejected: %v", err)
		}
		if got.Removed != want.Removed || string(got.Direct().Apply(body)) != string(want.Direct().Apply(body)) || got.Body.Len() != want.Body.Len() {
			t.Fatalf("NewValidatedRequest differs from NewRequest on %q", body)
		}
		checkIndexed(t, body, want)
	})
}

// Issue 31: a batched completion cannot be disaggregated in nixl and
// orchestrated modes (vLLM's prefill answers 400); it goes to a decoder.
func TestDisaggregable(t *testing.T) {
	chat, comp := config.APIChat, config.APICompletions
	tests := []struct {
		mode   config.Mode
		api    config.API
		body   string
		reason string // "" = disaggregable
	}{
		{config.ModeNIXL, comp, `{"prompt":"x"}`, ""},
		{config.ModeNIXL, comp, `{"prompt":[1,2,3]}`, ""},
		{config.ModeNIXL, comp, `{"prompt":[]}`, ""}, // the engine's to reject
		{config.ModeNIXL, comp, `{"prompt":["a","b"]}`, "batched prompt"},
		{config.ModeNIXL, comp, `{"prompt":[[1,2],[3]]}`, "batched prompt"},
		{config.ModeOrchestrated, comp, `{"prompt":["a"]}`, "batched prompt"},
		{config.ModeNIXL, chat, `{"messages":[{"role":"user","content":"x"}],"prompt":["a","b"]}`, ""},
		{config.ModeSGLang, comp, `{"prompt":["a","b"]}`, ""},
		{config.ModeLMCache, comp, `{"prompt":["a","b"]}`, "batched prompt"},
		{config.ModeLMCache, comp, `{"prompt":"x","echo":true}`, "echo"},
	}
	for _, tt := range tests {
		r, err := NewRequest(tt.api, []byte(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		err = Disaggregable(tt.mode, r)
		switch {
		case tt.reason == "" && err != nil:
			t.Errorf("%s %s: %v, want disaggregable", tt.mode, tt.body, err)
		case tt.reason != "" && (!errors.Is(err, ErrNotEligible) || !strings.HasSuffix(err.Error(), ": "+tt.reason)):
			t.Errorf("%s %s: %v, want ErrNotEligible: %s", tt.mode, tt.body, err, tt.reason)
		}
	}
}

// checkIndexed checks that NewIndexedRequest, from tokenest's index of
// body, and the same rebound to a copy of body, give what NewRequest gave
// (want): the same members, prefill and decode bodies.
func checkIndexed(t *testing.T, body []byte, want Request) {
	t.Helper()
	// from tokenest's index: the same members, the same edits, and
	// the same again rebound to a copy of the body
	var x tokenest.Index
	if _, err := tokenest.EstimateNear(body, "/v1/chat/completions", tokenest.Default, 0, &x); err == tokenest.ErrNotJSON {
		t.Fatalf("NewRequest accepts a body tokenest calls not JSON: %q", body)
	}
	if !x.Complete() {
		t.Fatalf("no complete index of %q", body)
	}
	ix, err := NewIndexedRequest(config.APIChat, body, &x)
	if err != nil {
		t.Fatalf("indexed body rejected: %v", err)
	}
	again, ok := ix.Detach().Rebind(append([]byte(nil), body...))
	if !ok {
		t.Fatal("Rebind refused the same body")
	}
	if _, ok := ix.Detach().Rebind(append([]byte(" "), body[:len(body)-1]...)); ok && len(ix.Body.members) > 0 {
		t.Fatalf("Rebind took a body shifted by one byte: %q", body)
	}
	// the decode edits from the head of the body alone
	d := ix.Detach()
	head, ok := d.RebindHead(append([]byte(nil), body[:d.DecodeHead()]...))
	if !ok {
		t.Fatalf("RebindHead refused the first %d bytes of %q", d.DecodeHead(), body)
	}
	kv, ep, answer := []byte(`{"remote_host":"a","x":[1,2]}`), &config.Endpoint{Name: "p", Host: "10.1.1.1"}, []byte(`{"id":"x"}`)
	if g, w := NIXLDecode(head, kv).Apply(body), NIXLDecode(want, kv).Apply(body); string(g) != string(w) {
		t.Fatalf("decode body from the head %q, want %q", g, w)
	}
	// and from the offsets alone, when the edit needs no byte of the body
	if e, ok := NIXLDecodeDetached([]byte("used room"), d, kv); ok != (d.DecodeHead() == 0) {
		t.Fatalf("NIXLDecodeDetached ok %v with head %d", ok, d.DecodeHead())
	} else if w := NIXLDecode(want, kv); ok && (string(e.Prefix) != string(w.Prefix) || e.Drain != w.Drain) {
		t.Fatalf("NIXLDecodeDetached %q drain %d, want %q drain %d", e.Prefix, e.Drain, w.Prefix, w.Drain)
	}
	// indexing into a room that held another request
	room := &Room{}
	if _, err := NewIndexedRequestIn(config.APIChat, []byte(`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}`), mustIndex(t, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}`), room); err != nil {
		t.Fatal(err)
	}
	if r, err := NewIndexedRequestIn(config.APIChat, body, &x, room); err != nil || !slices.Equal(r.Body.members, want.Body.members) || r.Removed != want.Removed {
		t.Fatalf("indexed in a used room: %+v %v, want %+v", r.Body.members, err, want.Body.members)
	}
	g, errG := OrchestratedDecode(head, kv, ep, answer)
	w, errW := OrchestratedDecode(want, kv, ep, answer)
	if (errG == nil) != (errW == nil) || errG == nil && string(g.Apply(body)) != string(w.Apply(body)) {
		t.Fatalf("orchestrated decode body from the head %q (%v), want %q (%v)", g.Apply(body), errG, w.Apply(body), errW)
	}
	if n := d.DecodeHead(); n > 0 {
		if _, ok := d.RebindHead(append([]byte(" "), body[:n-1]...)); ok {
			t.Fatalf("RebindHead took a head shifted by one byte: %q", body)
		}
	}
	for _, r := range []Request{ix, again} {
		if !slices.Equal(r.Body.members, want.Body.members) || r.Body.close != want.Body.close || r.Removed != want.Removed {
			t.Fatalf("indexed members %+v close %d, scanned %+v close %d (%q)", r.Body.members, r.Body.close, want.Body.members, want.Body.close, body)
		}
		kv := []byte(`{"a":1}`)
		if g, w := NIXLDecode(r, kv).Apply(body), NIXLDecode(want, kv).Apply(body); string(g) != string(w) {
			t.Fatalf("decode body %q, want %q", g, w)
		}
		if g, w := NIXLPrefill(r), NIXLPrefill(want); string(g) != string(w) {
			t.Fatalf("prefill body %q, want %q", g, w)
		}
		for _, api := range []config.API{config.APIChat, config.APICompletions, config.APIResponses} {
			r := r
			r.API = api
			if g, w := NIXLPrefillTo([]byte("used"), r), r.Body.Build(nixlPrefillEdits(r)...); string(g) != "used"+string(w) {
				t.Fatalf("%s prefill body %q, the general editor's %q", api, g, w)
			}
		}
	}
}

// TestIndexedRequestLong is FuzzValidatedRequest's check on bodies long
// enough for tokenest to read their prompt in part.
func TestIndexedRequestLong(t *testing.T) {
	long := strings.Repeat(`a long prompt \"quoted\" \u00e9 中文 `, 4000)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"` + long + `"}],"kv_transfer_params":{"x":1},"max_tokens":9}`,
		`{"kv_transfer_params":{"x":1} , "messages":[{"role":"user","content":"` + long + `"}],"bootstrap_room":5,"stream":true}`,
		`{"messages":[{"role":"user","content":"` + long + `"}],"messages":[{"role":"user","content":"x"}]}`,
	} {
		want, err := NewRequest(config.APIChat, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		checkIndexed(t, []byte(body), want)
	}
}

// prefillAnswerByObject is ParsePrefillAnswer as it was written over
// Object (a full index of the answer, then of its parts): the reference
// the one-pass reader must agree with.
func prefillAnswerByObject(body []byte) (PrefillAnswer, error) {
	o, err := ParseObject(body)
	if err != nil {
		return PrefillAnswer{}, err
	}
	var a PrefillAnswer
	kv := o.Raw("kv_transfer_params")
	switch {
	case kv == nil:
		a.KV = KVAbsent
	case kv[0] == 'n':
		a.KV = KVNull
	case kv[0] != '{':
		a.KV = KVNotObject
	default:
		params, _ := ParseObject(kv)
		if params.Len() == 0 {
			a.KV = KVEmpty
			break
		}
		a.KV, a.KVParams = KVPresent, kv
		if t := params.Get("first_tok"); t.Type == gjson.Number && isUint([]byte(t.Raw)) {
			a.First.OK, a.First.Token = true, t.Int()
		}
	}
	a.First.Text = emptyString
	eachElem(o.Raw("choices"), func(c []byte) bool {
		choice, err := scanObject(c)
		if err != nil {
			return false
		}
		if t := choice.Raw("text"); t != nil && t[0] == '"' {
			a.First.Text = t
		}
		if f := choice.Get("finish_reason"); f.Type == gjson.String {
			a.First.FinishReason = f.Str
		}
		return false
	})
	str := func(key string) []byte {
		if v := o.Raw(key); v != nil && v[0] == '"' {
			return v
		}
		return nil
	}
	a.First.ID, a.First.Model = str("id"), str("model")
	if c := o.Get("created"); c.Type == gjson.Number {
		a.First.Created = c.Int()
	}
	return a, nil
}

// FuzzPrefillAnswerReference: ParsePrefillAnswerIn, with a reused index,
// reads every answer as the Object-based reader did.
func FuzzPrefillAnswerReference(f *testing.F) {
	for _, s := range []string{
		`{"id":"cmpl-1","created":17,"model":"m","choices":[{"text":"Hi","finish_reason":"length"}],"kv_transfer_params":{"remote_host":"h" , "tp_size":1}}`,
		`{"choices":[{"text":" Paris\n","finish_reason":null},{"text":"x"}],"kv_transfer_params":{"first_tok":12366,"first_tok":7}}`,
		`{"kv_transfer_params":null}`, `{"kv_transfer_params": { } }`, `{"choices":{"text":1}}`, `nope`,
		`{"k\u0076_transfer_params":{"first_tok":3},"choices":[{"fin\u0069sh_reason":"st\"op"}]}`,
		`{"id":5,"model":null,"created":"x","choices":[[]],"kv_transfer_params":{"first_tok":1.5}}`,
	} {
		f.Add([]byte(s))
	}
	var x tokenest.Index
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := prefillAnswerByObject(b)
		got, err := ParsePrefillAnswerIn(b, &x)
		if (err != nil) != (werr != nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("error %v, reference %v", err, werr)
		}
		// the nixl reader: the same verdict and kv_transfer_params
		nixl, nerr := ParseNIXLAnswerIn(b, &x)
		if (nerr != nil) != (werr != nil) || (nerr != nil && nerr.Error() != werr.Error()) ||
			nixl.KV != want.KV || string(nixl.KVParams) != string(want.KVParams) {
			t.Fatalf("nixl reader %+v %v, reference %+v %v", nixl, nerr, want, werr)
		}
		if err != nil {
			return
		}
		g, w := got.First, want.First
		if got.KV != want.KV || string(got.KVParams) != string(want.KVParams) || g.OK != w.OK || g.Token != w.Token ||
			string(g.Text) != string(w.Text) || g.FinishReason != w.FinishReason || string(g.ID) != string(w.ID) ||
			string(g.Model) != string(w.Model) || g.Created != w.Created {
			t.Fatalf("got %+v\nreference %+v", got, want)
		}
	})
}

// mustIndex is tokenest's complete index of the chat body b.
func mustIndex(t *testing.T, b string) *tokenest.Index {
	t.Helper()
	var x tokenest.Index
	if _, err := tokenest.EstimateNear([]byte(b), "/v1/chat/completions", tokenest.Default, 0, &x); err == tokenest.ErrNotJSON || !x.Complete() {
		t.Fatalf("no index of %q: %v", b, err)
	}
	return &x
}

// isControlField names exactly controlFields.
func TestIsControlField(t *testing.T) {
	for _, k := range controlFields {
		if !isControlField(k) {
			t.Errorf("%s is a control field", k)
		}
	}
	for _, k := range []string{"", "model", "stream", "kv_transfer_param", "bootstrap", "disagg_spec "} {
		if isControlField(k) {
			t.Errorf("%q is not a control field", k)
		}
	}
}
