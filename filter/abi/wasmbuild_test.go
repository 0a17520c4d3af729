//go:build !wasip1

package abi_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// TestWasmModuleShape builds wasm modules the way the Makefile does and
// checks what Envoy checks at load: the ABI marker, the allocator and each
// callback with its exact signature, and imports only from the env.proxy_*
// ABI set and Envoy 1.33's WASI set. It builds the product (../) and
// testdata/allcalls, which reaches every host function the binding imports
// (the linker drops imports nothing calls).
func TestWasmModuleShape(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the wasm modules")
	}
	if testing.Short() {
		t.Skip("-short: skipping two wasm builds")
	}
	for _, tc := range []struct {
		pkg        string
		allImports bool // the module must import every proxy_* the binding declares
	}{
		{"..", false},
		{"./testdata/allcalls", true},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			mod := buildWasm(t, goBin, tc.pkg)
			checkExports(t, mod)
			imported := checkImports(t, mod)
			if tc.allImports && !slices.Equal(imported, bindingImports) {
				t.Errorf("proxy imports = %v\nwant           %v", imported, bindingImports)
			}
		})
	}
}

// bindingImports are the host functions the binding declares, sorted: the
// ABI 0.2.1 set minus gRPC, foreign functions, buffer/map sizes and the
// deprecated clock.
var bindingImports = []string{
	"proxy_add_header_map_value", "proxy_close_stream", "proxy_continue_stream",
	"proxy_define_metric", "proxy_dequeue_shared_queue", "proxy_done",
	"proxy_enqueue_shared_queue", "proxy_get_buffer_bytes", "proxy_get_header_map_pairs",
	"proxy_get_header_map_value", "proxy_get_log_level", "proxy_get_metric",
	"proxy_get_property", "proxy_get_shared_data", "proxy_get_status", "proxy_http_call",
	"proxy_increment_metric", "proxy_log", "proxy_record_metric", "proxy_register_shared_queue",
	"proxy_remove_header_map_value", "proxy_replace_header_map_value",
	"proxy_resolve_shared_queue", "proxy_send_local_response", "proxy_set_buffer_bytes",
	"proxy_set_effective_context", "proxy_set_header_map_pairs", "proxy_set_property",
	"proxy_set_shared_data", "proxy_set_tick_period_milliseconds",
}

func buildWasm(t *testing.T, goBin, pkg string) wazero.CompiledModule {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	out := filepath.Join(t.TempDir(), "module.wasm")
	build := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("wasm build of %s: %v\n%s", pkg, err, msg)
	}
	code, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { rt.Close(context.Background()) })
	mod, err := rt.CompileModule(ctx, code)
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

// checkExports requires exactly the pdroute callbacks, each with the
// signature Envoy checks.
func checkExports(t *testing.T, mod wazero.CompiledModule) {
	t.Helper()
	var names []string
	for name, fn := range mod.ExportedFunctions() {
		names = append(names, name)
		want, ok := abispec.Lookup(abispec.Callbacks, name)
		if !ok {
			t.Errorf("export %s is not an ABI callback", name)
			continue
		}
		checkSignature(t, "export "+name, want, fn)
	}
	slices.Sort(names)
	if want := slices.Sorted(slices.Values(abispec.PdrouteCallbacks)); !slices.Equal(names, want) {
		t.Errorf("exports = %v\nwant      %v", names, want)
	}
}

// checkImports requires every import to be one Envoy 1.33 links for an ABI
// 0.2.1 module, with its signature; it returns the proxy_* names, sorted.
func checkImports(t *testing.T, mod wazero.CompiledModule) []string {
	t.Helper()
	var proxy []string
	for _, fn := range mod.ImportedFunctions() {
		module, name, _ := fn.Import()
		var set []abispec.Func
		switch module {
		case abispec.HostModule:
			set = abispec.HostFunctions
			proxy = append(proxy, name)
			if slices.Contains(abispec.ForbiddenHostFunctions, name) {
				t.Errorf("imports forbidden %s.%s", module, name)
			}
		case abispec.WASIModule:
			set = abispec.WASIEnvoy133
		default:
			t.Errorf("import from unknown module %s.%s", module, name)
			continue
		}
		want, ok := abispec.Lookup(set, name)
		if !ok {
			t.Errorf("import %s.%s is not linked by Envoy 1.33", module, name)
			continue
		}
		checkSignature(t, "import "+module+"."+name, want, fn)
	}
	slices.Sort(proxy)
	return slices.Compact(proxy)
}

func checkSignature(t *testing.T, what string, want abispec.Func, got api.FunctionDefinition) {
	t.Helper()
	if !slices.Equal(valueTypes(want.Params), got.ParamTypes()) || !slices.Equal(valueTypes(want.Results), got.ResultTypes()) {
		t.Errorf("%s: (%v) -> (%v), want (%v) -> (%v)", what,
			got.ParamTypes(), got.ResultTypes(), want.Params, want.Results)
	}
}

func valueTypes(ts []abispec.ValueType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t)
	}
	return out
}
