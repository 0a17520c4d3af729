package tokenest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// benchBody builds a /v1/completions body whose prompt holds about tokens
// cl100k tokens of a class's checked-in sample text, repeated.
func benchBody(tb testing.TB, class string, tokens int) []byte {
	tb.Helper()
	data, err := os.ReadFile("testdata/samples/" + class + ".jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var text strings.Builder
	for n := 0; n < tokens; {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var s struct {
				Text   string `json:"text"`
				Cl100k int    `json:"cl100k"`
			}
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				tb.Fatal(err)
			}
			text.WriteString(s.Text)
			text.WriteString("\n\n")
			if n += s.Cl100k; n >= tokens {
				break
			}
		}
	}
	body, err := json.Marshal(map[string]any{"model": "m", "prompt": text.String(), "max_tokens": 16})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkEstimate measures throughput (MB/s of body) and allocations of
// both methods on string prompts of English, Chinese and code.
func BenchmarkEstimate(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		for _, tokens := range []int{1 << 10, 8 << 10, 32 << 10, 128 << 10} {
			body := benchBody(b, class, tokens)
			for _, m := range []Method{Chars4, Default} {
				b.Run(fmt.Sprintf("%s/%s/%dk", m, class, tokens>>10), func(b *testing.B) {
					b.SetBytes(int64(len(body)))
					b.ReportAllocs()
					for b.Loop() {
						if _, err := Estimate(body, "/v1/completions", m); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// chatBody builds a /v1/chat/completions body of about tokens cl100k
// tokens: the messages (string and part contents, names, tool calls) and
// tools of the checked-in chat samples, repeated.
func chatBody(tb testing.TB, tokens int) []byte {
	tb.Helper()
	data, err := os.ReadFile("testdata/samples/chat.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var messages, tools []json.RawMessage
	for n := 0; n < tokens; {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var s struct {
				Body struct {
					Messages, Tools []json.RawMessage
				} `json:"body"`
				Cl100k int `json:"cl100k"`
			}
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				tb.Fatal(err)
			}
			messages = append(messages, s.Body.Messages...)
			if len(tools) == 0 {
				tools = s.Body.Tools
			}
			if n += s.Cl100k; n >= tokens {
				break
			}
		}
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": messages, "tools": tools, "stream": true})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkEstimateChat measures both methods on chat bodies of 8k and
// 128k tokens, whose text is spread over many short strings.
func BenchmarkEstimateChat(b *testing.B) {
	for _, tokens := range []int{8 << 10, 128 << 10} {
		body := chatBody(b, tokens)
		for _, m := range []Method{Chars4, Default} {
			b.Run(fmt.Sprintf("%s/%dk", m, tokens>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Estimate(body, "/v1/chat/completions", m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// asciiOnly rewrites a JSON body as Python's json.dumps writes it by
// default (ensure_ascii): every non-ASCII character of its strings as a \u
// escape, those above U+FFFF as a surrogate pair.
func asciiOnly(body []byte) []byte {
	var out []byte
	for _, r := range string(body) {
		switch {
		case r < utf8.RuneSelf:
			out = append(out, byte(r))
		case r <= 0xFFFF:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		}
	}
	return out
}

// BenchmarkEstimateEscaped measures both methods on the Chinese prompt of
// 32k tokens sent with every non-ASCII character escaped (six bytes per
// character instead of three), as Python clients send it by default.
func BenchmarkEstimateEscaped(b *testing.B) {
	body := asciiOnly(benchBody(b, "chinese", 32<<10))
	for _, m := range []Method{Chars4, Default} {
		b.Run(fmt.Sprintf("%s/chinese/32k", m), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Estimate(body, "/v1/completions", m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
