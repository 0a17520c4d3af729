package config

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/pdroute/pdroute/filter/apierr"
)

// EnvoyReply is one of the answers Envoy's router makes itself when an
// upstream fails, as an http call (or the routed request) receives it.
type EnvoyReply uint8

// The kinds of EnvoyReply.
const (
	// NotEnvoyReply: an answer from the engine (or one Envoy's
	// local_reply_config rewrote beyond recognition).
	NotEnvoyReply EnvoyReply = iota
	// EnvoyReset: 503 "upstream connect error or disconnect/reset before
	// headers…": the connection was refused, reset or closed before an
	// answer (or the cluster overflowed).
	EnvoyReset
	// EnvoyNoHost: 503 "no healthy upstream": the cluster has no usable host.
	EnvoyNoHost
	// EnvoyTimeout: 504 "upstream request timeout": the call's timeout (the
	// prefill timeout) ran out.
	EnvoyTimeout
)

// Envoy's router answers in text/plain with these bodies (source/common/
// router/router.cc); engines answer in JSON.
var (
	envoyResetBody   = []byte("upstream connect error or disconnect/reset before headers")
	envoyNoHostBody  = []byte("no healthy upstream")
	envoyTimeoutBody = []byte("upstream request timeout")
)

// ClassifyEnvoyReply tells Envoy's own failure answers from an engine's by
// their status and body. Envoy never lets an http call fail without an
// answer when the upstream is unreachable: its router makes a 503 or 504
// local reply, which the callback receives like an engine's answer.
func ClassifyEnvoyReply(status int, body []byte) EnvoyReply {
	switch {
	case status == 503 && bytes.HasPrefix(body, envoyResetBody):
		return EnvoyReset
	case status == 503 && bytes.Equal(body, envoyNoHostBody):
		return EnvoyNoHost
	case status == 504 && bytes.Equal(body, envoyTimeoutBody):
		return EnvoyTimeout
	}
	return NotEnvoyReply
}

// ClassifyPrefillAnswer is ClassifyPrefill for an answer read whole: Envoy's
// reset and no-host answers are PrefillReset and its timeout answer
// PrefillTimeout, whatever status they carry. A 504 that came when the
// prefill timeout had (nearly) run out is taken for Envoy's timeout too, in
// case local_reply_config rewrote its body; any other 504 is the engine's
// and a server error.
func ClassifyPrefillAnswer(status int, body []byte, usable bool, elapsed, timeout time.Duration) PrefillOutcome {
	switch ClassifyEnvoyReply(status, body) {
	case EnvoyReset, EnvoyNoHost:
		return PrefillReset
	case EnvoyTimeout:
		return PrefillTimeout
	}
	if status == 504 && elapsed >= timeout*9/10 {
		return PrefillTimeout
	}
	return ClassifyPrefill(status, usable)
}

// DescribePrefillFailure is the log and error detail of a failed prefill:
// what happened, in words that do not blame the engine for Envoy's answer.
func DescribePrefillFailure(o PrefillOutcome, status int, body []byte, timeout time.Duration) string {
	switch {
	case o == PrefillTimeout:
		return "timeout (no answer within " + strconv.FormatInt(timeout.Milliseconds(), 10) + " ms)"
	case o == PrefillReset && status != 0:
		b := body
		if len(b) > 160 {
			b = b[:160]
		}
		return "reset (Envoy answered " + strconv.Itoa(status) + ": " + string(b) + ")"
	case status != 0:
		return o.String() + " (prefill answered " + strconv.Itoa(status) + ")"
	}
	return o.String()
}

// PlainErrorResponse reports whether a response to a routed request is a
// failure clients would get as plain text, not as the OpenAI-shaped JSON
// they parse: a 5xx whose content-type is not JSON, such as the local reply
// Envoy's router makes when the decoder refuses or resets the connection
// (503 "upstream connect error…") or does not answer in time (504). The
// plugin rewrites its body (DecodeErrorKind).
func PlainErrorResponse(status int, contentType string) bool {
	return status >= 500 && status <= 599 && PlainContentType(contentType)
}

// PlainContentType is PlainErrorResponse's test of the content type: true
// when it is neither JSON (JSONContentType, which counts none as JSON) nor
// an event stream.
func PlainContentType(contentType string) bool {
	if JSONContentType(contentType) {
		return false
	}
	// strings.HasPrefix(strings.ToLower(strings.TrimSpace(…)), sse) for an
	// ASCII value (trailing spaces cannot change the answer)
	const sse = "text/event-stream"
	for i := 0; i < len(contentType); i++ {
		if contentType[i] >= 0x80 {
			return !strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), sse)
		}
	}
	t := contentType
	for len(t) > 0 && asciiSpace(t[0]) {
		t = t[1:]
	}
	return len(t) < len(sse) || !equalFoldASCII(t[:len(sse)], sse)
}

// DecodeErrorKind is the error a plain-text failure of the decode leg
// becomes: unreachable (Envoy's reset or no-host answer), timeout (Envoy's
// timeout answer), or failed (anything else, its text kept as the detail).
func DecodeErrorKind(status int, body []byte) apierr.Kind {
	switch ClassifyEnvoyReply(status, body) {
	case EnvoyReset, EnvoyNoHost:
		return apierr.DecodeUnreachable
	case EnvoyTimeout:
		return apierr.DecodeTimeout
	}
	return apierr.DecodeFailed
}
