package prefix

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/lb"
)

// BenchmarkRequest is the index's native cost per request at 8k and 55k
// tokens with the table full: render and hash the body, look up, record two
// endpoints (decode and prefill). The wasm figure is
// e2e/scenarios.BenchmarkCacheAwareCPU.
func BenchmarkRequest(b *testing.B) {
	for _, tokens := range []int{8 << 10, 55 << 10} {
		body := chatBody("m", "", "system", strings.Repeat("lorem ipsum dolor sit amet ", tokens/6))
		b.Run(fmt.Sprintf("%dk", tokens>>10), func(b *testing.B) {
			store := lb.NewMemStore()
			x, _ := New(store, DefaultParams())
			r := NewRenderer(512)
			var p Prompt
			for i := range DefaultParams().Slots * Ways / 5 * 3 / 2 { // fill
				r.Render(chatBody("m", "", strconv.Itoa(i), strings.Repeat("x", 2600)), "/v1/chat/completions", &p)
				_, _ = x.Record(&p, t0, uint32(i%8+1))
			}
			var m Match
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now := t0.Add(time.Duration(i) * time.Second)
				r.Render(body, "/v1/chat/completions", &p)
				x.Lookup(&p, now, &m)
				_, _ = x.Record(&p, now, 1, 2)
			}
		})
	}
}

func BenchmarkRender(b *testing.B) {
	body := chatBody("m", "", "system", strings.Repeat("lorem ipsum dolor sit amet ", (55<<10)/6))
	r := NewRenderer(512)
	var p Prompt
	b.SetBytes(int64(len(body)))
	for range b.N {
		r.Render(body, "/v1/chat/completions", &p)
	}
}
