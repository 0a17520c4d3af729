package mocks

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The response shapes, field order as the engines write them.

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails any `json:"prompt_tokens_details"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type chatMessageOut struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatDelta      `json:"delta,omitempty"`
	Logprobs     any             `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   any             `json:"stop_reason"`
}

type openAIResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
	// KVTransferParams is vLLM's top-level kv_transfer_params: present (possibly null)
	// in vLLM's non-streaming responses, absent elsewhere.
	KVTransferParams *json.RawMessage `json:"kv_transfer_params,omitempty"`
}

type generateMeta struct {
	ID               string `json:"id"`
	FinishReason     any    `json:"finish_reason"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	CachedTokens     int    `json:"cached_tokens"`
}

// finishReason is SGLang's meta_info.finish_reason: {"type":"stop","matched":<id>}
// or {"type":"length","length":<n>}.
type finishReason struct {
	Type    string `json:"type"`
	Matched int    `json:"matched,omitempty"`
	Length  int    `json:"length,omitempty"`
}

type generateResponse struct {
	Text      string       `json:"text"`
	OutputIDs []int        `json:"output_ids"`
	MetaInfo  generateMeta `json:"meta_info"`
	Index     *int         `json:"index,omitempty"`
}

// reply is how one inference request is answered.
type reply struct {
	id       string
	model    string // the request's model, else the served one
	created  int64
	gens     []generation
	kv       string // x-mock-kv; "" for none
	kvReason string
	// kvParams is the top-level kv_transfer_params of a vLLM/LMCache JSON response;
	// nil writes null.
	kvParams json.RawMessage
	// resetAfter resets a stream's connection after this many tokens; 0 never.
	resetAfter int
}

func (rp *reply) usage(req *request) usage {
	u := usage{PromptTokens: req.promptTokens()}
	for _, g := range rp.gens {
		u.CompletionTokens += len(g.ids)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func strPtr(s string) *string { return &s }

// body is the non-streaming response.
func (s *Server) body(req *request, rp *reply) any {
	switch req.ep {
	case epGenerate:
		items := make([]generateResponse, len(rp.gens))
		for i, g := range rp.gens {
			items[i] = generateResponse{
				Text:      g.text(),
				OutputIDs: g.ids,
				MetaInfo:  generateMetaOf(rp.id, i, req, g, true),
			}
		}
		if req.batched {
			return items
		}
		return items[0]
	case epChat:
		g := rp.gens[0]
		r := rp.openAIHeader("chat.completion")
		r.Choices = []chatChoice{{Message: &chatMessageOut{Role: "assistant", Content: g.text(), ToolCalls: []any{}}, FinishReason: strPtr(g.finish)}}
		u := rp.usage(req)
		r.Usage = &u
		r.KVTransferParams = s.kvField(rp)
		return r
	default:
		choices := make([]completionChoice, len(rp.gens))
		for i, g := range rp.gens {
			choices[i] = completionChoice{Index: i, Text: g.text(), FinishReason: strPtr(g.finish)}
		}
		r := rp.openAIHeader("text_completion")
		r.Choices = choices
		u := rp.usage(req)
		r.Usage = &u
		r.KVTransferParams = s.kvField(rp)
		return r
	}
}

func (rp *reply) openAIHeader(object string) openAIResponse {
	return openAIResponse{ID: rp.id, Object: object, Created: rp.created, Model: rp.model}
}

// kvField is the kv_transfer_params member: vLLM-based engines always write it (null
// when there is none), SGLang never does.
func (s *Server) kvField(rp *reply) *json.RawMessage {
	if s.cfg.Kind == SGLang {
		return nil
	}
	raw := rp.kvParams
	if raw == nil {
		raw = json.RawMessage("null")
	}
	return &raw
}

func generateMetaOf(id string, item int, req *request, g generation, done bool) generateMeta {
	if req.batched {
		id = fmt.Sprintf("%s-%d", id, item)
	}
	m := generateMeta{ID: id, PromptTokens: len(req.prompts[item]), CompletionTokens: len(g.ids)}
	if done {
		if g.finish == "stop" {
			m.FinishReason = finishReason{Type: "stop", Matched: eosToken}
		} else {
			m.FinishReason = finishReason{Type: "length", Length: len(g.ids)}
		}
	}
	return m
}

// chunks returns the stream events of step k (the k-th token of every choice), or
// nil when every choice has ended. Step -1 is the chat role chunk.
func (rp *reply) chunks(req *request, k int) []any {
	var out []any
	for i, g := range rp.gens {
		n := max(len(g.ids), 1) // a choice with no token still sends its finish chunk
		if k >= n || (k < 0 && req.ep != epChat) {
			continue
		}
		var text string
		if k >= 0 && k < len(g.ids) {
			text = tokenText(g.ids[k])
		}
		var finish *string
		if k == n-1 {
			finish = strPtr(g.finish)
		}
		switch req.ep {
		case epGenerate:
			done := min(k+1, len(g.ids))
			part := generation{ids: g.ids[:done], finish: g.finish}
			ev := generateResponse{Text: part.text(), OutputIDs: part.ids, MetaInfo: generateMetaOf(rp.id, i, req, part, finish != nil)}
			if req.batched {
				ev.Index = &i
			}
			out = append(out, ev)
		case epChat:
			r := rp.openAIHeader("chat.completion.chunk")
			d := &chatDelta{Content: &text}
			if k < 0 {
				d.Role = "assistant"
			}
			r.Choices = []chatChoice{{Index: i, Delta: d, FinishReason: finish}}
			out = append(out, r)
		default:
			r := rp.openAIHeader("text_completion")
			r.Choices = []completionChoice{{Index: i, Text: text, FinishReason: finish}}
			out = append(out, r)
		}
	}
	return out
}

// usageChunk is the last event of a stream with stream_options.include_usage.
func (rp *reply) usageChunk(req *request) any {
	object := "text_completion"
	if req.ep == epChat {
		object = "chat.completion.chunk"
	}
	r := rp.openAIHeader(object)
	r.Choices = []any{}
	u := rp.usage(req)
	r.Usage = &u
	return r
}

type errorInfo struct {
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    int    `json:"code"`
}

type errorEnvelope struct {
	Error any `json:"error"`
}

type generateError struct {
	Message string `json:"message"`
}

// errorBody is the engine's error JSON: vLLM {"error":{message,type,param,code}},
// SGLang's OpenAI API {"object":"error",message,type,param,code}, SGLang /generate
// {"error":{"message"}}. In a stream SGLang's OpenAI error is wrapped in {"error":…}.
func (s *Server) errorBody(ep endpoint, status int, msg string, stream bool) any {
	info := errorInfo{Message: msg, Type: errorType(status), Code: status}
	switch {
	case s.cfg.Kind != SGLang:
		return errorEnvelope{info}
	case ep == epGenerate:
		return errorEnvelope{generateError{msg}}
	default:
		info.Object = "error"
		if stream {
			return errorEnvelope{info}
		}
		return info
	}
}

func errorType(status int) string {
	t := strings.ReplaceAll(http.StatusText(status), " ", "")
	if t == "" {
		t = "Unknown"
	}
	if !strings.HasSuffix(t, "Error") {
		t += "Error"
	}
	return t
}

func (s *Server) writeError(w http.ResponseWriter, ep endpoint, status int, msg string) {
	writeJSON(w, status, s.errorBody(ep, status, msg, false))
}
