// Command passthrough is the smallest useful plugin built with filter/abi: it
// marks every response with "x-pdroute: passthrough". The host's data-path
// tests and the per-request cost benchmarks use it (the real module,
// ./filter, needs a pdroute configuration).
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

func main() {}

func init() { abi.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

type httpContext struct{ types.DefaultHttpContext }

func (*httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if err := abi.AddHttpResponseHeader("x-pdroute", "passthrough"); err != nil {
		abi.LogWarnf("passthrough: add x-pdroute header: %v", err)
	}
	return types.ActionContinue
}
