package sse

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/tidwall/gjson"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs\n got: %s\nwant: %s", path, got, want)
	}
}

func firstToken(t *testing.T) connector.FirstToken {
	a, err := connector.ParsePrefillAnswer(read(t, "prefill_answer.json"))
	if err != nil || !a.First.OK {
		t.Fatalf("prefill answer: %v %+v", err, a)
	}
	return a.First
}

// convert runs a decoder stream, cut into the given chunks, through a
// Splitter and a Stream, as the plugin does.
func convert(t *testing.T, s *Stream, ft connector.FirstToken, chunks [][]byte) []byte {
	out := s.AppendFirst(nil, ft)
	sp := NewSplitter(1 << 16)
	for _, c := range chunks {
		err := sp.Feed(c, func(e Event) error {
			var err error
			out, err = s.AppendEvent(out, e.Data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.End(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStreamGolden converts a recorded decoder stream for a chat client and
// a completion client; the output must not depend on where the stream was cut.
func TestStreamGolden(t *testing.T) {
	stream := read(t, "decode_stream.sse")
	ft := firstToken(t)
	for _, tt := range []struct {
		name string
		chat bool
		id   string
	}{
		{"chat_stream", true, ""},
		{"chat_stream_fixed_id", true, "chatcmpl-req-1"},
		{"completion_stream", false, ""},
		{"completion_stream_fixed_id", false, "cmpl-req-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			whole := convert(t, NewStream(tt.chat, tt.id), ft, [][]byte{stream})
			golden(t, tt.name+".out.sse", whole)
			for i := 0; i <= len(stream); i++ {
				cut := convert(t, NewStream(tt.chat, tt.id), ft, [][]byte{stream[:i], stream[i:]})
				if !bytes.Equal(cut, whole) {
					t.Fatalf("cut at %d changes the output:\n%s", i, cut)
				}
			}
			checkEvents(t, whole, tt.chat)
		})
	}
}

// checkEvents asserts the client-visible contract of a converted stream.
func checkEvents(t *testing.T, out []byte, chat bool) {
	t.Helper()
	events := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Errorf("last event %q", events[len(events)-1])
	}
	roles, text := 0, ""
	var usage gjson.Result
	for _, e := range events[:len(events)-1] {
		j := strings.TrimPrefix(e, "data: ")
		if !gjson.Valid(j) {
			t.Fatalf("event is not JSON: %s", e)
		}
		c := gjson.Parse(j)
		wantObject := "text_completion"
		if chat {
			wantObject = "chat.completion.chunk"
		}
		if c.Get("object").Str != wantObject {
			t.Errorf("object %q in %s", c.Get("object").Str, j)
		}
		if c.Get("choices.0.delta.role").Exists() {
			roles++
		}
		text += c.Get("choices.0.delta.content").Str + c.Get("choices.0.text").Str
		if u := c.Get("usage"); u.IsObject() {
			usage = u
		}
	}
	if chat && roles != 1 {
		t.Errorf("role sent %d times", roles)
	}
	if want := ` Paris is the capital "café" ✓`; text != want {
		t.Errorf("client text %q, want %q", text, want)
	}
	if usage.Get("prompt_tokens").Int() != 7 || usage.Get("completion_tokens").Int() != 5 || usage.Get("total_tokens").Int() != 12 {
		t.Errorf("usage not shifted by the first token: %s", usage.Raw)
	}
}

func TestAppendEvent(t *testing.T) {
	tests := []struct {
		name string
		chat bool
		in   string
		want string
		err  error
	}{
		{"done", true, `[DONE]`, "data: [DONE]\n\n", nil},
		{"engine error passes", true, `{"error":{"message":"boom","code":500}}`, "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n", nil},
		{"completion untouched", false, `{"id":"cmpl-1","choices":[{"index":0,"text":"a"}],"usage":null}`,
			"data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"a\"}],\"usage\":null}\n\n", nil},
		{"completion usage shifted", false, `{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}`,
			"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1,\"total_tokens\":3}}\n\n", nil},
		{"chat first delta carries the role", true, `{"id":"cmpl-9","created":5,"model":"m","choices":[{"index":0,"text":"a\nb","finish_reason":null}]}`,
			"data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"a\\nb\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", nil},
		{"chat final empty delta", true, `{"id":"x","created":5,"model":"m","choices":[{"index":0,"text":"","finish_reason":"length","stop_reason":null}]}`,
			"data: {\"id\":\"chatcmpl-x\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n", nil},
		{"chat odd usage kept", true, `{"choices":[],"usage":{"prompt_tokens":"7"}}`,
			"data: {\"id\":\"chatcmpl-pdroute\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"\",\"choices\":[],\"usage\":{\"prompt_tokens\":\"7\"}}\n\n", nil},
		{"not json", true, `{"id":`, "", ErrBadChunk},
		{"not an object", false, `[1]`, "", ErrBadChunk},
		{"chat without choices", true, `{"id":"x"}`, "", ErrBadChunk},
		{"chat choice without text", true, `{"choices":[{"index":0,"delta":{}}]}`, "", ErrBadChunk},
		{"chat choice index out of range", true, `{"choices":[{"index":5000,"text":"a"}]}`, "", ErrBadChunk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := NewStream(tt.chat, "").AppendEvent([]byte("prev|"), []byte(tt.in))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if err == nil && string(out) != "prev|"+tt.want {
				t.Errorf("got  %q\nwant %q", out, "prev|"+tt.want)
			}
		})
	}
}

func TestAppendFirstFromAZeroToken(t *testing.T) {
	for _, chat := range []bool{true, false} {
		out := NewStream(chat, "").AppendFirst(nil, connector.FirstToken{})
		j := strings.TrimSuffix(strings.TrimPrefix(string(out), "data: "), "\n\n")
		if !gjson.Valid(j) {
			t.Errorf("chat=%v: %s", chat, out)
		}
	}
}

func TestRolePerChoice(t *testing.T) {
	s := NewStream(true, "id")
	out, err := s.AppendEvent(nil, []byte(`{"choices":[{"index":1,"text":"a"},{"index":0,"text":"b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ = s.AppendEvent(out, []byte(`{"choices":[{"index":1,"text":"c"},{"index":0,"text":"d"}]}`))
	if n := strings.Count(string(out), `"role":"assistant"`); n != 2 {
		t.Errorf("role sent %d times over two choices: %s", n, out)
	}
}

func TestAnswerGolden(t *testing.T) {
	ft := firstToken(t)
	decode := read(t, "decode_answer.json")
	for _, tt := range []struct {
		name string
		chat bool
		id   string
	}{
		{"chat_answer", true, ""},
		{"completion_answer", false, ""},
		{"completion_answer_fixed_id", false, "cmpl-req-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Answer(tt.chat, tt.id, ft, decode)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name+".out.json", out)
			a := gjson.ParseBytes(out)
			text := a.Get("choices.0.text").Str
			if tt.chat {
				text = a.Get("choices.0.message.content").Str
				if a.Get("object").Str != "chat.completion" || a.Get("choices.0.message.role").Str != "assistant" {
					t.Errorf("not a chat completion: %s", out)
				}
			}
			if text != " Paris is Paris.\n" {
				t.Errorf("text %q", text)
			}
			if a.Get("usage.prompt_tokens").Int() != 7 || a.Get("usage.completion_tokens").Int() != 5 || a.Get("kv_transfer_params").Exists() {
				t.Errorf("usage or kv_transfer_params: %s", out)
			}
		})
	}
	for _, bad := range []string{`nope`, `{"choices":{}}`, `{"choices":[{"index":0}]}`, `{"choices":[{"index":"0","text":"a"}]}`} {
		if _, err := Answer(true, "", ft, []byte(bad)); !errors.Is(err, ErrBadChunk) {
			t.Errorf("Answer(%s) = %v", bad, err)
		}
	}
}

func TestJoinStrings(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{`"a"`, `"b"`, `"ab"`},
		{`""`, `"b"`, `"b"`},
		{`"a\\"`, `"\"b"`, `"a\\\"b"`},
		{`"\u00e9"`, `"\n"`, `"\u00e9\n"`},
	}
	for _, tt := range tests {
		got := joinStrings([]byte(tt.a), []byte(tt.b))
		if string(got) != tt.want {
			t.Errorf("joinStrings(%s, %s) = %s", tt.a, tt.b, got)
		}
		want := gjson.Parse(tt.a).Str + gjson.Parse(tt.b).Str
		if gjson.ParseBytes(got).Str != want {
			t.Errorf("joinStrings(%s, %s) decodes to %q, want %q", tt.a, tt.b, gjson.ParseBytes(got).Str, want)
		}
	}
}

func TestAppendError(t *testing.T) {
	out := AppendError([]byte("data: {}\n\n"), apierr.PrefillFailed, "prefill-1 answered 500")
	golden(t, "error_event.out.sse", out)
	events, err := collect(NewSplitter(1024), [][]byte{out})
	if err != nil || len(events) != 3 || events[2].data != "[DONE]" {
		t.Fatalf("events %v, err %v", events, err)
	}
	if code := gjson.Get(events[1].data, "error.code").Str; code != "PREFILL_FAILED" {
		t.Errorf("code %q", code)
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte(`{"id":"cmpl-1","choices":[{"index":0,"text":"a","finish_reason":null}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`), true)
	f.Add([]byte(`{"choices":[],"usage":null}`), false)
	f.Add([]byte(`[DONE]`), true)
	f.Fuzz(func(t *testing.T, data []byte, chat bool) {
		out, err := NewStream(chat, "").AppendEvent(nil, data)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(out, []byte("data: ")) || !bytes.HasSuffix(out, []byte("\n\n")) {
			t.Fatalf("not one event: %q", out)
		}
		body := out[len("data: ") : len(out)-2]
		if !bytes.Equal(body, done) && !gjson.ValidBytes(body) {
			t.Fatalf("event data is not JSON: %q (from %q)", body, data)
		}
	})
}

// FuzzAnswer: whatever the decoder answers, Answer either refuses it or
// returns one JSON object.
func FuzzAnswer(f *testing.F) {
	f.Add([]byte(`{"id":"cmpl-1","choices":[{"index":0,"text":"a","finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`), true)
	f.Add([]byte(`{"choices":[{"index":1,"text":""},{"index":0,"text":"\u00e9"}]}`), false)
	ft := connector.FirstToken{OK: true, Token: 1, Text: []byte(`" \"x"`), ID: []byte(`"cmpl-p"`), Model: []byte(`"m"`)}
	f.Fuzz(func(t *testing.T, decode []byte, chat bool) {
		out, err := Answer(chat, "", ft, decode)
		if err != nil {
			return
		}
		if !gjson.ValidBytes(out) || !gjson.ParseBytes(out).IsObject() {
			t.Fatalf("answer is not one JSON object: %q (from %q)", out, decode)
		}
	})
}
