package tokenest

import (
	"fmt"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
)

// benchBody builds a /v1/completions body whose prompt holds about tokens
// cl100k tokens of a class's checked-in sample text, repeated.
func benchBody(tb testing.TB, class string, tokens int) []byte {
	tb.Helper()
	body, err := benchdata.Prompt("testdata/samples", class, tokens)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkEstimate measures throughput (MB/s of body) and allocations of
// both methods on string prompts of English, Chinese and code.
func BenchmarkEstimate(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		for _, tokens := range []int{1 << 10, 8 << 10, 32 << 10, 128 << 10} {
			runMethods(b, fmt.Sprintf("%s/%dk", class, tokens>>10), benchBody(b, class, tokens), "/v1/completions")
		}
	}
}

// chatBody builds a /v1/chat/completions body of about tokens cl100k
// tokens: the messages (string and part contents, names, tool calls) of the
// checked-in chat samples, repeated, and the first sample's tools.
func chatBody(tb testing.TB, tokens int) []byte {
	tb.Helper()
	body, err := benchdata.Chat("testdata/samples", tokens)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkEstimateChat measures both methods on chat bodies of 8k and
// 128k tokens, whose text is spread over many short strings.
func BenchmarkEstimateChat(b *testing.B) {
	for _, tokens := range []int{8 << 10, 128 << 10} {
		runMethods(b, fmt.Sprintf("%dk", tokens>>10), chatBody(b, tokens), "/v1/chat/completions")
	}
}

// BenchmarkEstimateTools measures both methods on a chat body as agents
// send them, whose bytes are nearly all tool definitions (benchdata.Tools):
// they are counted as the JSON a chat template prints for them.
func BenchmarkEstimateTools(b *testing.B) {
	body, err := benchdata.Tools("testdata/samples")
	if err != nil {
		b.Fatal(err)
	}
	runMethods(b, "29tools", body, "/v1/chat/completions")
}

// BenchmarkEstimateToolsCached measures both methods on the agent body
// through a Cache that holds its definitions (every call after the first),
// as the filter reads an agent's requests after its first.
func BenchmarkEstimateToolsCached(b *testing.B) {
	body, err := benchdata.Tools("testdata/samples")
	if err != nil {
		b.Fatal(err)
	}
	runCached(b, "29tools", body, "/v1/chat/completions", NewCache(1<<20))
}

// BenchmarkEstimateEscaped measures both methods on the Chinese prompt of
// 32k tokens sent with every non-ASCII character escaped (six bytes per
// character instead of three), as Python clients send it by default.
func BenchmarkEstimateEscaped(b *testing.B) {
	runMethods(b, "chinese/32k", benchdata.ASCIIOnly(benchBody(b, "chinese", 32<<10)), "/v1/completions")
}

// BenchmarkEstimateLanguages measures both methods on string prompts of 8k
// tokens of the other classes of the samples: the languages and JSON of the
// accuracy table, and the scripts it reports for information.
func BenchmarkEstimateLanguages(b *testing.B) {
	for _, class := range []string{"german", "russian", "japanese", "korean", "json", "greek", "arabic", "hebrew", "thai", "hindi"} {
		runMethods(b, class+"/8k", benchBody(b, class, 8<<10), "/v1/completions")
	}
}

// runMethods runs the sub-benchmarks "<method>/<name>" of both methods on
// body sent to path: MB/s of body and allocations per call.
func runMethods(b *testing.B, name string, body []byte, path string) {
	runCached(b, name, body, path, nil)
}

// runCached is runMethods through the Cache c (nil: Estimate itself).
func runCached(b *testing.B, name string, body []byte, path string, c *Cache) {
	for _, m := range []Method{Chars4, Default} {
		b.Run(fmt.Sprintf("%s/%s", m, name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Estimate(body, path, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEstimateNear measures EstimateNear, as the filter estimates,
// on string prompts of 8k to 128k tokens (from 16k long enough to be read
// in part), with no threshold.
func BenchmarkEstimateNear(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		for _, tokens := range []int{8 << 10, 16 << 10, 32 << 10, 128 << 10} {
			body := benchBody(b, class, tokens)
			b.Run(fmt.Sprintf("%s/%dk", class, tokens>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				var x Index
				for b.Loop() {
					if _, err := EstimateNear(body, "/v1/completions", Default, 0, &x); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
