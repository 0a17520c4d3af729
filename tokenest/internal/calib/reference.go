package calib

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/tiktoken-go/tokenizer"
)

// Tokenizers holds the two reference encodings. Their vocabularies take a
// few seconds and ~100 MB to load, so make one and share it.
type Tokenizers struct {
	Cl100k, O200k tokenizer.Codec
}

// NewTokenizers loads cl100k_base and o200k_base.
func NewTokenizers() (*Tokenizers, error) {
	cl, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		return nil, err
	}
	o, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		return nil, err
	}
	return &Tokenizers{Cl100k: cl, O200k: o}, nil
}

// Count returns the token counts of a plain text.
func (t *Tokenizers) Count(text string) (cl, o int, err error) {
	if cl, err = t.Cl100k.Count(text); err != nil {
		return 0, 0, err
	}
	o, err = t.O200k.Count(text)
	return cl, o, err
}

// Measure fills a sample's reference counts: of its text, or of its chat
// body rendered by RenderChat (special tokens count one each).
func (t *Tokenizers) Measure(s *Sample) error {
	if s.Body == nil {
		var err error
		s.Cl100k, s.O200k, err = t.Count(s.Text)
		return err
	}
	segs, specials, err := RenderChat(s.Body)
	if err != nil {
		return err
	}
	s.Cl100k, s.O200k = specials, specials
	for _, seg := range segs {
		cl, o, err := t.Count(seg)
		if err != nil {
			return err
		}
		s.Cl100k += cl
		s.O200k += o
	}
	return nil
}

// RenderChat renders a chat body through the reference template, a
// ChatML-style template with tools rendered as JSON (the way open-model
// templates such as Qwen's and Hermes' do):
//
//	<|im_start|>system\n# Tools\n<tools>\n{tool}\n…</tools><|im_end|>\n   (when tools are given)
//	<|im_start|>{role}[ name={name}]\n{content}[\n<tool_call>\n{"name": …, "arguments": …}\n</tool_call>]<|im_end|>\n
//	<|im_start|>assistant\n
//
// It returns the text between special tokens and the number of special
// tokens; list content joins its text parts with "\n".
func RenderChat(body []byte) (texts []string, specials int, err error) {
	var req struct {
		Messages []struct {
			Role      string          `json:"role"`
			Name      string          `json:"name"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, 0, err
	}
	block := func(s string) {
		texts = append(texts, s)
		specials += 2
	}
	if len(req.Tools) > 0 {
		var b strings.Builder
		b.WriteString("system\n# Tools\n<tools>\n")
		for _, t := range req.Tools {
			b.WriteString(RenderJSON(t))
			b.WriteString("\n")
		}
		b.WriteString("</tools>")
		block(b.String())
		texts = append(texts, "\n")
	}
	for _, m := range req.Messages {
		var b strings.Builder
		b.WriteString(m.Role)
		if m.Name != "" {
			b.WriteString(" name=" + m.Name)
		}
		b.WriteString("\n")
		content, err := contentText(m.Content)
		if err != nil {
			return nil, 0, err
		}
		b.WriteString(content)
		for i, c := range m.ToolCalls {
			if i > 0 || content != "" {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", c.Function.Name, c.Function.Arguments)
		}
		block(b.String())
		texts = append(texts, "\n")
	}
	texts = append(texts, "assistant\n")
	specials++
	return texts, specials, nil
}

func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// RenderJSON re-renders a JSON value as a chat template's tojson does
// (Python's json.dumps with ensure_ascii=False: ", " and ": " separators,
// no other white space, key order kept, strings escaped only where they
// must be; see jsonraw.Renderer). Chat templates render tool
// definitions this way.
func RenderJSON(raw []byte) string {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return string(raw)
	}
	return string(jsonraw.AppendPython(nil, c.Bytes()))
}
