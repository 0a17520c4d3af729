package sse

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/tidwall/gjson"
)

// ErrBadChunk: an engine event or answer is not the completion JSON
// expected; the plugin passes the stream on unconverted from there.
var ErrBadChunk = errors.New("sse: not a completion chunk")

// maxChoices bounds the per-choice state kept for one stream.
const maxChoices = 1024

var done = []byte("[DONE]")

// Stream rewrites the decoder's answer stream of an lmcache request for the
// client. The decoder answers a token-id /v1/completions request that
// already contains the first token, so:
//   - the client first gets that token (AppendFirst), built from the
//     prefill answer;
//   - every usage block is corrected by one token: prompt_tokens − 1 (the
//     decoder counted the first token as prompt), completion_tokens + 1;
//   - a chat client gets chat.completion.chunk chunks: choices[].delta with
//     role "assistant" on the first chunk of each choice and the text as
//     content, finish_reason and stop_reason kept, logprobs null (the
//     completion shape does not convert); a completion client gets the
//     decoder's chunks, edited only where needed.
//
// Events carrying "error" and the final [DONE] pass through unchanged.
type Stream struct {
	chat    bool
	id      []byte // JSON string for every chunk's id; nil keeps or derives it
	hasRole []bool // per choice index: role "assistant" already sent
}

// NewStream returns a Stream for a chat client (chat) or a completion
// client. id, when not empty, becomes every chunk's id, so the first chunk
// (from the prefill) and the decoder's share one; when empty a chat client
// gets "chatcmpl-" ids derived from the engines' "cmpl-" ids, and a
// completion client the engines' own.
func NewStream(chat bool, id string) *Stream {
	s := &Stream{chat: chat}
	if id != "" {
		s.id = gjson.AppendJSONString(nil, id)
	}
	return s
}

// AppendFirst appends the event carrying the prefill's first token: choice
// 0 with the token's text, no finish_reason, the prefill answer's created and
// model.
func (s *Stream) AppendFirst(dst []byte, ft connector.FirstToken) []byte {
	dst = append(dst, `data: {"id":`...)
	dst = s.appendID(dst, ft.ID)
	if s.chat {
		dst = append(dst, `,"object":"chat.completion.chunk"`...)
	} else {
		dst = append(dst, `,"object":"text_completion"`...)
	}
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, ft.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendOr(dst, ft.Model, `""`)
	if s.chat {
		dst = append(dst, `,"choices":[{"index":0,"delta":{"role":"assistant","content":`...)
		dst = appendOr(dst, ft.Text, `""`)
		dst = append(dst, `},"logprobs":null,"finish_reason":null}]}`...)
		s.markRole(0)
	} else {
		dst = append(dst, `,"choices":[{"index":0,"text":`...)
		dst = appendOr(dst, ft.Text, `""`)
		dst = append(dst, `,"logprobs":null,"finish_reason":null}]}`...)
	}
	return append(dst, "\n\n"...)
}

// AppendEvent appends the client's version of one decoder event, given its
// data (Event.Data), as a complete "data: …\n\n" event.
func (s *Stream) AppendEvent(dst []byte, data []byte) ([]byte, error) {
	if bytes.Equal(data, done) {
		return appendData(dst, data), nil
	}
	o, err := connector.ParseObject(data)
	if err != nil {
		return dst, ErrBadChunk
	}
	if o.Raw("error") != nil {
		return appendData(dst, data), nil
	}
	if s.chat {
		return s.appendChatChunk(dst, o)
	}
	usage := o.Raw("usage")
	if s.id == nil && (usage == nil || usage[0] == 'n') {
		return appendData(dst, data), nil
	}
	edits := make([]connector.Edit, 0, 2)
	if s.id != nil {
		edits = append(edits, connector.Set("id", s.id))
	}
	if usage != nil {
		edits = append(edits, connector.Set("usage", shiftUsage(usage)))
	}
	dst = append(dst, "data: "...)
	dst = o.AppendTo(dst, edits...)
	return append(dst, "\n\n"...), nil
}

func appendData(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

func (s *Stream) appendChatChunk(dst []byte, o connector.Object) ([]byte, error) {
	choices := o.Get("choices")
	if !choices.IsArray() {
		return dst, ErrBadChunk
	}
	dst = append(dst, `data: {"id":`...)
	dst = s.appendID(dst, o.Raw("id"))
	dst = append(dst, `,"object":"chat.completion.chunk","created":`...)
	dst = appendOr(dst, o.Raw("created"), "0")
	dst = append(dst, `,"model":`...)
	dst = appendOr(dst, o.Raw("model"), `""`)
	dst = append(dst, `,"choices":[`...)
	var err error
	n := 0
	choices.ForEach(func(_, c gjson.Result) bool {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst, err = s.appendDelta(dst, c)
		return err == nil
	})
	if err != nil {
		return dst, err
	}
	dst = append(dst, ']')
	if usage := o.Raw("usage"); usage != nil {
		dst = append(dst, `,"usage":`...)
		dst = append(dst, shiftUsage(usage)...)
	}
	return append(dst, "}\n\n"...), nil
}

// appendDelta converts one completion choice into a chat delta choice.
func (s *Stream) appendDelta(dst []byte, c gjson.Result) ([]byte, error) {
	idx := c.Get("index")
	text := c.Get("text")
	if idx.Type != gjson.Number || idx.Num < 0 || idx.Num >= maxChoices || text.Type != gjson.String {
		return dst, ErrBadChunk
	}
	i := int(idx.Num)
	finish := c.Get("finish_reason")
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"delta":{`...)
	sep := ""
	if !s.roleSent(i) {
		dst = append(dst, `"role":"assistant"`...)
		sep = ","
		s.markRole(i)
	}
	// The last chunk of a choice often has no text: OpenAI sends an empty
	// delta there, not an empty content.
	if text.Raw != `""` || finish.Type != gjson.String {
		dst = append(dst, sep...)
		dst = append(dst, `"content":`...)
		dst = append(dst, text.Raw...)
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = appendOr(dst, []byte(finish.Raw), "null")
	if stop := c.Get("stop_reason"); stop.Exists() {
		dst = append(dst, `,"stop_reason":`...)
		dst = append(dst, stop.Raw...)
	}
	return append(dst, '}'), nil
}

func (s *Stream) roleSent(i int) bool { return i < len(s.hasRole) && s.hasRole[i] }

func (s *Stream) markRole(i int) {
	for len(s.hasRole) <= i {
		s.hasRole = append(s.hasRole, false)
	}
	s.hasRole[i] = true
}

// appendID writes the chunk id: the Stream's own, else the engine's (for a
// chat client rewritten from "cmpl-…" to "chatcmpl-…").
func (s *Stream) appendID(dst, engineID []byte) []byte {
	return appendID(dst, s.id, engineID, s.chat)
}

func appendID(dst, id, engineID []byte, chat bool) []byte {
	switch {
	case id != nil:
		return append(dst, id...)
	case len(engineID) < 2 || engineID[0] != '"':
		if chat {
			return append(dst, `"chatcmpl-pdroute"`...)
		}
		return append(dst, `"cmpl-pdroute"`...)
	case !chat:
		return append(dst, engineID...)
	}
	rest := bytes.TrimPrefix(engineID[1:], []byte("cmpl-"))
	dst = append(dst, `"chatcmpl-`...)
	return append(dst, rest...)
}

func appendOr(dst, raw []byte, fallback string) []byte {
	if len(raw) == 0 {
		return append(dst, fallback...)
	}
	return append(dst, raw...)
}

// shiftUsage moves the first token from prompt_tokens to completion_tokens
// in a usage object; anything else (null, odd shapes) is returned as is.
func shiftUsage(usage []byte) []byte {
	o, err := connector.ParseObject(usage)
	if err != nil {
		return usage
	}
	p, c := o.Get("prompt_tokens"), o.Get("completion_tokens")
	pn, perr := strconv.ParseInt(p.Raw, 10, 64)
	cn, cerr := strconv.ParseInt(c.Raw, 10, 64)
	if perr != nil || cerr != nil || pn < 1 {
		return usage
	}
	return o.Build(connector.SetInt("prompt_tokens", pn-1), connector.SetInt("completion_tokens", cn+1))
}

// Answer completes the decoder's non-streaming answer (a text_completion
// JSON) for a client that did not stream: choice 0's text gets the first
// token's text in front (the two JSON strings are joined without decoding),
// usage is corrected as in Stream, kv_transfer_params is dropped; a chat
// client gets one chat.completion object (message role "assistant", the text
// as content, finish_reason and stop_reason kept, logprobs null). id, when
// not empty, replaces the answer's id; otherwise a chat id is derived as in
// NewStream.
func Answer(chat bool, id string, ft connector.FirstToken, decode []byte) ([]byte, error) {
	o, err := connector.ParseObject(decode)
	if err != nil {
		return nil, ErrBadChunk
	}
	choices := o.Get("choices")
	if !choices.IsArray() {
		return nil, ErrBadChunk
	}
	var idJSON []byte
	if id != "" {
		idJSON = gjson.AppendJSONString(nil, id)
	}
	out := make([]byte, 0, len(decode)+len(ft.Text)+64)
	var list []byte
	if list, err = answerChoices(chat, ft, choices); err != nil {
		return nil, err
	}
	if !chat {
		edits := []connector.Edit{connector.Set("choices", list), connector.Delete("kv_transfer_params")}
		if idJSON != nil {
			edits = append(edits, connector.Set("id", idJSON))
		}
		if u := o.Raw("usage"); u != nil {
			edits = append(edits, connector.Set("usage", shiftUsage(u)))
		}
		return o.AppendTo(out, edits...), nil
	}
	out = append(out, `{"id":`...)
	out = appendID(out, idJSON, o.Raw("id"), true)
	out = append(out, `,"object":"chat.completion","created":`...)
	out = appendOr(out, o.Raw("created"), "0")
	out = append(out, `,"model":`...)
	out = appendOr(out, o.Raw("model"), `""`)
	out = append(out, `,"choices":`...)
	out = append(out, list...)
	if u := o.Raw("usage"); u != nil {
		out = append(out, `,"usage":`...)
		out = append(out, shiftUsage(u)...)
	}
	return append(out, '}'), nil
}

// answerChoices rebuilds the choices list with the first token joined to
// choice 0's text, in the completion or the chat shape.
func answerChoices(chat bool, ft connector.FirstToken, choices gjson.Result) ([]byte, error) {
	out := []byte{'['}
	var err error
	n := 0
	choices.ForEach(func(_, c gjson.Result) bool {
		idx, text := c.Get("index"), c.Get("text")
		if idx.Type != gjson.Number || text.Type != gjson.String {
			err = ErrBadChunk
			return false
		}
		content := []byte(text.Raw)
		if idx.Num == 0 {
			content = joinStrings(ft.Text, content)
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if !chat {
			o, perr := connector.ParseObject([]byte(c.Raw))
			if perr != nil {
				err = ErrBadChunk
				return false
			}
			out = o.AppendTo(out, connector.Set("text", content))
			return true
		}
		out = append(out, `{"index":`...)
		out = append(out, idx.Raw...)
		out = append(out, `,"message":{"role":"assistant","content":`...)
		out = append(out, content...)
		out = append(out, `},"logprobs":null,"finish_reason":`...)
		out = appendOr(out, []byte(c.Get("finish_reason").Raw), "null")
		if stop := c.Get("stop_reason"); stop.Exists() {
			out = append(out, `,"stop_reason":`...)
			out = append(out, stop.Raw...)
		}
		out = append(out, '}')
		return true
	})
	return append(out, ']'), err
}

// joinStrings joins two raw JSON string literals into one: escapes never
// span the closing quote, so cutting the quotes between them is enough.
func joinStrings(a, b []byte) []byte {
	if len(a) < 2 {
		return b
	}
	out := make([]byte, 0, len(a)+len(b)-2)
	out = append(out, a[:len(a)-1]...)
	return append(out, b[1:]...)
}

// AppendError appends a terminal error event in the OpenAI shape (the body
// apierr.Response builds for k and detail) followed by "data: [DONE]", so
// clients waiting for [DONE] stop too. It ends a stream pdroute must fail
// after the answer has started, such as an sglang decode whose prefill
// failed.
func AppendError(dst []byte, k apierr.Kind, detail string) []byte {
	_, body := apierr.Response(k, detail)
	dst = appendData(dst, body)
	return appendData(dst, done)
}
