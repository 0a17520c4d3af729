package envoyemu

// A minimal wasm binary writer for host-function unit tests: tiny modules
// with a bump allocator, built in Go so the tests can poke Envoy's memory
// protocol with any pointer without a Go plugin in the way.

type wfunc struct {
	name    string // export name ("" = not exported)
	params  []byte
	results []byte
	body    []byte // instructions, without the final end
}

type wimport struct {
	module, name    string
	params, results []byte
}

const (
	wI32 = 0x7f
	wI64 = 0x7e
)

// Instructions.
func wLocalGet(i byte) []byte  { return []byte{0x20, i} }
func wGlobalGet(i byte) []byte { return []byte{0x23, i} }
func wGlobalSet(i byte) []byte { return []byte{0x24, i} }
func wI32Const(v int32) []byte { return append([]byte{0x41}, sleb(int64(v))...) }
func wCall(i byte) []byte      { return []byte{0x10, i} }

var (
	wI32Add = []byte{0x6a}
	wDrop   = []byte{0x1a}
)

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func wname(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func wvec(items ...[]byte) []byte {
	return cat(append([][]byte{uleb(uint64(len(items)))}, items...)...)
}

func section(id byte, content []byte) []byte {
	return cat([]byte{id}, uleb(uint64(len(content))), content)
}

// buildModule assembles imports and funcs (function index = imports first)
// with one exported memory of pages pages and one mutable i32 global (the
// bump pointer, starting at 1024).
func buildModule(imports []wimport, funcs []wfunc, pages int) []byte {
	var types [][]byte
	typeOf := func(params, results []byte) byte {
		t := cat([]byte{0x60}, uleb(uint64(len(params))), params, uleb(uint64(len(results))), results)
		for i, e := range types {
			if string(e) == string(t) {
				return byte(i)
			}
		}
		types = append(types, t)
		return byte(len(types) - 1)
	}
	var imps, fdecls, exports, codes [][]byte
	for _, im := range imports {
		imps = append(imps, cat(wname(im.module), wname(im.name), []byte{0x00, typeOf(im.params, im.results)}))
	}
	for i, f := range funcs {
		fdecls = append(fdecls, []byte{typeOf(f.params, f.results)})
		if f.name != "" {
			exports = append(exports, cat(wname(f.name), []byte{0x00}, uleb(uint64(len(imports)+i))))
		}
		body := cat([]byte{0x00}, f.body, []byte{0x0b}) // no locals
		codes = append(codes, cat(uleb(uint64(len(body))), body))
	}
	exports = append(exports, cat(wname("memory"), []byte{0x02, 0x00}))
	return cat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, wvec(types...)),
		section(2, wvec(imps...)),
		section(3, wvec(fdecls...)),
		section(5, wvec(cat([]byte{0x00}, uleb(uint64(pages))))),
		section(6, wvec(cat([]byte{wI32, 0x01}, wI32Const(1024), []byte{0x0b}))),
		section(7, wvec(exports...)),
		section(10, wvec(codes...)),
	)
}

// bumpMalloc is malloc(size): return the bump pointer, then advance it.
var bumpMalloc = cat(wGlobalGet(0), wGlobalGet(0), wLocalGet(0), wI32Add, wGlobalSet(0))

// tinyModule is an ABI 0.2.1 module with only a marker and a bump malloc.
func tinyModule() []byte {
	return buildModule(nil, []wfunc{
		{name: "proxy_abi_version_0_2_1"},
		{name: "malloc", params: []byte{wI32}, results: []byte{wI32}, body: bumpMalloc},
	}, 1)
}
