package envoyemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// abiVersion is the Proxy-Wasm ABI a module declares.
type abiVersion int

const (
	abiUnknown abiVersion = iota
	abi010
	abi020
	abi021
)

func (a abiVersion) String() string {
	switch a {
	case abi010:
		return "0.1.0"
	case abi020:
		return "0.2.0"
	case abi021:
		return "0.2.1"
	}
	return "unknown"
}

// maxMemoryPages is cpp-host's 1 GiB cap on a VM's linear memory.
const maxMemoryPages = 1 << 14

// compilationCache is shared by every runtime in the process, and kept on
// disk in the OS temp dir, so a module is compiled to machine code once per
// machine rather than once per host, driver or test binary.
var compilationCache = sync.OnceValue(func() wazero.CompilationCache {
	dir := filepath.Join(os.TempDir(), "envoyemu-wazero-cache")
	if c, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
		return c
	}
	return wazero.NewCompilationCache()
})

// module is a compiled plugin module whose imports and exports passed Envoy's
// load checks. Every VM of a plugin is an instance of it.
type module struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	abi      abiVersion
	version  EnvoyVersion
	exports  map[string]bool
	alloc    string // "malloc" or "proxy_on_memory_allocate"
}

// loadModule compiles code and applies the checks Envoy makes before it starts
// a VM, with Envoy's error messages: ABI version marker, imports linked by the
// profile with exact types, export signatures, allocator. (Error strings keep
// Envoy's capitalised wording so logs can be compared.)
func loadModule(ctx context.Context, code []byte, v EnvoyVersion) (*module, error) {
	abi, err := abiVersionOf(code)
	if err != nil {
		return nil, err
	}
	switch abi {
	case abiUnknown:
		//lint:ignore ST1005 Envoy's message
		return nil, errors.New("Missing or unknown Proxy-Wasm ABI version")
	case abi010:
		return nil, errors.New("Proxy-Wasm ABI 0.1.0 is not emulated (export proxy_abi_version_0_2_0 or _0_2_1)")
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCompilationCache(compilationCache()).
		WithMemoryLimitPages(maxMemoryPages).
		WithCloseOnContextDone(false))
	m := &module{rt: rt, abi: abi, version: v, exports: map[string]bool{}}
	fail := func(err error) (*module, error) {
		rt.Close(ctx)
		return nil, err
	}
	if err := registerHostModules(ctx, rt); err != nil {
		return fail(err)
	}
	compiled, err := rt.CompileModule(ctx, code)
	if err != nil {
		return fail(fmt.Errorf("Failed to load Wasm bytecode: %w", err))
	}
	m.compiled = compiled
	if err := m.checkImports(); err != nil {
		return fail(err)
	}
	if err := m.checkExports(); err != nil {
		return fail(err)
	}
	return m, nil
}

func (m *module) close(ctx context.Context) { m.rt.Close(ctx) }

// checkImports is V8::link: every import must be a host function the profile
// registers, with the same type.
func (m *module) checkImports() error {
	for _, imp := range m.compiled.ImportedFunctions() {
		modName, name, _ := imp.Import()
		want, ok := m.linked(modName, name)
		if !ok {
			return fmt.Errorf("Failed to load Wasm module due to a missing import: %s.%s", modName, name)
		}
		if !sameTypes(imp.ParamTypes(), want.Params) || !sameTypes(imp.ResultTypes(), want.Results) {
			return fmt.Errorf("Failed to load Wasm module due to an import type mismatch: %s.%s, want: %s, but host exports: %s",
				modName, name, formatSig(imp.ParamTypes(), imp.ResultTypes()), formatSpecSig(want))
		}
	}
	for _, mem := range m.compiled.ImportedMemories() {
		modName, name, _ := mem.Import()
		return fmt.Errorf("Failed to load Wasm module due to a missing import: %s.%s", modName, name)
	}
	return nil
}

// linked returns the signature Envoy registers for modName.name, if any.
func (m *module) linked(modName, name string) (abispec.Func, bool) {
	switch modName {
	case abispec.HostModule:
		if f, ok := envFuncs[name]; ok {
			return f.sig, true
		}
		if !strings.HasPrefix(name, "proxy_") {
			return abispec.Func{}, false
		}
		if name == "proxy_get_log_level" && m.abi != abi021 {
			return abispec.Func{}, false
		}
		return abispec.Lookup(abispec.HostFunctions, name)
	case abispec.WASIModule, abispec.WASIUnstableModule:
		w, ok := wasiFuncs[name]
		if !ok || (w.from39 && m.version.StrictWASI()) {
			return abispec.Func{}, false
		}
		return w.sig, true
	}
	return abispec.Func{}, false
}

// startExports are the start functions cpp-host calls, with its signatures.
var startExports = []abispec.Func{
	{Name: "_initialize"},
	{Name: "_start"},
	{Name: "main", Params: []abispec.ValueType{abispec.I32, abispec.I32}, Results: []abispec.ValueType{abispec.I32}},
	{Name: "__main_void", Results: []abispec.ValueType{abispec.I32}},
	{Name: "malloc", Params: []abispec.ValueType{abispec.I32}, Results: []abispec.ValueType{abispec.I32}},
}

// checkExports is WasmBase::getFunctions: known exports must have the exact
// signature, and an allocator must exist (malloc first).
func (m *module) checkExports() error {
	exported := m.compiled.ExportedFunctions()
	check := func(f abispec.Func) error {
		def, ok := exported[f.Name]
		if !ok {
			return nil
		}
		if !sameTypes(def.ParamTypes(), f.Params) || !sameTypes(def.ResultTypes(), f.Results) {
			//lint:ignore ST1005 Envoy's message
			return fmt.Errorf("Bad function signature for: %s, want: %s, but the module exports: %s",
				f.Name, formatSpecSig(f), formatSig(def.ParamTypes(), def.ResultTypes()))
		}
		m.exports[f.Name] = true
		return nil
	}
	for _, f := range startExports {
		if err := check(f); err != nil {
			return err
		}
	}
	for _, f := range abispec.Callbacks {
		if strings.HasPrefix(f.Name, "proxy_abi_version_") || f.Name == "_initialize" {
			continue
		}
		if err := check(f); err != nil {
			return err
		}
	}
	switch {
	case m.exports["malloc"]:
		m.alloc = "malloc"
	case m.exports["proxy_on_memory_allocate"]:
		m.alloc = "proxy_on_memory_allocate"
	default:
		//lint:ignore ST1005 Envoy's message
		return errors.New("Wasm module is missing malloc function.")
	}
	if _, ok := m.compiled.ExportedMemories()["memory"]; !ok {
		//lint:ignore ST1005 Envoy's message
		return errors.New("Wasm module does not export its memory")
	}
	return nil
}

func sameTypes(got []api.ValueType, want []abispec.ValueType) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != api.ValueType(want[i]) {
			return false
		}
	}
	return true
}

func formatSig(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, " ") + ")"
	}
	return names(params) + " -> " + names(results)
}

func formatSpecSig(f abispec.Func) string {
	conv := func(ts []abispec.ValueType) []api.ValueType {
		out := make([]api.ValueType, len(ts))
		for i, t := range ts {
			out[i] = api.ValueType(t)
		}
		return out
	}
	return formatSig(conv(f.Params), conv(f.Results))
}

// abiVersionOf finds the first export named proxy_abi_version_* in the wasm
// binary's export section, as cpp-host's BytecodeUtil::getAbiVersion does
// (wazero reports exports as a map, which loses their order).
func abiVersionOf(code []byte) (abiVersion, error) {
	corrupt := errors.New("Failed to parse corrupted Wasm module")
	if len(code) < 8 || string(code[:4]) != "\x00asm" || string(code[4:8]) != "\x01\x00\x00\x00" {
		return abiUnknown, corrupt
	}
	pos := 8
	for pos < len(code) {
		id := code[pos]
		pos++
		size, n := uleb32(code[pos:])
		if n == 0 || uint64(pos+n)+uint64(size) > uint64(len(code)) {
			return abiUnknown, corrupt
		}
		pos += n
		section := code[pos : pos+int(size)]
		pos += int(size)
		if id != 7 {
			continue
		}
		count, n := uleb32(section)
		if n == 0 {
			return abiUnknown, corrupt
		}
		p := n
		for i := uint32(0); i < count; i++ {
			nameLen, n := uleb32(section[p:])
			if n == 0 || uint64(p+n)+uint64(nameLen) > uint64(len(section)) {
				return abiUnknown, corrupt
			}
			p += n
			name := string(section[p : p+int(nameLen)])
			p += int(nameLen)
			if p >= len(section) {
				return abiUnknown, corrupt
			}
			p++ // export kind
			if _, n := uleb32(section[p:]); n == 0 {
				return abiUnknown, corrupt
			} else {
				p += n
			}
			switch name {
			case "proxy_abi_version_0_1_0":
				return abi010, nil
			case "proxy_abi_version_0_2_0":
				return abi020, nil
			case "proxy_abi_version_0_2_1":
				return abi021, nil
			}
		}
		return abiUnknown, nil
	}
	return abiUnknown, nil
}

// uleb32 decodes an unsigned LEB128 u32; n is 0 on malformed input.
func uleb32(b []byte) (v uint32, n int) {
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		v |= uint32(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
		shift += 7
	}
	return 0, 0
}
