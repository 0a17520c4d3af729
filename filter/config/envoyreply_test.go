package config

import (
	"testing"
	"time"
)

// Issue 31: a prefill TCP reset reached the filter as Envoy's 503 and was
// counted as a server error, and a prefill timeout was logged as "prefill
// answered 504".
func TestClassifyPrefillAnswer(t *testing.T) {
	const timeout = 30 * time.Second
	refused := "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: 111"
	reset := "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
	engine504 := `{"error":{"message":"gateway timeout","type":"ServerError","code":504}}`
	tests := []struct {
		name    string
		status  int
		body    string
		usable  bool
		elapsed time.Duration
		want    PrefillOutcome
	}{
		{"ok", 200, `{}`, true, time.Second, PrefillOK},
		{"no answer at all", 0, "", false, time.Second, PrefillReset},
		{"connection refused", 503, refused, false, time.Millisecond, PrefillReset},
		{"connection reset", 503, reset, false, time.Second, PrefillReset},
		{"no healthy upstream", 503, "no healthy upstream", false, 0, PrefillReset},
		{"Envoy's timeout", 504, "upstream request timeout", false, timeout, PrefillTimeout},
		{"a rewritten 504 at the timeout", 504, `{"x":1}`, false, timeout, PrefillTimeout},
		{"the engine's 504, early", 504, engine504, false, time.Second, PrefillServerError},
		{"the engine's own 503", 503, `{"error":{"message":"overloaded"}}`, false, time.Second, PrefillServerError},
		{"a 4xx", 400, `{"error":{}}`, false, time.Second, PrefillRejected},
	}
	for _, tt := range tests {
		if got := ClassifyPrefillAnswer(tt.status, []byte(tt.body), tt.usable, tt.elapsed, timeout); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDescribePrefillFailure(t *testing.T) {
	tests := []struct {
		o      PrefillOutcome
		status int
		body   string
		want   string
	}{
		{PrefillTimeout, 504, "upstream request timeout", "timeout (no answer within 800 ms)"},
		{PrefillReset, 503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
			"reset (Envoy answered 503: upstream connect error or disconnect/reset before headers. reset reason: connection termination)"},
		{PrefillReset, 0, "", "reset"},
		{PrefillServerError, 500, "{}", "server_error (prefill answered 500)"},
	}
	for _, tt := range tests {
		if got := DescribePrefillFailure(tt.o, tt.status, []byte(tt.body), 800*time.Millisecond); got != tt.want {
			t.Errorf("%v %d: %q, want %q", tt.o, tt.status, got, tt.want)
		}
	}
}

// Issue 31 item 8: a refusing decoder's plain-text answer becomes an
// OpenAI-shaped error.
func TestPlainErrorResponse(t *testing.T) {
	for _, tt := range []struct {
		status int
		ct     string
		want   bool
	}{
		{503, "text/plain", true}, {504, "text/plain; charset=utf-8", true}, {500, "", false},
		{503, "application/json", false}, {502, "text/html", true}, {200, "text/plain", false},
		{404, "text/plain", false}, {500, "text/event-stream", false},
	} {
		if got := PlainErrorResponse(tt.status, tt.ct); got != tt.want {
			t.Errorf("PlainErrorResponse(%d, %q) = %v", tt.status, tt.ct, got)
		}
	}
	for _, tt := range []struct {
		status int
		body   string
		want   string
	}{
		{503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination", "DECODE_UNREACHABLE"},
		{503, "no healthy upstream", "DECODE_UNREACHABLE"},
		{504, "upstream request timeout", "DECODE_TIMEOUT"},
		{500, "Internal Server Error", "DECODE_FAILED"},
	} {
		if got := DecodeErrorKind(tt.status, []byte(tt.body)).Code(); got != tt.want {
			t.Errorf("DecodeErrorKind(%d, %q) = %s, want %s", tt.status, tt.body, got, tt.want)
		}
	}
}
