// Package benchdata builds the request bodies that tokenest's benchmarks
// measure, natively and in wasm (e2e/wasmbench), from the checked-in
// samples, so that both read the same bytes.
package benchdata

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Prompt builds a /v1/completions body whose string prompt holds about
// tokens cl100k tokens of a class's sample text (dir/<class>.jsonl),
// repeated.
func Prompt(dir, class string, tokens int) ([]byte, error) {
	var text strings.Builder
	err := repeat(dir, class, tokens, func(s sample) { text.WriteString(s.Text + "\n\n") })
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"model": "m", "prompt": text.String(), "max_tokens": 16})
}

// Chat builds a /v1/chat/completions body of about tokens cl100k tokens:
// the messages of the chat samples (string and part contents, names, tool
// calls), repeated, and the first sample's tools.
func Chat(dir string, tokens int) ([]byte, error) {
	var messages, tools []json.RawMessage
	err := repeat(dir, "chat", tokens, func(s sample) {
		messages = append(messages, s.Body.Messages...)
		if len(tools) == 0 {
			tools = s.Body.Tools
		}
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"model": "m", "messages": messages, "tools": tools, "stream": true})
}

// Tools builds a /v1/chat/completions body as agents send them: one short
// user message and every distinct tool definition of the chat samples, in
// the order they first appear (29 of them, ~10.7 KB), so that the tools
// are nearly all of it.
func Tools(dir string) ([]byte, error) {
	var tools []json.RawMessage
	seen := map[string]bool{}
	samples, err := load(dir, "chat")
	if err != nil {
		return nil, err
	}
	for _, s := range samples {
		for _, t := range s.Body.Tools {
			if !seen[string(t)] {
				seen[string(t)] = true
				tools = append(tools, t)
			}
		}
	}
	if len(tools) == 0 {
		return nil, fmt.Errorf("chat.jsonl: no sample has tools")
	}
	messages := []map[string]string{{"role": "user", "content": "What is the weather in Paris, and is my 3pm meeting still on?"}}
	return json.Marshal(map[string]any{"model": "m", "messages": messages, "tools": tools, "stream": true})
}

type sample struct {
	Text string `json:"text"`
	Body struct {
		Messages, Tools []json.RawMessage
	} `json:"body"`
	Cl100k int `json:"cl100k"`
}

// repeat calls add with the samples of a class in order, round after
// round, until their cl100k counts reach tokens.
func repeat(dir, class string, tokens int, add func(sample)) error {
	samples, err := load(dir, class)
	if err != nil {
		return err
	}
	n := 0
	for n < tokens {
		for _, s := range samples {
			add(s)
			if n += s.Cl100k; n >= tokens {
				break
			}
		}
	}
	return nil
}

// load reads the samples of a class (dir/<class>.jsonl), each with its
// cl100k count.
func load(dir, class string) ([]sample, error) {
	data, err := os.ReadFile(filepath.Join(dir, class+".jsonl"))
	if err != nil {
		return nil, err
	}
	var samples []sample
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s sample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return nil, fmt.Errorf("%s.jsonl line %d: %w", class, i+1, err)
		}
		if s.Cl100k <= 0 {
			return nil, fmt.Errorf("%s.jsonl: a sample without a cl100k count", class)
		}
		samples = append(samples, s)
	}
	return samples, nil
}

// ASCIIOnly rewrites a JSON body as Python's json.dumps writes it by
// default (ensure_ascii): every non-ASCII character of its strings as a \u
// escape, those above U+FFFF as a surrogate pair.
func ASCIIOnly(body []byte) []byte {
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
