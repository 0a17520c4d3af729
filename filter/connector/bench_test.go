package connector

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/filter/config"
)

// benchSizes are prompt sizes in tokens; text is ~4 bytes per token.
var benchSizes = []int{1 << 10, 32 << 10, 128 << 10}

func chatBody(tokens int) []byte {
	var text strings.Builder
	line := `The quick brown fox jumps over the \"lazy\" dog; 0123456789.\n`
	for text.Len() < tokens*4 {
		text.WriteString(line)
	}
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":"` + text.String() + `"}],"max_tokens":256,"temperature":0.2,"stream":true,` +
		`"stream_options":{"include_usage":true}}`)
}

func tokenIDs(tokens int) []byte {
	b := []byte{'['}
	for i := 0; i < tokens; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(1000+i*37%120000), 10)
	}
	return append(b, ']')
}

var benchKV = []byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[3,4,5]],"remote_engine_id":"a1b2","remote_request_id":"cmpl-9f3c-0-1a2b","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`)

func benchEach(b *testing.B, body func(int) []byte, fn func(b *testing.B, in []byte)) {
	for _, n := range benchSizes {
		in := body(n)
		b.Run(fmt.Sprintf("%dk", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			fn(b, in)
		})
	}
}

func mustRequest(b *testing.B, api config.API, in []byte) Request {
	r, err := NewRequest(api, in)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkNewRequest: validate, index and sanitise a client body (every
// handled request pays this once).
func BenchmarkNewRequest(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		for i := 0; i < b.N; i++ {
			mustRequest(b, config.APIChat, in)
		}
	})
}

func BenchmarkNIXLPrefill(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		r := mustRequest(b, config.APIChat, in)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			NIXLPrefill(r)
		}
	})
}

// BenchmarkNIXLDecode builds the decode edit (a prefix; the prompt stays in
// Envoy's buffer).
func BenchmarkNIXLDecode(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		r := mustRequest(b, config.APIChat, in)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			NIXLDecode(r, benchKV)
		}
	})
}

func BenchmarkOrchestratedDecode(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		r := mustRequest(b, config.APIChat, in)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := OrchestratedDecode(r, benchKV, &prefillEP, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSGLang builds the bootstrap edit and applies it once, as the
// prefill call needs the whole body.
func BenchmarkSGLang(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		r := mustRequest(b, config.APIChat, in)
		room := func() uint64 { return 42 }
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			e, err := SGLang(r, &prefillEP, room)
			if err != nil {
				b.Fatal(err)
			}
			e.Apply(in)
		}
	})
}

func BenchmarkLMCachePrefill(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		r := mustRequest(b, config.APIChat, in)
		tokens := tokenIDs(len(in) / 4)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			LMCachePrefill(r, tokens, "0b5e7c4e-1f6a-4d2b-9c3e-8a7f6e5d4c3b", &decodeEP)
		}
	})
}

func BenchmarkLMCacheDecode(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		r := mustRequest(b, config.APIChat, in)
		tokens := tokenIDs(len(in) / 4)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			LMCacheDecode(r, tokens, 12366)
		}
	})
}

// BenchmarkBaselineUnmarshal is what the rewrites avoid: decoding the body
// into map[string]any, editing it and encoding it again.
func BenchmarkBaselineUnmarshal(b *testing.B) {
	benchEach(b, chatBody, func(b *testing.B, in []byte) {
		for i := 0; i < b.N; i++ {
			var m map[string]any
			if err := json.Unmarshal(in, &m); err != nil {
				b.Fatal(err)
			}
			m["stream"] = false
			m["max_tokens"] = 1
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
