package trace

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest"
)

func TestReadErrors(t *testing.T) {
	good := `{"at_ms": 1, "segments": [{"id": "a", "tokens": 10}], "output_tokens": 5}`
	tests := []struct {
		name, in string
		line     int
		msg      string
	}{
		{"bad json", good + "\n{\"at_ms\": \n", 2, "not a request object"},
		{"unknown field", good + "\n\n" + `{"at_ms": 1, "segments": [{"id": "a", "tokens": 10}], "output_token": 5}`, 3, "unknown field"},
		{"no segments", `{"at_ms": 1, "segments": [], "output_tokens": 5}`, 1, "segments"},
		{"negative time", `{"at_ms": -1, "segments": [{"id": "a", "tokens": 10}], "output_tokens": 5}`, 1, "at_ms"},
		{"bad api", `{"at_ms": 1, "segments": [{"id": "a", "tokens": 10}], "output_tokens": 5, "api": "embed"}`, 1, "api"},
		{"bad role", `{"at_ms": 1, "segments": [{"id": "a", "tokens": 10, "role": "robot"}], "output_tokens": 5}`, 1, "role"},
		{"zero tokens", `{"at_ms": 1, "segments": [{"id": "a", "tokens": 0}], "output_tokens": 5}`, 1, "tokens"},
		{"no output", `{"at_ms": 1, "segments": [{"id": "a", "tokens": 3}]}`, 1, "output_tokens"},
		{"id changes size", good + "\n" + `{"at_ms": 2, "segments": [{"id": "a", "tokens": 11}], "output_tokens": 5}`, 2, `"a" has 11 tokens, but 10 on line 1`},
		{"two values", good + good, 1, "more than one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in))
			var te *Error
			if !errors.As(err, &te) || te.Line != tc.line || !strings.Contains(te.Msg, tc.msg) {
				t.Fatalf("got %v, want line %d containing %q", err, tc.line, tc.msg)
			}
		})
	}
	if _, err := Read(strings.NewReader("\n\n")); err == nil {
		t.Error("empty trace accepted")
	}
}

func TestReadDefaultsAndOrder(t *testing.T) {
	in := `{"at_ms": 12.5, "segments": [{"id": "sys-1", "tokens": 800, "role": "system"}, {"id": "ctx-t17", "tokens": 6000, "role": "user"}, {"id": "q-88123", "tokens": 1200, "role": "user"}], "output_tokens": 128, "api": "chat"}
{"at_ms": 3, "segments": [{"id": "p", "tokens": 10}], "output_tokens": 1}`
	reqs, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].AtMs != 3 || reqs[0].API != "chat" || reqs[0].Segments[0].Role != "user" || reqs[1].PromptTokens() != 8000 {
		t.Fatalf("%+v", reqs)
	}
	var buf bytes.Buffer
	if err := Write(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	again, err := Read(&buf)
	if err != nil || len(again) != 2 || again[1].Segments[2].ID != "q-88123" {
		t.Fatalf("round trip: %v %+v", err, again)
	}
}

// A segment renders to the same text every time, of about its token count
// by the filter's own estimator.
func TestRenderDeterministicAndSized(t *testing.T) {
	for _, n := range []int{20, 300, 1200, 6000, 12000} {
		for _, api := range []string{"chat", "completions"} {
			req := Request{API: api, OutputTokens: 1, Segments: []Segment{{ID: "ctx-t17", Tokens: n, Role: "user"}}}
			a, b := NewRenderer().Body(&req), NewRenderer().Body(&req)
			if !bytes.Equal(a, b) {
				t.Fatal("rendering is not deterministic")
			}
			est, err := tokenest.Estimate(a, Path(&req), tokenest.Default)
			if err != nil {
				t.Fatal(err)
			}
			if d := float64(est.Tokens-n) / float64(n); n >= 300 && (d > 0.10 || d < -0.10) {
				t.Errorf("%s %d tokens: estimated %d", api, n, est.Tokens)
			}
		}
	}
	r := NewRenderer()
	if r.Text(Segment{ID: "a", Tokens: 100}) == r.Text(Segment{ID: "b", Tokens: 100}) {
		t.Error("different ids render the same text")
	}
}

func TestGeneratorsDeterministic(t *testing.T) {
	for _, w := range Workloads {
		l := Load{Rate: 5, Requests: 200, Seed: 7}
		a, err := w.Generate(l)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := w.Generate(l)
		var ba, bb bytes.Buffer
		Write(&ba, a)
		Write(&bb, b)
		if !bytes.Equal(ba.Bytes(), bb.Bytes()) {
			t.Errorf("%s: not deterministic", w.Name)
		}
		// Generated traces parse back (ids keep their sizes).
		if _, err := Read(&ba); err != nil {
			t.Errorf("%s: %v", w.Name, err)
		}
		if r := Rate(a); r < 3.5 || r > 6.5 {
			t.Errorf("%s: rate %.2f, want about 5", w.Name, r)
		}
	}
	ramp, _ := Workloads[0].Generate(Load{Rate: 1, RampTo: 20, Requests: 400, Seed: 1})
	if first, last := Rate(ramp[:100]), Rate(ramp[300:]); last < 4*first {
		t.Errorf("ramp: rate %.1f then %.1f", first, last)
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"at_ms": 12.5, "segments": [{"id": "sys-1", "tokens": 800, "role": "system"}], "output_tokens": 128, "api": "chat"}`))
	f.Add([]byte("{\"at_ms\": 1, \"segments\": [{\"id\": \"a\", \"tokens\": 10}], \"output_tokens\": 5}\n{}"))
	f.Add([]byte("\n\n[1,2]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		reqs, err := Read(bytes.NewReader(b))
		if err != nil {
			var te *Error
			if errors.As(err, &te) && te.Line < 1 {
				t.Fatalf("line %d", te.Line)
			}
			return
		}
		for i := range reqs {
			r := reqs[i]
			if r.Check() != nil || r.PromptTokens() < 1 {
				t.Fatalf("accepted an invalid request %+v", r)
			}
		}
	})
}
