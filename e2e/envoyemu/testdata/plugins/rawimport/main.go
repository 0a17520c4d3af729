// Command rawimport imports WASI clock_res_get, which Envoy 1.33–1.38 do not
// provide (the module fails to link there) and Envoy 1.39 does. It is raw
// go:wasmimport on purpose: the test is about linking, not the binding.
package main

//go:wasmimport wasi_snapshot_preview1 clock_res_get
func clockResGet(id uint32, resolution *uint64) uint32

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	b := make([]byte, size+1)
	return &b[0]
}

// proxy_on_vm_start succeeds when clock_res_get reports 1 ns, as Envoy's stub does.
//
//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) bool {
	var res uint64
	return clockResGet(1, &res) == 0 && res == 1
}

func main() {}
