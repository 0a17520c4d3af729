package calib

import (
	"encoding/json"
	"fmt"
	"strings"
)

var (
	jsonKeys = []string{"id", "name", "type", "status", "created_at", "updated_at", "userId", "email", "price",
		"quantity", "tags", "description", "items", "metadata", "enabled", "count", "url", "title", "author",
		"version", "region", "timestamp", "score", "labels", "parent_id", "isActive", "displayName", "config",
		"retries", "timeout_ms", "endpoint", "message", "level", "data", "results", "total", "page", "next_cursor"}
	jsonWords = []string{"alpha", "beta", "production", "pending", "completed", "error", "warning", "user",
		"order", "invoice", "shipment", "eu-west-1", "us-east-2", "cache", "primary", "replica", "Berlin",
		"東京", "Москва", "서울", "北京", "café", "naïve", "OK", "N/A", "v2.3.1", "2026-11-22T10:15:00Z"}
)

// JSON generates a JSON document of about n bytes with the shapes APIs
// return: nested objects and arrays of records, numbers, booleans, nulls,
// identifiers, dates, URLs and short sentences; compact or indented.
func (g *Generator) JSON(n int) string {
	var b strings.Builder
	indent := []string{"", "  ", "    ", "\t"}[g.Rng.IntN(4)]
	b.WriteString("[")
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		g.jsonRecord(&b, indent, 1, 0)
	}
	if indent != "" {
		b.WriteString("\n")
	}
	b.WriteString("]")
	return b.String()
}

func (g *Generator) jsonRecord(b *strings.Builder, indent string, depth, nest int) {
	nl := func(d int) {
		if indent != "" {
			b.WriteString("\n" + strings.Repeat(indent, d))
		}
	}
	sep := ":"
	if indent != "" || g.Rng.IntN(2) == 0 {
		sep = ": "
	}
	nl(depth)
	b.WriteString("{")
	nf := 2 + g.Rng.IntN(6)
	for f := range nf {
		if f > 0 {
			b.WriteString(",")
			if indent == "" && sep == ": " {
				b.WriteString(" ")
			}
		}
		nl(depth + 1)
		k := jsonKeys[g.Rng.IntN(len(jsonKeys))]
		fmt.Fprintf(b, "%q%s", k, sep)
		switch r := g.Rng.IntN(10); {
		case r < 2:
			fmt.Fprintf(b, "%d", g.Rng.IntN(1<<uint(1+g.Rng.IntN(40))))
		case r < 3:
			fmt.Fprintf(b, "%.2f", g.Rng.Float64()*1000)
		case r < 4:
			b.WriteString([]string{"true", "false", "null"}[g.Rng.IntN(3)])
		case r < 5 && nest < 2:
			b.WriteString("[")
			for j := range 1 + g.Rng.IntN(3) {
				if j > 0 {
					b.WriteString(",")
				}
				g.jsonRecord(b, indent, depth+2, nest+1)
			}
			nl(depth + 1)
			b.WriteString("]")
		case r < 6:
			fmt.Fprintf(b, "\"%08x-%04x-%04x-%04x-%012x\"", g.Rng.Uint32(), g.Rng.Uint32()&0xffff, g.Rng.Uint32()&0xffff, g.Rng.Uint32()&0xffff, g.Rng.Uint64()&0xffffffffffff)
		case r < 7:
			fmt.Fprintf(b, "\"https://api.example.com/v1/%s/%d\"", jsonWords[g.Rng.IntN(9)], g.Rng.IntN(100000))
		default:
			s, _ := json.Marshal(g.words(1 + g.Rng.IntN(6)))
			b.Write(s)
		}
	}
	nl(depth)
	b.WriteString("}")
}

func (g *Generator) words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = jsonWords[g.Rng.IntN(len(jsonWords))]
	}
	return strings.Join(w, " ")
}

// chatPools are the classes whose text fills generated conversations.
var chatPools = []string{ClassEnglish, ClassEnglish, ClassGerman, ClassRussian, ClassChinese, ClassJapanese, ClassKorean, ClassCode}

var toolNames = []string{"get_weather", "search_documents", "create_ticket", "run_sql_query", "send_email", "lookup_order", "translate_text"}

// Chat generates a /v1/chat/completions body: a system prompt, turns in
// mixed languages, sometimes tool definitions, assistant tool calls with
// JSON arguments, tool results, list-of-parts content and names.
func (g *Generator) Chat() []byte {
	type fn struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Parameters  any    `json:"parameters"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type message struct {
		Role       string `json:"role"`
		Name       string `json:"name,omitempty"`
		Content    any    `json:"content"`
		ToolCalls  []call `json:"tool_calls,omitempty"`
		ToolCallID string `json:"tool_call_id,omitempty"`
	}
	body := struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
		Tools    []tool    `json:"tools,omitempty"`
		Stream   bool      `json:"stream"`
	}{Model: "meta-llama/Llama-3.1-8B-Instruct", Stream: g.Rng.IntN(2) == 0}

	// Messages are shorter than the text samples so that a conversation of
	// several turns stays a few kilobytes.
	defer func(n int) { g.MaxLen = n }(g.MaxLen)
	g.MaxLen = max(g.MinLen*2, g.MaxLen/3)
	text := func() string { return g.Text(chatPools[g.Rng.IntN(len(chatPools))]) }
	body.Messages = append(body.Messages, message{Role: "system", Content: g.Text(ClassEnglish)})
	withTools := g.Rng.IntN(2) == 0
	if withTools {
		for range 1 + g.Rng.IntN(3) {
			name := toolNames[g.Rng.IntN(len(toolNames))]
			body.Tools = append(body.Tools, tool{Type: "function", Function: fn{
				Name: name, Description: firstSentence(g.Text(ClassEnglish)),
				Parameters: map[string]any{"type": "object", "properties": map[string]any{
					"query": map[string]any{"type": "string", "description": firstSentence(text())},
					"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 100},
				}, "required": []string{"query"}},
			}})
		}
	}
	for turn := range 1 + g.Rng.IntN(4) {
		u := message{Role: "user", Content: text()}
		if g.Rng.IntN(4) == 0 {
			u.Content = []part{{"text", text()}, {"text", firstSentence(text())}}
		}
		if g.Rng.IntN(5) == 0 {
			u.Name = "alice"
		}
		body.Messages = append(body.Messages, u)
		if withTools && g.Rng.IntN(2) == 0 {
			var c call
			c.ID = fmt.Sprintf("call_%d", turn)
			c.Type = "function"
			c.Function.Name = body.Tools[0].Function.Name
			args, _ := json.Marshal(map[string]any{"query": firstSentence(text()), "limit": 1 + g.Rng.IntN(50)})
			c.Function.Arguments = string(args)
			body.Messages = append(body.Messages, message{Role: "assistant", Content: nil, ToolCalls: []call{c}},
				message{Role: "tool", ToolCallID: c.ID, Content: g.JSON(g.length() / 2)})
		}
		body.Messages = append(body.Messages, message{Role: "assistant", Content: text()})
	}
	body.Messages = body.Messages[:len(body.Messages)-1] // end on the user's (or tool's) turn
	out, _ := json.Marshal(body)
	return out
}

func firstSentence(s string) string {
	if i := strings.IndexAny(s, ".。\n"); i > 0 {
		return s[:i]
	}
	return s
}
