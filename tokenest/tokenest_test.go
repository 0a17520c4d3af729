package tokenest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// requestPath maps a testdata request's name prefix to its path.
func requestPath(name string) string {
	switch strings.SplitN(name, "__", 2)[0] {
	case "chat":
		return "/v1/chat/completions"
	case "completions":
		return "/v1/completions"
	case "responses":
		return "/v1/responses"
	}
	return "/generate"
}

func requests(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/requests/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test requests: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = bytes.TrimSpace(b)
	}
	return out
}

// TestGolden runs every real request body through both methods and
// PrefixKey and compares with testdata/golden (go test -update rewrites it).
func TestGolden(t *testing.T) {
	type golden struct {
		Default   Result `json:"default"`
		Chars4    Result `json:"chars4"`
		PrefixKey uint64 `json:"prefix_key_1024"`
	}
	for name, body := range requests(t) {
		t.Run(name, func(t *testing.T) {
			path := requestPath(name)
			var g golden
			var err error
			if g.Default, err = Estimate(body, path, Default); err != nil {
				t.Fatal(err)
			}
			if g.Chars4, err = Estimate(body, path, Chars4); err != nil {
				t.Fatal(err)
			}
			if g.PrefixKey, err = PrefixKey(body, path, 1024); err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(g, "", "  ")
			got = append(got, '\n')
			file := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("result differs from %s:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}

// TestEstimate checks the shapes with numbers that do not depend on the
// fitted weights: Chars4 counts, token ids, media and template overhead.
func TestEstimate(t *testing.T) {
	tests := []struct {
		name string
		path string
		body string
		m    Method
		want Result // Text and Tools of Default are checked for > 0 only (see wantText)
		// wantText: Default's Text (and Tools when wantTools) must be positive
		wantText, wantTools bool
	}{
		{name: "chars4 string prompt floors", path: "/v1/completions", body: `{"prompt":"abcdefghij"}`, m: Chars4,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "chars4 counts code points, not bytes", path: "/v1/completions", body: `{"prompt":"日本語のテキスト"}`, m: Chars4,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "chars4 decodes escapes and surrogate pairs", path: "/v1/completions", body: `{"prompt":"\u00e9\ud83d\ude00\n\"x"}`, m: Chars4,
			want: Result{Tokens: 1, Method: Chars4, Breakdown: Breakdown{Text: 1}}},
		{name: "chars4 list of strings counts its length (PR #890)", path: "/v1/completions", body: `{"prompt":["a long first prompt","and a second"]}`, m: Chars4,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "chars4 token ids are exact", path: "/v1/completions", body: `{"prompt":[1,2,3]}`, m: Chars4,
			want: Result{Tokens: 3, Exact: true, Method: Chars4, Breakdown: Breakdown{TokenIDs: 3}}},
		{name: "chars4 batched ids count lists (PR #890)", path: "/v1/completions", body: `{"prompt":[[1,2,3],[4]]}`, m: Chars4,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{TokenIDs: 2}}},
		{name: "default batched ids are exact", path: "/v1/completions", body: `{"prompt":[[1,2,3],[4]]}`,
			want: Result{Tokens: 4, Exact: true, Breakdown: Breakdown{TokenIDs: 4}}},
		{name: "default ids with query string", path: "/v1/completions?api-version=1", body: `{"prompt":[0,4294967295]}`,
			want: Result{Tokens: 2, Exact: true, Breakdown: Breakdown{TokenIDs: 2}}},
		{name: "default list of strings sums", path: "/v1/completions", body: `{"prompt":["hello","world"]}`,
			want: Result{Tokens: 2, Breakdown: Breakdown{Text: 2}}, wantText: true},
		{name: "chars4 chat sums text parts then floors", path: "/v1/chat/completions", m: Chars4,
			body: `{"messages":[{"role":"system","content":"abc"},{"role":"user","name":"bob","content":[{"type":"text","text":"defgh"},{"type":"input_text","text":"ignored"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "default chat overhead per message and reply", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"system","content":""},{"role":"user","content":null}]}`,
			want: Result{Tokens: 13, Breakdown: Breakdown{Overhead: 2*perMessage + replyPrimer}}},
		{name: "default chat name, media, tools", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","name":"bob","content":[{"type":"image_url","image_url":{"url":"x","detail":"low"}},{"type":"image_url","image_url":{"url":"y"}},{"type":"input_audio","input_audio":{"data":"","format":"mp3"}},{"type":"file","file":{}}]},{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}],"tools":[{"type":"function","function":{"name":"get_weather"}}]}`,
			want: Result{Breakdown: Breakdown{Images: ImageTokensLow + ImageTokens, Audio: AudioDefaultSeconds * AudioTokensPerSecond,
				OtherMedia: OtherMediaTokens, Overhead: 2*perMessage + perName + perToolCall + toolBlock + perTool + replyPrimer}},
			wantText: true, wantTools: true},
		{name: "default audio duration from WAV header", path: "/v1/chat/completions",
			// 16 kHz 16-bit mono (32000 B/s), 64000 bytes of base64 ≈ 48000 bytes = 1.5 s → 38 tokens
			body: `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"format":"wav","data":"UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA=` + strings.Repeat("A", 64000-60) + `"}}]}]}`,
			want: Result{Breakdown: Breakdown{Audio: 38, Overhead: perMessage + replyPrimer}}},
		{name: "chars4 responses instructions and input", path: "/v1/responses", m: Chars4,
			body: `{"instructions":"abcd","input":[{"role":"user","content":[{"type":"input_text","text":"efgh"}]},{"type":"function_call","name":"f","arguments":"{}"}]}`,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "default responses overheads", path: "/v1/responses",
			body: `{"input":[{"type":"function_call","name":"f","arguments":"{}"},{"type":"function_call_output","output":""},{"type":"reasoning","summary":[]}]}`,
			want: Result{Breakdown: Breakdown{Overhead: perToolCall + perMessage + replyPrimer}}, wantTools: true},
		{name: "generate batched input_ids", path: "/generate", body: `{"input_ids":[[1,2],[3,4,5]]}`,
			want: Result{Tokens: 5, Exact: true, Breakdown: Breakdown{TokenIDs: 5}}},
		{name: "generate ids with images is not exact", path: "/generate", body: `{"input_ids":[1,2],"image_data":"x"}`,
			want: Result{Tokens: 2 + ImageTokens, Breakdown: Breakdown{TokenIDs: 2, Images: ImageTokens}}},
		{name: "chars4 generate text list counts characters", path: "/generate", m: Chars4, body: `{"text":["abcd","efgh"]}`,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "invalid UTF-8 is counted, not rejected", path: "/v1/completions", m: Chars4, body: "{\"prompt\":\"\xff\xfeabcdef\"}",
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "an escaped key is the key it decodes to", path: "/v1/completions", body: `{"pr\u006fmpt":"abcdefgh"}`, m: Chars4,
			want: Result{Tokens: 2, Method: Chars4, Breakdown: Breakdown{Text: 2}}},
		{name: "a key that a name is a prefix of is another key", path: "/v1/completions", body: `{"prompts":"abcdefghijklmnop","prompt":"abcd"}`, m: Chars4,
			want: Result{Tokens: 1, Method: Chars4, Breakdown: Breakdown{Text: 1}}},
		{name: "duplicate key: the last wins, as in Python", path: "/v1/completions", body: `{"prompt":"aaaaaaaaaaaa","prompt":[7]}`,
			want: Result{Tokens: 1, Exact: true, Breakdown: Breakdown{TokenIDs: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Estimate([]byte(tt.body), tt.path, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if tt.m == Default && (tt.wantText != (got.Breakdown.Text > 0) || tt.wantTools != (got.Breakdown.Tools > 0)) {
				t.Errorf("text %d, tools %d; want positive: text %v, tools %v", got.Breakdown.Text, got.Breakdown.Tools, tt.wantText, tt.wantTools)
			}
			if tt.m == Default {
				// The fitted parts vary with the weights; check the rest exactly.
				tt.want.Breakdown.Text, tt.want.Breakdown.Tools = got.Breakdown.Text, got.Breakdown.Tools
				tt.want.Tokens = tt.want.Breakdown.Total()
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if got.Tokens != got.Breakdown.Total() {
				t.Errorf("tokens %d != breakdown total %d", got.Tokens, got.Breakdown.Total())
			}
		})
	}
}

// TestDefaultText checks the Default method on a few texts against their
// cl100k counts, loosely: the accuracy test in internal/calib is the real
// measure.
func TestDefaultText(t *testing.T) {
	for _, tt := range []struct {
		text   string
		cl100k int
	}{
		{"The quick brown fox jumps over the lazy dog.", 10},
		{"敏捷的棕色狐狸跳过了懒狗。", 17},
		{"Съешь же ещё этих мягких французских булок, да выпей чаю.", 27},
		{`{"id": 12345, "name": "widget", "tags": ["a", "b"]}`, 21},
		{"for i := 0; i < len(s); i++ {\n\tsum += s[i]\n}", 21},
	} {
		body, _ := json.Marshal(map[string]string{"prompt": tt.text})
		got, err := Estimate(body, "/v1/completions", Default)
		if err != nil {
			t.Fatal(err)
		}
		if d := float64(got.Tokens-tt.cl100k) / float64(tt.cl100k); d < -0.3 || d > 0.3 {
			t.Errorf("%q: estimate %d, cl100k %d", tt.text, got.Tokens, tt.cl100k)
		}
	}
}

func TestEstimateErrors(t *testing.T) {
	deep := `{"prompt":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`
	tests := []struct {
		name      string
		path      string
		body      string
		wantErr   error  // a sentinel, or nil for a *FieldError
		wantField string // the FieldError's field
	}{
		{"unknown path", "/v1/embeddings", `{"input":"x"}`, ErrUnsupportedPath, ""},
		{"path prefix is not the path", "/v1/completions/extra", `{"prompt":"x"}`, ErrUnsupportedPath, ""},
		{"empty body", "/v1/completions", ``, ErrNotJSON, ""},
		{"truncated", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}`, ErrNotJSON, ""},
		{"trailing garbage", "/v1/completions", `{"prompt":"x"} {}`, ErrNotJSON, ""},
		{"top-level array", "/v1/completions", `[{"prompt":"x"}]`, ErrNotJSON, ""},
		{"top-level string", "/v1/completions", `"prompt"`, ErrNotJSON, ""},
		{"raw control character", "/v1/completions", "{\"prompt\":\"a\tb\"}", ErrNotJSON, ""},
		{"bad escape", "/v1/completions", `{"prompt":"\x41"}`, ErrNotJSON, ""},
		{"nesting too deep", "/v1/completions", deep, ErrNotJSON, ""},
		{"no prompt", "/v1/completions", `{"model":"m"}`, ErrNoInput, ""},
		{"null prompt", "/v1/completions", `{"prompt":null}`, ErrNoInput, ""},
		{"no messages", "/v1/chat/completions", `{"prompt":"x"}`, ErrNoInput, ""},
		{"no input", "/v1/responses", `{"model":"m"}`, ErrNoInput, ""},
		{"no text", "/generate", `{"sampling_params":{}}`, ErrNoInput, ""},
		{"prompt number", "/v1/completions", `{"prompt":5}`, nil, "prompt"},
		{"prompt empty list", "/v1/completions", `{"prompt":[]}`, nil, "prompt"},
		{"prompt mixed list", "/v1/completions", `{"prompt":[1,"a"]}`, nil, "prompt[1]"},
		{"negative id", "/v1/completions", `{"prompt":[-1]}`, nil, "prompt[0]"},
		{"fractional id", "/v1/completions", `{"prompt":[1.5]}`, nil, "prompt[0]"},
		{"exponent id", "/v1/completions", `{"prompt":[1e3]}`, nil, "prompt[0]"},
		{"huge id", "/v1/completions", `{"prompt":[2,99999999999999999999999]}`, nil, "prompt[1]"},
		{"id above uint32", "/v1/completions", `{"prompt":[4294967296]}`, nil, "prompt[0]"},
		{"empty inner id list", "/v1/completions", `{"prompt":[[1],[]]}`, nil, "prompt[1]"},
		{"string in id list", "/v1/completions", `{"prompt":[[1,"2"]]}`, nil, "prompt[0][1]"},
		{"list of objects", "/v1/completions", `{"prompt":[{"text":"x"}]}`, nil, "prompt[0]"},
		{"messages object", "/v1/chat/completions", `{"messages":{"role":"user"}}`, nil, "messages"},
		{"messages empty", "/v1/chat/completions", `{"messages":[]}`, nil, "messages"},
		{"message not object", "/v1/chat/completions", `{"messages":["hi"]}`, nil, "messages[0]"},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, nil, "messages[0].role"},
		{"content number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, nil, "messages[0].content"},
		{"nested garbage content", "/v1/chat/completions", `{"messages":[{"role":"user","content":[[[[{}]]]]}]}`, nil, "messages[0].content[0]"},
		{"part without type", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, nil, "messages[0].content[0]"},
		{"text part without text", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, nil, "messages[0].content[0]"},
		{"name not string", "/v1/chat/completions", `{"messages":[{"role":"user","name":7,"content":"x"}]}`, nil, "messages[0].name"},
		{"tool_calls not array", "/v1/chat/completions", `{"messages":[{"role":"assistant","tool_calls":"f()"}]}`, nil, "messages[0].tool_calls"},
		{"tool call without name", "/v1/chat/completions", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]}`, nil, "messages[0].tool_calls[0].function"},
		{"tool call arguments number", "/v1/chat/completions", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":5}}]}]}`, nil, "messages[0].tool_calls[0].function.arguments"},
		{"tools not array", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":{}}`, nil, "tools"},
		{"tool not object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":["f"]}`, nil, "tools[0]"},
		{"instructions number", "/v1/responses", `{"instructions":1,"input":"x"}`, nil, "instructions"},
		{"input number", "/v1/responses", `{"input":1}`, nil, "input"},
		{"item type number", "/v1/responses", `{"input":[{"type":1}]}`, nil, "input[0].type"},
		{"function_call without name", "/v1/responses", `{"input":[{"type":"function_call","arguments":"{}"}]}`, nil, "input[0].name"},
		{"text and input_ids", "/generate", `{"text":"x","input_ids":[1]}`, nil, "input_ids"},
		{"text ids", "/generate", `{"text":[1,2]}`, nil, "text[0]"},
		{"input_ids strings", "/generate", `{"input_ids":["a"]}`, nil, "input_ids[0]"},
		{"image_data number", "/generate", `{"text":"x","image_data":5}`, nil, "image_data"},
	}
	for _, tt := range tests {
		for _, m := range []Method{Default, Chars4} {
			t.Run(tt.name+"/"+m.String(), func(t *testing.T) {
				_, err := Estimate([]byte(tt.body), tt.path, m)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("err %v, want %v", err, tt.wantErr)
					}
					return
				}
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("err %v, want a *FieldError", err)
				}
				if fe.Field != tt.wantField || fe.Reason == "" {
					t.Errorf("field %q (%q), want %q", fe.Field, fe.Reason, tt.wantField)
				}
				if !strings.HasPrefix(err.Error(), "tokenest: "+tt.wantField+": ") {
					t.Errorf("message %q", err)
				}
			})
		}
	}
	if _, err := Estimate([]byte(`{"prompt":"x"}`), "/v1/completions", Method(9)); err == nil {
		t.Error("invalid method: no error")
	}
}

func TestMethodText(t *testing.T) {
	for _, m := range []Method{Default, Chars4} {
		b, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Method
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("%v: round trip gave %v, %v", m, back, err)
		}
	}
	if _, err := ParseMethod("words"); err == nil {
		t.Error("ParseMethod(words): no error")
	}
	if _, err := Method(7).MarshalText(); err == nil {
		t.Error("Method(7).MarshalText: no error")
	}
	if Method(7).String() != "Method(7)" {
		t.Errorf("String: %q", Method(7).String())
	}
}

func TestSupported(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/completions": true, "/v1/chat/completions?x=1": true, "/v1/responses#f": true, "/generate": true,
		"/v1/embeddings": false, "/generate/": false, "": false,
	} {
		if got := Supported(path); got != want {
			t.Errorf("Supported(%q) = %v", path, got)
		}
	}
}

func TestPrefixKey(t *testing.T) {
	key := func(body, path string, n int) uint64 {
		t.Helper()
		k, err := PrefixKey([]byte(body), path, n)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	const chat = "/v1/chat/completions"
	long := strings.Repeat("shared system prompt ", 20)
	msgs := func(sys, user string) string {
		b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "system", "content": sys}, {"role": "user", "content": user}}})
		return string(b)
	}
	same := []struct{ name, a, b, path string }{
		{"same text past the budget", msgs(long, "question one"), msgs(long, "question two"), chat},
		{"escapes decode", `{"prompt":"caf\u00e9 \"x\""}`, `{"prompt":"café \"x\""}`, "/v1/completions"},
		{"white space and other fields ignored", `{"model":"a","prompt": "hello"}`, `{"prompt":"hello","max_tokens":5}`, "/v1/completions"},
		{"ids past the budget", `{"prompt":[` + strings.Repeat("7,", 300) + `1]}`, `{"prompt":[` + strings.Repeat("7,", 300) + `2]}`, "/v1/completions"},
		{"responses string and item", `{"input":"hello"}`, `{"input":[{"role":"user","content":"hello"}]}`, "/v1/responses"},
	}
	for _, tt := range same {
		if key(tt.a, tt.path, 256) != key(tt.b, tt.path, 256) {
			t.Errorf("%s: keys differ", tt.name)
		}
	}
	differ := []struct{ name, a, b, path string }{
		{"different text", msgs("a", "question one"), msgs("a", "question two"), chat},
		{"role matters", `{"messages":[{"role":"system","content":"hi"}]}`, `{"messages":[{"role":"user","content":"hi"}]}`, chat},
		{"message boundary matters", msgs("ab", "c"), msgs("a", "bc"), chat},
		{"ids", `{"prompt":[1,2]}`, `{"prompt":[1,3]}`, "/v1/completions"},
		{"instructions", `{"instructions":"a","input":"b"}`, `{"instructions":"b","input":"a"}`, "/v1/responses"},
	}
	for _, tt := range differ {
		if key(tt.a, tt.path, 256) == key(tt.b, tt.path, 256) {
			t.Errorf("%s: keys equal", tt.name)
		}
	}
	if key(msgs(long, "q1"), chat, 0) == key(msgs(long, "q2"), chat, 0) {
		t.Error("n=0 should hash the whole prompt")
	}
	if _, err := PrefixKey([]byte(`{`), chat, 16); !errors.Is(err, ErrNotJSON) {
		t.Errorf("bad body: %v", err)
	}
	if _, err := PrefixKey([]byte(`{}`), "/x", 16); !errors.Is(err, ErrUnsupportedPath) {
		t.Errorf("bad path: %v", err)
	}
}

// TestNoAllocations checks that estimating and hashing well-formed bodies
// of every shape allocates nothing (the filter runs them on every request),
// as Go writes them and with every non-ASCII character \u-escaped (where
// the reader decodes strings into a buffer of its own: make unit runs this
// test with the profile too, whose inlining once moved that buffer to the
// heap).
func TestNoAllocations(t *testing.T) {
	for name, body := range requests(t) {
		path := requestPath(name)
		for _, m := range []Method{Default, Chars4} {
			for i, b := range [][]byte{body, benchdata.ASCIIOnly(body)} {
				if n := testing.AllocsPerRun(10, func() {
					if _, err := Estimate(b, path, m); err != nil {
						t.Fatal(err)
					}
				}); n != 0 {
					t.Errorf("%s %v, %s: %.0f allocations", name, m, []string{"as sent", "\\u-escaped"}[i], n)
				}
			}
		}
		if n := testing.AllocsPerRun(10, func() {
			if _, err := PrefixKey(body, path, 64); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s PrefixKey: %.0f allocations", name, n)
		}
	}
}

// TestEscapedBodies checks that how a client escapes its JSON does not
// change the estimate: the bodies of every sample class and the chat
// body, as Go writes them and with every non-ASCII character as a \u
// escape (Python's default), give identical results with both methods.
func TestEscapedBodies(t *testing.T) {
	type body struct {
		name, path string
		b          []byte
	}
	var bodies []body
	for _, class := range []string{"english", "chinese", "japanese", "korean", "russian", "german", "code", "json"} {
		bodies = append(bodies, body{class, "/v1/completions", benchBody(t, class, 2<<10)})
	}
	bodies = append(bodies, body{"chat", "/v1/chat/completions", chatBody(t, 4<<10)})
	for _, bd := range bodies {
		escaped := benchdata.ASCIIOnly(bd.b)
		for _, m := range []Method{Chars4, Default} {
			want, err := Estimate(bd.b, bd.path, m)
			if err != nil {
				t.Fatalf("%s %s: %v", bd.name, m, err)
			}
			got, err := Estimate(escaped, bd.path, m)
			if err != nil {
				t.Fatalf("%s %s, escaped: %v", bd.name, m, err)
			}
			if got != want {
				t.Errorf("%s %s: escaped body %+v, as written %+v", bd.name, m, got, want)
			}
		}
	}
}
