// Command wasmmain builds filter/plugin as a wasm module for the plugin's own
// tests (the dual native/wasm runs of filtertest).
package main

import (
	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/plugin"
)

func main() {}

func init() {
	abi.SetPanicReply(plugin.PanicReply)
	abi.SetVMContext(plugin.NewVMContext())
}
