package scenarios

import (
	"fmt"
	"os"
	"testing"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
)

// VM-level checks: the compiled filter in envoyemu's Driver (one VM, the
// host functions and WASI of Envoy, no network), for loops too long for
// HTTP.

// postHeaders are the request headers of a handled POST /v1/completions.
var postHeaders = [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "pdroute"},
	{"content-type", "application/json"}}

// vmLevel skips a VM-level test when the suite runs against real Envoy:
// it would run in the emulator's Driver all the same.
func vmLevel(t testing.TB) {
	t.Helper()
	if proxy == stack.Envoy {
		t.Skip("VM-level test: it runs in envoyemu's Driver whatever the proxy, and the emulator run covers it")
	}
}

// pluginCode is the compiled filter (PDROUTE_E2E_WASM, else built).
func pluginCode(t testing.TB) []byte {
	t.Helper()
	wasm := os.Getenv(WasmEnv)
	if wasm == "" {
		wasm = wasmbuild.ForTest(t, stack.PluginPackage)
	}
	code, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// newDriver starts one VM of the filter with plugin as its configuration,
// as an Envoy worker would (vm_id pdroute, body readable before routing,
// the 8 MiB buffer limit of the stacks); the test's end closes it. It
// reports an error and returns nil when the plugin does not start.
func newDriver(t testing.TB, code, plugin []byte, v envoyemu.EnvoyVersion) *envoyemu.Driver {
	d, err := startDriver(code, plugin, v)
	if err != nil {
		t.Error(err)
		return nil
	}
	t.Cleanup(d.Close)
	return d
}

func startDriver(code, plugin []byte, v envoyemu.EnvoyVersion) (*envoyemu.Driver, error) {
	return startDriverWith(code, plugin, v, false)
}

// startBenchDriver is startDriver for a benchmark that runs one VM for
// every request: answered calls leave the Driver's history, as Envoy frees a
// call's buffers, so the VM need not be replaced to bound the memory.
func startBenchDriver(code, plugin []byte, v envoyemu.EnvoyVersion) (*envoyemu.Driver, error) {
	return startDriverWith(code, plugin, v, true)
}

func startDriverWith(code, plugin []byte, v envoyemu.EnvoyVersion, forget bool) (*envoyemu.Driver, error) {
	d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{
		Name: stack.PluginName, VMID: stack.PluginName, PluginConfig: plugin,
		EnvoyVersion: v, AllowOnHeadersStopIteration: true, BufferLimit: stack.BufferLimitBytes,
		ForgetAnswered: forget,
	})
	if err != nil {
		return nil, err
	}
	if !d.StartVM() || !d.StartPlugin() {
		defer d.Close()
		return nil, fmt.Errorf("plugin did not start: %q", d.GuestLogs(envoyemu.LevelCritical))
	}
	return d, nil
}
