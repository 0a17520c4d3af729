// Command initcall makes a host call other than logging from init(): Envoy
// runs _initialize with restricted callbacks, so the call traps
// ("restricted_callback") and the plugin config is rejected.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

func main() {}

type vmContext struct{ types.DefaultVMContext }

func init() {
	abi.LogInfo("initcall: logging is allowed in init")
	abi.SetVMContext(&vmContext{})
	if err := abi.SetSharedData("from-init", []byte("x"), 0); err != nil {
		abi.LogErrorf("initcall: %v", err)
	}
}
