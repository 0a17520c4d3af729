// Command filter is the pdroute wasm module (GOOS=wasip1 GOARCH=wasm
// -buildmode=c-shared). For now it is a pass-through plugin that marks
// responses with "x-pdroute: passthrough"; the routing plugin in
// filter/plugin replaces it.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

// main is never called in a c-shared module; init() installs the plugin.
func main() {}

func init() { abi.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

type httpContext struct{ types.DefaultHttpContext }

func (*httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if err := abi.AddHttpResponseHeader("x-pdroute", "passthrough"); err != nil {
		abi.LogWarnf("pdroute: add x-pdroute header: %v", err)
	}
	return types.ActionContinue
}
