package plugin

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/config"
)

// A decoder that refuses or resets the connection, or does not answer in
// time, reaches the client as Envoy's router's local reply: a plain-text
// 503 or 504. Clients of an OpenAI API parse JSON errors, so the filter
// rewrites such answers in its response callbacks (the local reply passes
// through them like any upstream answer): the status stays, the body
// becomes an OpenAI-shaped error (config.DecodeErrorKind). Doing it here
// rather than in the route's local_reply_config keeps it true in every
// deployment, whatever Envoy config carries the filter (RATIONALE.md).

// plainErrorHeaders starts the rewrite when the answer is a plain-text 5xx:
// true when the body callbacks must finish it.
func (s *stream) plainErrorHeaders(head responseHead, endOfStream bool) bool {
	if endOfStream || head.status < 500 || head.status > 599 || !head.plain { // config.PlainErrorResponse
		return false
	}
	s.plainError = head.status
	// The body changes length: the client's answer is chunked.
	removeResponseHeader("content-length")
	if err := abi.ReplaceHttpResponseHeader("content-type", apierr.ContentType); err != nil {
		abi.LogWarnf("pdroute: stream %d: set response content-type: %v", s.id, err)
	}
	s.responseStarted = true
	return true
}

// maxPlainError bounds the text of a plain-text failure kept in the message.
const maxPlainError = 512

// plainErrorBody buffers the plain-text answer and replaces it with the
// OpenAI-shaped error at its end.
func (s *stream) plainErrorBody(bodySize int, endOfStream bool) types.Action {
	if !endOfStream {
		return types.ActionPause // buffer: Envoy's local replies are one small chunk
	}
	body, _ := abi.GetHttpResponseBody(0, min(bodySize, maxPlainError))
	k := config.DecodeErrorKind(s.plainError, body)
	_, out := apierr.Response(k, string(body))
	abi.LogWarnf("pdroute: stream %d (request %s): decoder %s: %d %s: %s", s.id, s.reqID, s.decodeName(), s.plainError, k.Code(), body)
	s.replaceResponseBody(out)
	return types.ActionContinue
}

func (s *stream) decodeName() string {
	if s.decodeEP == nil {
		return "(none)"
	}
	return s.decodeEP.Name
}
