// Package apierr builds the error answers pdroute sends to clients itself:
// OpenAI-style JSON bodies {"error":{"message","type","code"}} with the HTTP
// status that goes with them. Clients of inference engines already parse this
// shape, so a failure inside the proxy reads like a failure of the engine.
//
// It is pure Go compiled into the wasm filter: stdlib and gjson only, no
// proxy-wasm import, no goroutines or timers.
package apierr

import "github.com/tidwall/gjson"

// ContentType is the content-type of every body Response builds.
const ContentType = "application/json"

// Kind names one error pdroute can answer with.
type Kind uint8

// The kinds of error. The zero Kind is not valid; Response treats it as
// Internal so a forgotten assignment still yields a well-formed answer.
const (
	// MalformedJSON: the body of a handled request is not a JSON object (400).
	MalformedJSON Kind = iota + 1
	// BodyTooLarge: the body exceeds max_body_bytes (413).
	BodyTooLarge
	// NoPrefillEndpoint: no prefill endpoint can take the request (503,
	// code PREFILL_SERVICE_UNAVAILABLE, as vLLM production-stack answers).
	NoPrefillEndpoint
	// NoDecodeEndpoint: no decode endpoint can take the request (503,
	// code DECODE_SERVICE_UNAVAILABLE).
	NoDecodeEndpoint
	// PrefillFailed: the prefill leg failed (5xx, reset, unusable answer) and
	// on_prefill_failure is "fail" (502).
	PrefillFailed
	// PrefillTimeout: the prefill leg did not answer within prefill_timeout_ms (504).
	PrefillTimeout
	// KVTimeout: the KV-ready notification did not arrive within
	// lmcache.kv_wait_timeout_ms and on_kv_timeout is "fail" (504).
	KVTimeout
	// Internal: a bug or an impossible state inside pdroute (500).
	Internal
	// DecodeUnreachable: the decode endpoint refused or reset the
	// connection before answering (503; Envoy's own plain-text answer,
	// rewritten).
	DecodeUnreachable
	// DecodeTimeout: the decode endpoint did not answer within the route's
	// timeout (504; Envoy's own answer, rewritten).
	DecodeTimeout
	// DecodeFailed: the decode leg failed with a 5xx that is not JSON; the
	// plugin keeps that status and puts the text in the message.
	DecodeFailed
)

type shape struct {
	status  int
	typ     string
	code    string
	message string
}

// Types follow OpenAI's: invalid_request_error for the client's fault,
// server_error for everything on our side; the code says which.
var shapes = [...]shape{
	MalformedJSON:     {400, "invalid_request_error", "INVALID_JSON", "request body is not a valid JSON object"},
	BodyTooLarge:      {413, "invalid_request_error", "REQUEST_TOO_LARGE", "request body exceeds the size limit"},
	NoPrefillEndpoint: {503, "server_error", "PREFILL_SERVICE_UNAVAILABLE", "no prefill endpoint is available"},
	NoDecodeEndpoint:  {503, "server_error", "DECODE_SERVICE_UNAVAILABLE", "no decode endpoint is available"},
	PrefillFailed:     {502, "server_error", "PREFILL_FAILED", "prefill failed"},
	PrefillTimeout:    {504, "server_error", "PREFILL_TIMEOUT", "prefill did not answer in time"},
	KVTimeout:         {504, "server_error", "KV_TRANSFER_TIMEOUT", "KV cache transfer did not complete in time"},
	Internal:          {500, "server_error", "INTERNAL_ERROR", "internal error in pdroute"},
	DecodeUnreachable: {503, "server_error", "DECODE_UNREACHABLE", "the decode endpoint could not be reached"},
	DecodeTimeout:     {504, "server_error", "DECODE_TIMEOUT", "the decode endpoint did not answer in time"},
	DecodeFailed:      {502, "server_error", "DECODE_FAILED", "the decode endpoint failed"},
}

func (k Kind) shape() shape {
	if k == 0 || int(k) >= len(shapes) {
		return shapes[Internal]
	}
	return shapes[k]
}

// Status is the HTTP status Response uses for k.
func (k Kind) Status() int { return k.shape().status }

// Code is the machine-readable "code" Response puts in the body for k.
func (k Kind) Code() string { return k.shape().code }

// Response returns the HTTP status and JSON body for an error of kind k.
// detail, when not empty, is appended to the fixed message after ": " (for
// example the upstream status of a failed prefill); it is JSON-escaped, so any
// text is safe. The body never carries a trailing newline.
func Response(k Kind, detail string) (status int, body []byte) {
	s := k.shape()
	body = make([]byte, 0, 64+len(s.message)+len(detail)+len(s.typ)+len(s.code))
	body = append(body, `{"error":{"message":`...)
	msg := s.message
	if detail != "" {
		msg += ": " + detail
	}
	body = gjson.AppendJSONString(body, msg)
	body = append(body, `,"type":"`...)
	body = append(body, s.typ...)
	body = append(body, `","code":"`...)
	body = append(body, s.code...)
	body = append(body, `"}}`...)
	return s.status, body
}

// Engine names whose error shape EngineBadRequest copies.
type Engine uint8

// The engines.
const (
	// VLLM: {"error":{"message","type":"BadRequestError","param":null,"code":400}},
	// the shape of vLLM's ErrorResponse (nixl, orchestrated and lmcache modes).
	VLLM Engine = iota
	// SGLang: {"object":"error","message","type":"BadRequestError","param":null,"code":400}.
	SGLang
)

// EngineBadRequest returns the 400 answer an engine gives to a request it
// refuses, in that engine's shape, for requests pdroute refuses on the
// engine's behalf (connector.CheckDecode): the client sees what it would
// have seen without pdroute, only sooner.
func EngineBadRequest(e Engine, message string) (status int, body []byte) {
	body = make([]byte, 0, 96+len(message))
	if e == SGLang {
		body = append(body, `{"object":"error","message":`...)
	} else {
		body = append(body, `{"error":{"message":`...)
	}
	body = gjson.AppendJSONString(body, message)
	body = append(body, `,"type":"BadRequestError","param":null,"code":400}`...)
	if e != SGLang {
		body = append(body, '}')
	}
	return 400, body
}
