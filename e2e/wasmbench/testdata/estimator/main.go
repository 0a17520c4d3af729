// Command estimator is a benchmark plugin: for each request it reads the
// whole body into the VM and, unless the plugin configuration is "read",
// estimates its input tokens with tokenest ("default" or "chars4", or
// "cached" and "cached-chars4": through a tokenest.Cache, as the filter
// estimates; "near": Default through EstimateNear without a threshold, as
// the filter estimates, long strings read in part). Its cost per request minus the "read" variant's is
// tokenest's cost inside wasm.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/tokenest"
)

func main() {}

func init() { abi.SetVMContext(&vm{}) }

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &root{} }

type root struct {
	types.DefaultPluginContext
	estimate bool
	near     bool // "near"
	method   tokenest.Method
	cache    *tokenest.Cache // "cached"
}

func (r *root) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := abi.GetPluginConfiguration()
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	switch string(cfg) {
	case "read":
		return types.OnPluginStartStatusOK
	case "near":
		r.estimate, r.near = true, true
		return types.OnPluginStartStatusOK
	case "cached", "cached-chars4":
		r.estimate, r.cache = true, tokenest.NewCache(256<<10)
		if string(cfg) == "cached-chars4" {
			r.method = tokenest.Chars4
		}
		return types.OnPluginStartStatusOK
	}
	if r.method, err = tokenest.ParseMethod(string(cfg)); err != nil {
		abi.LogCriticalf("estimator: %v", err)
		return types.OnPluginStartStatusFailed
	}
	r.estimate = true
	return types.OnPluginStartStatusOK
}

func (r *root) NewHttpContext(uint32) types.HttpContext { return &stream{r: r} }

type stream struct {
	types.DefaultHttpContext
	r *root
}

func (s *stream) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	body, err := abi.GetHttpRequestBody(0, size)
	if err != nil {
		abi.LogErrorf("estimator: %v", err)
		return types.ActionContinue
	}
	if s.r.near {
		if _, err := tokenest.EstimateNear(body, "/v1/chat/completions", tokenest.Default, 0, nil); err != nil {
			abi.LogErrorf("estimator: %v", err)
		}
	} else if s.r.estimate {
		if _, err := s.r.cache.Estimate(body, "/v1/chat/completions", s.r.method); err != nil {
			abi.LogErrorf("estimator: %v", err)
		}
	}
	return types.ActionContinue
}
