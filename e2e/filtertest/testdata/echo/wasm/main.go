// Command wasm is the echo test plugin as a proxy-wasm module.
package main

import (
	"github.com/pdroute/pdroute/e2e/filtertest/testdata/echo"
	"github.com/pdroute/pdroute/filter/abi"
)

func main() {}

func init() { abi.SetVMContext(echo.New()) }
