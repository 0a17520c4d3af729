package apierr

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestResponseGolden(t *testing.T) {
	tests := []struct {
		name   string
		kind   Kind
		detail string
		status int
		code   string
	}{
		{"malformed_json", MalformedJSON, "unexpected end of input", 400, "INVALID_JSON"},
		{"body_too_large", BodyTooLarge, "", 413, "REQUEST_TOO_LARGE"},
		{"no_prefill_endpoint", NoPrefillEndpoint, "", 503, "PREFILL_SERVICE_UNAVAILABLE"},
		{"no_decode_endpoint", NoDecodeEndpoint, "all 3 endpoints cooling down", 503, "DECODE_SERVICE_UNAVAILABLE"},
		{"prefill_failed", PrefillFailed, "prefill-1 answered 500", 502, "PREFILL_FAILED"},
		{"prefill_timeout", PrefillTimeout, "no answer after 30000 ms", 504, "PREFILL_TIMEOUT"},
		{"kv_timeout", KVTimeout, "", 504, "KV_TRANSFER_TIMEOUT"},
		{"internal", Internal, "panic: index out of range", 500, "INTERNAL_ERROR"},
		{"decode_unreachable", DecodeUnreachable, "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure", 503, "DECODE_UNREACHABLE"},
		{"decode_timeout", DecodeTimeout, "upstream request timeout", 504, "DECODE_TIMEOUT"},
		{"decode_failed", DecodeFailed, "Internal Server Error", 502, "DECODE_FAILED"},
		{"zero_kind", 0, "", 500, "INTERNAL_ERROR"},
		{"unknown_kind", 200, "", 500, "INTERNAL_ERROR"},
		{"detail_escaped", PrefillFailed, "upstream said \"no\"\n<html>\\ \u2028 \x01", 502, "PREFILL_FAILED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := Response(tt.kind, tt.detail)
			if status != tt.status {
				t.Errorf("status = %d, want %d", status, tt.status)
			}
			if tt.kind.Status() != tt.status || tt.kind.Code() != tt.code {
				t.Errorf("Status/Code = %d/%s, want %d/%s", tt.kind.Status(), tt.kind.Code(), tt.status, tt.code)
			}
			if !gjson.ValidBytes(body) {
				t.Fatalf("body is not valid JSON: %s", body)
			}
			e := gjson.GetBytes(body, "error")
			if got := len(e.Map()); got != 3 {
				t.Errorf("error object has %d members, want message, type, code: %s", got, body)
			}
			if got := e.Get("code").String(); got != tt.code {
				t.Errorf("code = %q, want %q", got, tt.code)
			}
			msg := e.Get("message").String()
			if tt.detail != "" && !bytes.HasSuffix([]byte(msg), []byte(": "+tt.detail)) {
				t.Errorf("message %q does not end with the detail %q", msg, tt.detail)
			}
			golden(t, filepath.Join("testdata", tt.name+".json"), body)
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("body differs from %s\n got: %s\nwant: %s", path, got, want)
	}
}

func BenchmarkResponse(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Response(PrefillFailed, "prefill-1 answered 503")
	}
}

func TestEngineBadRequestGolden(t *testing.T) {
	for _, tt := range []struct {
		name   string
		engine Engine
	}{{"engine_bad_request_vllm", VLLM}, {"engine_bad_request_sglang", SGLang}} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := EngineBadRequest(tt.engine, "stream: Input should be a valid boolean, got \"maybe\"")
			if status != 400 || !gjson.ValidBytes(body) {
				t.Fatalf("%d %s", status, body)
			}
			msg := "message"
			if tt.engine == VLLM {
				msg = "error.message"
			}
			if got := gjson.GetBytes(body, msg).String(); got != `stream: Input should be a valid boolean, got "maybe"` {
				t.Errorf("%s = %q", msg, got)
			}
			golden(t, filepath.Join("testdata", tt.name+".json"), body)
		})
	}
}
