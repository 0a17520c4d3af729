// Command floorfilter is a measuring stick, not a product: the least a
// Go-wasm filter does to disaggregate a nixl chat request, built the way the
// filter is (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, filter/abi). It
// reads the request headers, buffers the body, sends a prefill body (the
// body with two members spliced in) with one proxy_http_call, splices the
// answer's kv_transfer_params into the decode body, sets it, points one
// header at the decoder and resumes. It validates nothing, decides nothing
// and balances nothing. With the plugin configuration "estimate" it also
// runs tokenest.EstimateNear on the body, as the filter does.
//
// BenchmarkFloorCPU (e2e/scenarios) drives it as BenchmarkFilterCPU drives
// the filter: the difference is what pdroute's own logic costs on top of the
// host calls, the copies and the emulator (BENCHMARKS.md).
package main

import (
	"bytes"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/tokenest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

// init makes no host call.
func init() { abi.SetVMContext(&vm{}) }

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &root{} }

// root keeps the buffers every stream of the VM reuses.
type root struct {
	types.DefaultPluginContext
	estimate          bool
	body, answer, out []byte
	index             tokenest.Index
}

func (r *root) OnPluginStart(int) types.OnPluginStartStatus {
	conf, _ := abi.GetPluginConfiguration()
	r.estimate = bytes.Contains(conf, []byte("estimate"))
	return types.OnPluginStartStatusOK
}

func (r *root) NewHttpContext(uint32) types.HttpContext { return &stream{r: r} }

type stream struct {
	types.DefaultHttpContext
	r    *root
	post bool
	size int
}

var prefillHeaders = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"},
	{":authority", "prefill"}, {"content-type", "application/json"}}

func (s *stream) OnHttpRequestHeaders(int, bool) types.Action {
	_ = abi.VisitHttpRequestHeaders(func(k, v []byte) {
		if string(k) == ":method" && string(v) == "POST" {
			s.post = true
		}
	})
	if s.post {
		return types.ActionPause
	}
	return types.ActionContinue
}

func (s *stream) OnHttpRequestBody(size int, end bool) types.Action {
	if !s.post || !end {
		return types.ActionPause
	}
	r := s.r
	s.size = size
	b, _ := abi.GetHttpRequestBodyInto(r.body, 0, size)
	r.body = b[:0]
	if r.estimate {
		_, _ = tokenest.EstimateNear(b, "/v1/chat/completions", tokenest.Default, 0, &r.index)
	}
	i := bytes.LastIndexByte(b, '}')
	if i < 0 {
		return types.ActionContinue
	}
	r.out = append(append(append(r.out[:0], b[:i]...),
		`,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}`...), '}')
	_, _ = abi.DispatchHttpCall("prefill", prefillHeaders, r.out, nil, 30000, s.answered)
	return types.ActionPause
}

// answered splices the answer's kv_transfer_params into the decode body.
func (s *stream) answered(_, bodySize, _ int) {
	r := s.r
	a, _ := abi.GetHttpCallResponseBodyInto(r.answer, 0, bodySize)
	r.answer = a[:0]
	k := bytes.Index(a, []byte(`"kv_transfer_params":`))
	e := bytes.LastIndexByte(a, '}')
	b, _ := abi.GetHttpRequestBodyInto(r.body, 0, s.size)
	r.body = b[:0]
	j := bytes.LastIndexByte(b, '}')
	if k < 0 || e < k || j < 0 {
		_ = abi.ResumeHttpRequest()
		return
	}
	r.out = append(append(append(append(r.out[:0], b[:j]...), ','), a[k:e]...), '}')
	_ = abi.ReplaceHttpRequestBody(r.out)
	_ = abi.ReplaceHttpRequestHeader("x-pdroute-cluster", "decode")
	_ = abi.ResumeHttpRequest()
}
