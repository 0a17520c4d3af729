package mocks

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	for _, tc := range []struct {
		text string
		n    int
	}{
		{"", 0},
		{"   ", 0},
		{"hi", 1},
		{"word", 1},
		{"hello", 2},       // "hell" + "o"
		{"  a \n b\t", 2},  // whitespace of any kind separates words
		{"tokenizer", 3},   // 4 + 4 + 1 bytes
		{"héllo wörld", 4}, // bytes, not runes: "hél"+"lo", "wör"+"ld"
	} {
		ids := Tokenize(tc.text)
		if len(ids) != tc.n {
			t.Errorf("Tokenize(%q) = %v, want %d tokens", tc.text, ids, tc.n)
		}
		for _, id := range ids {
			if id < promptVocabBase || id >= vocabSize {
				t.Errorf("Tokenize(%q): id %d outside the prompt vocabulary", tc.text, id)
			}
		}
		if !slices.Equal(ids, Tokenize(tc.text)) {
			t.Errorf("Tokenize(%q) is not deterministic", tc.text)
		}
	}
	if got := Tokenize("alpha bravo"); !slices.Equal(got, []int{outputVocabBase, outputVocabBase + 1}) {
		t.Errorf("output words must map to their output ids, got %v", got)
	}
	if a, b := Tokenize("abcd"), Tokenize("abce"); slices.Equal(a, b) {
		t.Errorf("different pieces got the same id %v", a)
	}
}

func TestGenerateLimits(t *testing.T) {
	prompt := Tokenize("a fixed prompt for the limits table")
	natural := generate(prompt, limits{max: 1 << 20})
	if natural.finish != "stop" {
		t.Fatalf("a prompt must end naturally, got %+v", natural)
	}
	n := len(natural.ids)
	for _, tc := range []struct {
		name       string
		lim        limits
		wantLen    int
		wantFinish string
	}{
		{"natural end", limits{max: n + 10}, n, "stop"},
		{"max cuts", limits{max: 1}, 1, "length"},
		{"ignore_eos runs to max", limits{max: n + 10, ignoreEOS: true}, n + 10, "length"},
		{"min_tokens holds eos back", limits{max: n + 40, min: n + 5}, -1, "stop"},
		{"min equals max", limits{max: n + 3, min: n + 3}, n + 3, "length"},
	} {
		g := generate(prompt, tc.lim)
		if tc.wantLen >= 0 && len(g.ids) != tc.wantLen {
			t.Errorf("%s: %d tokens, want %d", tc.name, len(g.ids), tc.wantLen)
		}
		if len(g.ids) < tc.lim.min || len(g.ids) > tc.lim.max {
			t.Errorf("%s: %d tokens outside [%d, %d]", tc.name, len(g.ids), tc.lim.min, tc.lim.max)
		}
		if g.finish != tc.wantFinish {
			t.Errorf("%s: finish %q, want %q", tc.name, g.finish, tc.wantFinish)
		}
		if !slices.Equal(g.ids[:min(len(g.ids), n)], natural.ids[:min(len(g.ids), n)]) {
			t.Errorf("%s: the tokens before the natural end must not change", tc.name)
		}
	}
}

// A decode that continues from prompt+[first token] (LMCache) must produce what the
// single request would have produced after its first token.
func TestGenerateContinuesFromFirstToken(t *testing.T) {
	checked := 0
	for i := range 200 {
		prompt := Tokenize(longPrompt(5 + i%40))
		prompt = append(prompt, Tokenize(strings.Repeat("x", i))...)
		full := generate(prompt, limits{max: 20})
		first := generate(prompt, limits{max: 1})
		if first.first == eosToken {
			continue // the whole answer is empty
		}
		checked++
		if first.first != full.ids[0] || first.text() != tokenText(full.ids[0]) {
			t.Fatalf("prompt %d: prefill token %d, full generation starts %v", i, first.first, full.ids)
		}
		rest := generate(append(slices.Clone(prompt), first.first), limits{max: 19})
		if !slices.Equal(rest.ids, full.ids[1:]) || rest.finish != full.finish {
			t.Fatalf("prompt %d: continuation %v (%s), want %v (%s)", i, rest.ids, rest.finish, full.ids[1:], full.finish)
		}
	}
	if checked < 150 {
		t.Fatalf("only %d of 200 prompts had a first token", checked)
	}
}

func TestChatTemplate(t *testing.T) {
	for _, tc := range []struct {
		name, messages string
		addGen         bool
		want, wantErr  string
	}{
		{"string content", `[{"role":"user","content":"hi"}]`, true, "<|user|>\nhi\n<|assistant|>\n", ""},
		{"no generation prompt", `[{"role":"user","content":"hi"}]`, false, "<|user|>\nhi\n", ""},
		{"parts", `[{"role":"system","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},{"type":"text","text":"b"}]}]`, false, "<|system|>\nab\n", ""},
		{"null content", `[{"role":"assistant","content":null}]`, false, "<|assistant|>\n\n", ""},
		{"empty", `[]`, true, "", "messages: must not be empty"},
		{"no role", `[{"content":"x"}]`, true, "", "messages[0].role: missing"},
		{"bad content", `[{"role":"user","content":5}]`, true, "", "messages[0].content: want a string or a list of parts"},
		{"not a list", `{"role":"user"}`, true, "", "messages: json: cannot unmarshal"},
	} {
		got, err := chatTemplate(json.RawMessage(tc.messages), tc.addGen)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want prefix %q", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// Every mock tokenizes alike, and /tokenize agrees with what the completion APIs
// count as prompt tokens, so a router's token ids mean the same on P and D.
func TestTokenizeAgreesAcrossInstances(t *testing.T) {
	servers := []*Server{start(t, Config{Kind: VLLM}), start(t, Config{Kind: LMCache, Role: Decode}), start(t, Config{Kind: SGLang})}
	messages := []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is a prefill?"}}
	var first [2][]int
	for i, s := range servers {
		var got [2][]int
		for j, body := range []map[string]any{
			{"model": "m", "prompt": "the same prompt everywhere"},
			{"model": "m", "messages": messages},
		} {
			r := post(t, s.URL()+"/tokenize", body)
			var tr struct {
				Count       int   `json:"count"`
				MaxModelLen int   `json:"max_model_len"`
				Tokens      []int `json:"tokens"`
			}
			if r.status != 200 || json.Unmarshal(r.body, &tr) != nil || tr.Count != len(tr.Tokens) || tr.MaxModelLen != 8192 {
				t.Fatalf("%s /tokenize: %d %s", s.cfg.Name, r.status, r.body)
			}
			got[j] = tr.Tokens
		}
		if i == 0 {
			first = got
		} else if !slices.Equal(got[0], first[0]) || !slices.Equal(got[1], first[1]) {
			t.Errorf("%s tokenizes differently: %v vs %v", s.cfg.Name, got, first)
		}
		chat := post(t, s.URL()+"/v1/chat/completions", map[string]any{"model": "m", "messages": messages, "max_tokens": 2}).json(t)
		if pt := chat["usage"].(map[string]any)["prompt_tokens"].(float64); int(pt) != len(first[1]) {
			t.Errorf("%s: chat prompt_tokens %v, /tokenize counted %d", s.cfg.Name, pt, len(first[1]))
		}
	}
	if !slices.Equal(first[0], Tokenize("the same prompt everywhere")) {
		t.Errorf("/tokenize differs from Tokenize")
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "hello world", "alpha  bravo\tcharlie", "héllo wörld", "\x00\xff", strings.Repeat("ab ", 50)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := Tokenize(s)
		if len(ids) > len(s) {
			t.Fatalf("%d tokens for %d bytes", len(ids), len(s))
		}
		for _, id := range ids {
			if id < outputVocabBase || id >= vocabSize {
				t.Fatalf("id %d out of range", id)
			}
		}
		// Generated text tokenizes back to the ids that produced it.
		g := generate(ids, limits{max: 8})
		if back := Tokenize(g.text()); !slices.Equal(back, g.ids) {
			t.Fatalf("round trip: %v -> %q -> %v", g.ids, g.text(), back)
		}
	})
}
