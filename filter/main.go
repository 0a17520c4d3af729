// Command filter is the pdroute wasm module (GOOS=wasip1 GOARCH=wasm
// -buildmode=c-shared): prefill/decode disaggregated routing for LLM serving,
// as a proxy-wasm HTTP filter for Envoy ≥ 1.35. Everything is in
// filter/plugin; this file only hands it to the ABI binding.
package main

import (
	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/plugin"
)

// main is never called in a c-shared module; init() installs the plugin.
func main() {}

// init makes no host call (Envoy traps them while _initialize runs).
func init() {
	abi.SetPanicReply(plugin.PanicReply)
	abi.SetVMContext(plugin.NewVMContext())
}
