package abi

import (
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// BenchmarkStreamGuard measures what the recovery wrapper adds to one stream
// callback (defer + recover + bookkeeping) around user code that does
// nothing, against calling that code directly.
func BenchmarkStreamGuard(b *testing.B) {
	user := &types.DefaultHttpContext{}
	b.Run("direct", func(b *testing.B) {
		var h types.HttpContext = user
		for b.Loop() {
			h.OnHttpRequestBody(1024, false)
		}
	})
	b.Run("guarded", func(b *testing.B) {
		var h types.HttpContext = &streamGuard{id: 2, user: user}
		for b.Loop() {
			h.OnHttpRequestBody(1024, false)
		}
	})
}
