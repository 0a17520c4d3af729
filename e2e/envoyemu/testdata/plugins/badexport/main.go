// Command badexport exports proxy_on_request_headers with the ABI 0.1.0
// signature (two parameters) while declaring ABI 0.2.1: Envoy refuses to load
// it ("Bad function signature"). Raw exports on purpose.
package main

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	b := make([]byte, size+1)
	return &b[0]
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(ctx, headers uint32) uint32 { return 0 }

func main() {}
