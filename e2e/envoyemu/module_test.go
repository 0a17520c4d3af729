package envoyemu

import (
	"strings"
	"testing"
)

func TestABIVersionOf(t *testing.T) {
	export := func(names ...string) []byte {
		var funcs []wfunc
		for _, n := range names {
			funcs = append(funcs, wfunc{name: n})
		}
		return buildModule(nil, funcs, 1)
	}
	tests := []struct {
		name string
		code []byte
		want abiVersion
		err  bool
	}{
		{"0.2.1", export("proxy_abi_version_0_2_1"), abi021, false},
		{"0.2.0", export("x", "proxy_abi_version_0_2_0"), abi020, false},
		{"first wins", export("proxy_abi_version_0_2_0", "proxy_abi_version_0_2_1"), abi020, false},
		{"0.1.0", export("proxy_abi_version_0_1_0"), abi010, false},
		{"none", export("malloc"), abiUnknown, false},
		{"not wasm", []byte("hello world"), abiUnknown, true},
		{"truncated", tinyModule()[:40], abiUnknown, true},
	}
	for _, tt := range tests {
		got, err := abiVersionOf(tt.code)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("%s: %v, %v", tt.name, got, err)
		}
	}
}

func TestLoadModuleErrors(t *testing.T) {
	malloc := wfunc{name: "malloc", params: []byte{wI32}, results: []byte{wI32}, body: bumpMalloc}
	alloc := wfunc{name: "proxy_on_memory_allocate", params: []byte{wI32}, results: []byte{wI32}, body: bumpMalloc}
	marker := wfunc{name: "proxy_abi_version_0_2_1"}
	tests := []struct {
		name    string
		imports []wimport
		funcs   []wfunc
		version EnvoyVersion
		want    string
	}{
		{"no marker", nil, []wfunc{malloc}, EnvoyVersion{}, "Missing or unknown Proxy-Wasm ABI version"},
		{"no allocator", nil, []wfunc{marker}, EnvoyVersion{}, "Wasm module is missing malloc function."},
		{"proxy_on_memory_allocate is enough", nil, []wfunc{marker, alloc}, EnvoyVersion{}, ""},
		{"unknown env import", []wimport{{module: "env", name: "proxy_nope", results: []byte{wI32}}}, []wfunc{marker, malloc}, EnvoyVersion{},
			"Failed to load Wasm module due to a missing import: env.proxy_nope"},
		{"import type mismatch", []wimport{{module: "env", name: "proxy_log", params: []byte{wI32}, results: []byte{wI32}}}, []wfunc{marker, malloc}, EnvoyVersion{},
			"Failed to load Wasm module due to an import type mismatch: env.proxy_log"},
		{"get_log_level needs 0.2.1", []wimport{{module: "env", name: "proxy_get_log_level", params: []byte{wI32}, results: []byte{wI32}}},
			[]wfunc{{name: "proxy_abi_version_0_2_0"}, malloc}, EnvoyVersion{}, "missing import: env.proxy_get_log_level"},
		{"wasi_unstable is linked too", []wimport{{module: "wasi_unstable", name: "sched_yield", results: []byte{wI32}}}, []wfunc{marker, malloc}, EnvoyVersion{}, ""},
		{"fd_filestat_get on 1.33", []wimport{{module: "wasi_snapshot_preview1", name: "fd_filestat_get", params: []byte{wI32, wI32}, results: []byte{wI32}}},
			[]wfunc{marker, malloc}, EnvoyVersion{33}, "missing import: wasi_snapshot_preview1.fd_filestat_get"},
		{"fd_filestat_get on 1.39", []wimport{{module: "wasi_snapshot_preview1", name: "fd_filestat_get", params: []byte{wI32, wI32}, results: []byte{wI32}}},
			[]wfunc{marker, malloc}, EnvoyVersion{39}, ""},
		{"preview1 path_link arity", []wimport{{module: "wasi_snapshot_preview1", name: "path_link", params: []byte{wI32, wI32, wI32, wI32, wI32, wI32, wI32}, results: []byte{wI32}}},
			[]wfunc{marker, malloc}, EnvoyVersion{39}, "import type mismatch: wasi_snapshot_preview1.path_link"},
		{"bad callback signature", nil, []wfunc{marker, malloc, {name: "proxy_on_vm_start", params: []byte{wI32}, results: []byte{wI32}, body: wLocalGet(0)}},
			EnvoyVersion{}, "Bad function signature for: proxy_on_vm_start, want: (i32 i32) -> (i32), but the module exports: (i32) -> (i32)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := loadModule(t.Context(), buildModule(tt.imports, tt.funcs, 1), tt.version)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				m.close(t.Context())
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzABIVersionOf: the export-section scan never panics on any bytes.
func FuzzABIVersionOf(f *testing.F) {
	f.Add(tinyModule())
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x07\x05\x01\x01a\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x07\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := abiVersionOf(b)
		if err != nil && v != abiUnknown {
			t.Fatalf("version %v with error %v", v, err)
		}
	})
}
