package tokenest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// prefillAnswer is a vLLM NixlConnector prefill answer for a prompt of
// tokens tokens, one KV block id per 16 tokens, as the filter's benchmark
// (e2e/scenarios) sends it.
func prefillAnswer(tokens int) []byte {
	var ids strings.Builder
	for i := range tokens / 16 {
		if i > 0 {
			ids.WriteByte(',')
		}
		ids.WriteString(strconv.Itoa(i))
	}
	return []byte(`{"id":"cmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}],` +
		`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[` + ids.String() +
		`],"remote_engine_id":"e1","remote_request_id":"r1","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1}}`)
}

// BenchmarkRead measures Index.Read, the reader of the prefill answers,
// on answers for prompts of 1k and 128k tokens.
func BenchmarkRead(b *testing.B) {
	for _, tokens := range []int{1 << 10, 128 << 10} {
		answer := prefillAnswer(tokens)
		b.Run(fmt.Sprintf("answer/%dk", tokens>>10), func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			var x Index
			for b.Loop() {
				if !x.Read(answer) {
					b.Fatal("not read")
				}
			}
		})
	}
}

// BenchmarkEstimateNearShort measures EstimateNear on a short chat
// request (one user message of about 1k tokens, as the filter's benchmark
// sends it), where the walk over the structure weighs most.
func BenchmarkEstimateNearShort(b *testing.B) {
	for _, n := range []int{1, 100} {
		text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", n)
		body := []byte(`{"max_tokens":4,"messages":[{"content":"` + text + `","role":"user"}],"model":"mock-model"}`)
		b.Run(fmt.Sprintf("%dB", len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			var x Index
			for b.Loop() {
				if _, err := EstimateNear(body, "/v1/chat/completions", Default, 0, &x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEstimateNearMessages measures EstimateNear on chat requests
// of 64 short messages: the walk's cost per message, with text and
// without.
func BenchmarkEstimateNearMessages(b *testing.B) {
	for _, content := range []string{"", "Say hello in one word, please."} {
		var body strings.Builder
		body.WriteString(`{"model":"m","messages":[`)
		for i := range 64 {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"role":"user","content":%q}`, content)
		}
		body.WriteString(`]}`)
		raw := []byte(body.String())
		b.Run(fmt.Sprintf("%dB", len(content)), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			var x Index
			for b.Loop() {
				if _, err := EstimateNear(raw, "/v1/chat/completions", Default, 0, &x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
