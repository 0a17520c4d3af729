package envoyemu

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// These tests call host functions directly on a VM of a hand-built module,
// with whatever pointers a test needs, and read guest memory to check
// Envoy's memory protocol.

// recordingEnv is a vmEnv that records instead of scheduling.
type recordingEnv struct {
	posts     []func()
	callouts  []*callout
	afterCall []time.Duration
}

func (e *recordingEnv) post(f func()) { e.posts = append(e.posts, f) }
func (e *recordingEnv) after(d time.Duration, f func()) func() {
	e.afterCall = append(e.afterCall, d)
	return func() {}
}
func (e *recordingEnv) dispatch(_ *vm, c *callout) { e.callouts = append(e.callouts, c) }

// fakeHooks is a stream's filter-manager side that records.
type fakeHooks struct {
	si          streamInfo
	dec, enc    bodyBuf
	replies     []LocalResponse
	resets      []string
	continues   []string
	reqTrailers *headerMap
	routeClears int
}

func (f *fakeHooks) clearRouteCache() { f.routeClears++ }

func (f *fakeHooks) continueDecoding()            { f.continues = append(f.continues, "request") }
func (f *fakeHooks) continueEncoding()            { f.continues = append(f.continues, "response") }
func (f *fakeHooks) resetStream(d string)         { f.resets = append(f.resets, d) }
func (f *fakeHooks) addDecodedData(*bodyBuf) bool { return true }
func (f *fakeHooks) addEncodedData(*bodyBuf) bool { return true }
func (f *fakeHooks) decodingBuffer() *bodyBuf     { return &f.dec }
func (f *fakeHooks) encodingBuffer() *bodyBuf     { return &f.enc }
func (f *fakeHooks) addDecodedTrailers() *headerMap {
	f.reqTrailers = &headerMap{}
	return f.reqTrailers
}
func (f *fakeHooks) addEncodedTrailers() *headerMap { return &headerMap{} }
func (f *fakeHooks) info() *streamInfo              { return &f.si }
func (f *fakeHooks) sendLocalReply(code int, body []byte, h [][2]string, grpc int, details string) {
	f.replies = append(f.replies, LocalResponse{StatusCode: code, Body: body, Headers: h, GRPCStatus: grpc, Details: details})
}

type testVM struct {
	*vm
	t      *testing.T
	env    *recordingEnv
	root   *ctxState
	stream *ctxState
	hooks  *fakeHooks
}

var testSpec = &PluginSpec{Name: "plug", RootID: "rid", VMID: "vmid", VMConfig: []byte("hello"), PluginConfig: []byte("cfg"),
	Env: [][2]string{{"GOGC", "50"}, {"K", "v"}}}

func newTestVM(t *testing.T, code []byte, version EnvoyVersion) *testVM {
	t.Helper()
	ctx := context.Background()
	m, err := loadModule(ctx, code, version)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.close(ctx) })
	env := &recordingEnv{}
	p := newProcess(map[string]*ClusterConfig{"known": {Name: "known"}}, nil, LevelInfo)
	v, err := newVM(m, testSpec, p, env, "test")
	if err != nil {
		t.Fatal(err)
	}
	tv := &testVM{vm: v, t: t, env: env, hooks: &fakeHooks{si: streamInfo{source: "127.0.0.1:5555", destination: "127.0.0.1:80"}}}
	tv.root = v.newContext(kindRoot, 0)
	v.root = tv.root
	tv.stream = v.newContext(kindStream, tv.root.id)
	tv.stream.hooks = tv.hooks
	v.current = tv.stream
	return tv
}

// call invokes host function name (proxy_* or WASI) and returns its result.
func (tv *testVM) call(name string, args ...uint64) uint64 {
	s := make([]uint64, max(len(args), 1))
	copy(s, args)
	if impl, ok := proxyFuncs[name]; ok {
		impl(tv.vm, s)
	} else if f, ok := wasiFuncs[name]; ok {
		f.impl(tv.vm, s)
	} else {
		tv.t.Fatalf("no host function %s", name)
	}
	return s[0]
}

// put writes b at guest address addr and returns (addr, len).
func (tv *testVM) put(addr uint32, b string) (uint64, uint64) {
	if !tv.mem.Write(addr, []byte(b)) {
		tv.t.Fatalf("write at %d", addr)
	}
	return uint64(addr), uint64(len(b))
}

func (tv *testVM) u32(addr uint32) uint32 {
	v, ok := tv.mem.ReadUint32Le(addr)
	if !ok {
		tv.t.Fatalf("read at %d", addr)
	}
	return v
}

// out reads the (ptr, len) pair written at outPtr/outLen and the bytes.
func (tv *testVM) out(outPtr, outLen uint32) (ptr, n uint32, data string) {
	ptr, n = tv.u32(outPtr), tv.u32(outLen)
	b, ok := tv.mem.Read(ptr, n)
	if !ok {
		tv.t.Fatalf("out-of-range result %d+%d", ptr, n)
	}
	return ptr, n, string(b)
}

const (
	outP   = 16 // scratch out-pointers
	outL   = 20
	outX   = 24
	input  = 256 // scratch input area
	input2 = 512
	bad    = 1 << 20 // beyond the 1-page memory
)

func TestMemoryProtocol(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	// A value is copied into a fresh allocation: ptr and len as 4-byte LE words.
	p, n := tv.put(input, "plugin_name")
	if st := tv.call("proxy_get_property", p, n, outP, outL); st != stOK {
		t.Fatalf("status %d", st)
	}
	ptr, size, data := tv.out(outP, outL)
	if ptr != 1024 || size != 4 || data != "plug" {
		t.Errorf("got ptr %d len %d %q, want the first allocation (1024) holding %q", ptr, size, data, "plug")
	}
	// An empty value is 0/0 and allocates nothing (the bump pointer stays at 1028).
	tv.mem.WriteUint32Le(outP, 99)
	tv.mem.WriteUint32Le(outL, 99)
	tv.vm.spec = &PluginSpec{}
	if st := tv.call("proxy_get_property", p, n, outP, outL); st != stOK || tv.u32(outP) != 0 || tv.u32(outL) != 0 {
		t.Errorf("empty: status %d ptr %d len %d", st, tv.u32(outP), tv.u32(outL))
	}
	tv.vm.spec = testSpec
	if st := tv.call("proxy_get_property", p, n, outP, outL); st != stOK || tv.u32(outP) != 1028 {
		t.Errorf("next allocation at %d, want 1028 (nothing allocated for the empty value)", tv.u32(outP))
	}
	// Out-of-range pointers are InvalidMemoryAccess.
	for _, tt := range []struct {
		name string
		args []uint64
	}{
		{"path", []uint64{bad, 4, outP, outL}},
		{"path length", []uint64{input, 1 << 20, outP, outL}},
		{"out pointer", []uint64{p, n, bad, outL}},
		{"out length", []uint64{p, n, outP, bad}},
	} {
		if st := tv.call("proxy_get_property", tt.args...); st != stInvalidMemoryAccess {
			t.Errorf("%s: status %d, want InvalidMemoryAccess", tt.name, st)
		}
	}
	// Upper bits of i32 arguments are ignored (wazero leaves garbage there).
	if st := tv.call("proxy_get_property", p|0xdead_0000_0000, n|0xbeef_0000_0000, outP, outL); st != stOK {
		t.Errorf("garbage upper bits: status %d", st)
	}
}

func TestAllocatorIsRestricted(t *testing.T) {
	// malloc calls proxy_set_tick_period_milliseconds: not allowed while the
	// host allocates, so it traps and the VM fails.
	code := buildModule([]wimport{{module: "env", name: "proxy_set_tick_period_milliseconds", params: []byte{wI32}, results: []byte{wI32}}},
		[]wfunc{
			{name: "proxy_abi_version_0_2_1"},
			{name: "malloc", params: []byte{wI32}, results: []byte{wI32}, body: cat(wI32Const(0), wCall(0), wDrop, bumpMalloc)},
		}, 1)
	tv := newTestVM(t, code, EnvoyVersion{})
	p, n := tv.put(input, "plugin_name")
	if st := tv.call("proxy_get_property", p, n, outP, outL); st != stInvalidMemoryAccess {
		t.Errorf("status %d, want InvalidMemoryAccess", st)
	}
	if !strings.Contains(tv.failed, "restricted_callback") || !strings.Contains(tv.failed, "malloc") {
		t.Errorf("VM failure %q", tv.failed)
	}
}

// TestStartFunctions: _initialize then main(0,0) when both exist; _start only
// without _initialize; main alone is never called. Each start function logs
// once through proxy_log (allowed during start), so the log counts them.
func TestStartFunctions(t *testing.T) {
	logImport := []wimport{{module: "env", name: "proxy_log", params: []byte{wI32, wI32, wI32}, results: []byte{wI32}}}
	logs := cat(wI32Const(2), wI32Const(0), wI32Const(1), wCall(0), wDrop)
	tests := []struct {
		name  string
		funcs []wfunc
		calls int
		err   string
	}{
		{"reactor with main", []wfunc{
			{name: "_initialize", body: logs},
			{name: "main", params: []byte{wI32, wI32}, results: []byte{wI32}, body: cat(logs, wI32Const(0))},
			{name: "_start", body: cat(logs, logs, logs)},
		}, 2, ""},
		{"reactor with __main_void", []wfunc{
			{name: "_initialize", body: logs},
			{name: "__main_void", results: []byte{wI32}, body: cat(logs, wI32Const(0))},
		}, 2, ""},
		{"command", []wfunc{{name: "_start", body: logs}}, 1, ""},
		{"main without _initialize", []wfunc{
			{name: "main", params: []byte{wI32, wI32}, results: []byte{wI32}, body: cat(logs, wI32Const(0))},
		}, 0, ""},
		{"bad main signature", []wfunc{{name: "_initialize"}, {name: "main"}}, 0, "Bad function signature for: main"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			funcs := append([]wfunc{{name: "proxy_abi_version_0_2_1"}, {name: "malloc", params: []byte{wI32}, results: []byte{wI32}, body: bumpMalloc}}, tt.funcs...)
			m, err := loadModule(context.Background(), buildModule(logImport, funcs, 1), EnvoyVersion{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.close(context.Background())
			p := newProcess(nil, nil, 0)
			v, err := newVM(m, testSpec, p, &recordingEnv{}, "t")
			if err != nil {
				t.Fatal(err)
			}
			defer v.close()
			if n := len(guestLogs(p, LevelInfo)); n != tt.calls {
				t.Errorf("%d start calls, want %d", n, tt.calls)
			}
		})
	}
}

func TestInitHostCallRestricted(t *testing.T) {
	code := buildModule([]wimport{{module: "env", name: "proxy_set_tick_period_milliseconds", params: []byte{wI32}, results: []byte{wI32}}},
		[]wfunc{
			{name: "proxy_abi_version_0_2_1"},
			{name: "malloc", params: []byte{wI32}, results: []byte{wI32}, body: bumpMalloc},
			{name: "_initialize", body: cat(wI32Const(10), wCall(0), wDrop)},
		}, 1)
	m, err := loadModule(context.Background(), code, EnvoyVersion{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close(context.Background())
	_, err = newVM(m, testSpec, newProcess(nil, nil, 0), &recordingEnv{}, "t")
	if err == nil || !strings.Contains(err.Error(), "Function: _initialize failed") || !strings.Contains(err.Error(), "restricted_callback") {
		t.Errorf("err = %v", err)
	}
}

func TestBuffers(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	get := func(typ, start, n uint32) (uint64, string) {
		st := tv.call("proxy_get_buffer_bytes", uint64(typ), uint64(start), uint64(n), outP, outL)
		_, _, data := tv.out(outP, outL)
		return st, data
	}
	if st, data := get(6, 1, 100); st != stOK || data != "ello" {
		t.Errorf("vm config clamped read: %d %q", st, data)
	}
	if st, data := get(6, 10, 3); st != stOK || data != "" || tv.u32(outP) != 0 {
		t.Errorf("read past the end: %d %q ptr %d", st, data, tv.u32(outP))
	}
	if st, _ := get(7, 0, 10); st != stNotFound {
		t.Errorf("plugin configuration outside configure: %d, want NotFound", st)
	}
	tv.stream.pluginConfig = true
	if st, data := get(7, 0, 10); st != stOK || data != "cfg" {
		t.Errorf("plugin configuration during configure: %d %q", st, data)
	}
	if st, _ := get(4, 0, 10); st != stNotFound {
		t.Errorf("http call body outside the callback: %d", st)
	}
	if st, _ := get(9, 0, 10); st != stBadArgument {
		t.Errorf("unknown buffer type: %d", st)
	}
	if st := tv.call("proxy_get_buffer_status", 6, outP, outL); st != stOK || tv.u32(outP) != 5 || tv.u32(outL) != 0 {
		t.Errorf("buffer status: %d len %d flags %d", st, tv.u32(outP), tv.u32(outL))
	}
	// set_buffer_bytes on the request body, Envoy's Buffer::copyFrom rules.
	tests := []struct {
		start, size uint32
		data        string
		wantStatus  uint64
		want        string
	}{
		{0, 0, ">", stOK, ">hello world"},
		{0, 5, "HI", stOK, "HI world"},
		{0, 100, "new", stOK, "new"},
		{11, 0, "!", stOK, "hello world!"},
		{50, 0, "!", stOK, "hello world!"},
		{3, 0, "x", stBadArgument, "hello world"},
		{10, 1, "x", stBadArgument, "hello world"},
	}
	for _, tt := range tests {
		tv.stream.reqBody = &bodyBuf{b: []byte("hello world")}
		p, n := tv.put(input, tt.data)
		st := tv.call("proxy_set_buffer_bytes", 0, uint64(tt.start), uint64(tt.size), p, n)
		if st != tt.wantStatus || string(tv.stream.reqBody.b) != tt.want {
			t.Errorf("set(%d,%d,%q) = %d %q, want %d %q", tt.start, tt.size, tt.data, st, tv.stream.reqBody.b, tt.wantStatus, tt.want)
		}
	}
	p, n := tv.put(input, "x")
	if st := tv.call("proxy_set_buffer_bytes", 6, 0, 0, p, n); st != stBadArgument {
		t.Errorf("writing the VM configuration: %d", st)
	}
	// While the previous body callback buffered, the plugin sees (and writes) the whole buffer.
	tv.hooks.dec.b = []byte("buffered")
	tv.stream.bufferingReq = true
	if st, data := get(0, 0, 100); st != stOK || data != "buffered" {
		t.Errorf("buffered body: %d %q", st, data)
	}
}

func TestHeaderMaps(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	k, kn := tv.put(input, "X-Key")
	val, vn := tv.put(input2, "v2")
	// Request headers are not available (phase continued): reads and writes fail.
	if st := tv.call("proxy_get_header_map_value", 0, k, kn, outP, outL); st != stBadArgument {
		t.Errorf("get on an unavailable map: %d", st)
	}
	if st := tv.call("proxy_add_header_map_value", 0, k, kn, val, vn); st != stBadArgument {
		t.Errorf("add on an unavailable map: %d", st)
	}
	if st := tv.call("proxy_get_header_map_pairs", 0, outP, outL); st != stOK || tv.u32(outP) != 0 || tv.u32(outL) != 0 {
		t.Errorf("pairs of an unavailable map: %d %d/%d", st, tv.u32(outP), tv.u32(outL))
	}
	if st := tv.call("proxy_get_header_map_size", 0, outP); st != stBadArgument {
		t.Errorf("size of an unavailable map: %d", st)
	}
	if st := tv.call("proxy_get_header_map_value", 8, k, kn, outP, outL); st != stBadArgument {
		t.Errorf("map type 8: %d", st)
	}
	if tv.hooks.routeClears != 0 {
		t.Errorf("a failed write cleared the route cache")
	}
	tv.stream.reqHeaders = newHeaderMap([][2]string{{":path", "/"}, {"x-key", "v1"}})
	if st := tv.call("proxy_add_header_map_value", 0, k, kn, val, vn); st != stOK {
		t.Fatalf("add: %d", st)
	}
	if tv.hooks.routeClears != 1 {
		t.Errorf("a request-header change cleared the route cache %d times, want 1", tv.hooks.routeClears)
	}
	if st := tv.call("proxy_get_header_map_value", 0, k, kn, outP, outL); st != stOK {
		t.Fatalf("get: %d", st)
	}
	if _, _, got := tv.out(outP, outL); got != "v1" {
		t.Errorf("get returned %q, want the first value", got)
	}
	if st := tv.call("proxy_get_header_map_size", 0, outP); st != stOK || tv.u32(outP) != uint32(len(":path/x-keyv1x-keyv2")) {
		t.Errorf("size %d, want the byte size", tv.u32(outP))
	}
	if st := tv.call("proxy_get_header_map_pairs", 0, outP, outL); st != stOK {
		t.Fatal(st)
	}
	_, _, raw := tv.out(outP, outL)
	pairs, err := abispec.ParsePairs([]byte(raw))
	if err != nil || len(pairs) != 3 || pairs[2] != [2]string{"x-key", "v2"} {
		t.Errorf("pairs %v %v", pairs, err)
	}
	miss, mn := tv.put(input, "absent")
	if st := tv.call("proxy_get_header_map_value", 0, miss, mn, outP, outL); st != stNotFound {
		t.Errorf("missing key: %d", st)
	}
	// set_header_map_pairs: malformed or over the limits means an empty map.
	for _, tt := range []struct {
		name string
		data []byte
		want int
	}{
		{"valid", abispec.AppendPairs(nil, [][2]string{{"A", "1"}}), 1},
		{"trailing byte", append(abispec.AppendPairs(nil, [][2]string{{"a", "1"}}), 0), 0},
		{"too many pairs", abispec.AppendPairs(nil, make([][2]string, 1025)), 0},
	} {
		tv.stream.reqHeaders = newHeaderMap([][2]string{{":path", "/"}})
		tv.mem.Write(input, tt.data)
		if st := tv.call("proxy_set_header_map_pairs", 0, input, uint64(len(tt.data))); st != stOK || tv.stream.reqHeaders.len() != tt.want {
			t.Errorf("%s: %d, %d headers, want %d", tt.name, st, tv.stream.reqHeaders.len(), tt.want)
		}
	}
	if tv.stream.reqHeaders.len() != 0 {
		t.Error("over-limit pairs did not clear the map")
	}
	// In the access-log phase a missing map is NotFound rather than BadArgument.
	tv.stream.accessLog = true
	if st := tv.call("proxy_get_header_map_value", 2, k, kn, outP, outL); st != stNotFound {
		t.Errorf("access log phase: %d", st)
	}
	tv.stream.accessLog = false
	// Trailers are created on demand in the last body callback.
	tv.stream.reqBody, tv.stream.endOfStream = &bodyBuf{}, true
	if st := tv.call("proxy_add_header_map_value", 1, k, kn, val, vn); st != stOK || tv.hooks.reqTrailers.len() != 1 {
		t.Errorf("trailers on demand: %d", st)
	}
}

func TestEffectiveContextAndStreamControl(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	if st := tv.call("proxy_set_effective_context", 999); st != stBadArgument {
		t.Errorf("unknown context: %d", st)
	}
	tv.current = tv.root
	if st := tv.call("proxy_set_effective_context", uint64(tv.stream.id)); st != stOK || tv.effectiveContext() != tv.stream {
		t.Fatalf("set effective: %d", st)
	}
	tv.stream.reqHeaders = newHeaderMap(nil)
	if st := tv.call("proxy_continue_stream", 0); st != stOK || len(tv.hooks.continues) != 0 || tv.stream.reqHeaders != nil {
		t.Errorf("continue must be deferred and drop the request map: %d %v", st, tv.hooks.continues)
	}
	d, dn := tv.put(input, "my details\tx")
	b, bn := tv.put(input2, "body")
	if st := tv.call("proxy_send_local_response", 403, d, dn, b, bn, 0, 0, uint64(uint32(0xffffffff))); st != stOK || !tv.stopNext {
		t.Errorf("local response: %d stop %t", st, tv.stopNext)
	}
	if st := tv.call("proxy_close_stream", 0); st != stOK {
		t.Errorf("close: %d", st)
	}
	if st := tv.call("proxy_continue_stream", 3); st != stUnimplemented {
		t.Errorf("continue upstream: %d", st)
	}
	if st := tv.call("proxy_continue_stream", 4); st != stBadArgument {
		t.Errorf("continue type 4: %d", st)
	}
	tv.deferActions(func() {})
	if strings.Join(tv.hooks.continues, ",") != "request" || len(tv.hooks.replies) != 1 || len(tv.hooks.resets) != 1 {
		t.Fatalf("after the call: continues %v replies %v resets %v", tv.hooks.continues, tv.hooks.replies, tv.hooks.resets)
	}
	r := tv.hooks.replies[0]
	if r.StatusCode != 403 || string(r.Body) != "body" || r.Details != "my_details_x" || r.GRPCStatus != -1 {
		t.Errorf("local reply %+v", r)
	}
	if tv.hooks.resets[0] != "wasm_close_stream" {
		t.Errorf("reset details %q", tv.hooks.resets[0])
	}
}

func TestSharedDataAndQueues(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	k, kn := tv.put(input, "key")
	v1, n1 := tv.put(input2, "one")
	if st := tv.call("proxy_get_shared_data", k, kn, outP, outL, outX); st != stNotFound {
		t.Errorf("missing: %d", st)
	}
	if st := tv.call("proxy_set_shared_data", k, kn, v1, n1, 0); st != stOK {
		t.Fatal(st)
	}
	if st := tv.call("proxy_get_shared_data", k, kn, outP, outL, outX); st != stOK || tv.u32(outX) != 1 {
		t.Errorf("cas %d, want 1 (the counter starts at 1)", tv.u32(outX))
	}
	if st := tv.call("proxy_set_shared_data", k, kn, v1, n1, 7); st != uint64(abispec.StatusCasMismatch) {
		t.Errorf("stale cas: %d", st)
	}
	if st := tv.call("proxy_set_shared_data", k, kn, v1, n1, 1); st != stOK {
		t.Errorf("current cas: %d", st)
	}
	if _, cas, _ := tv.proc.shared.get("vmid", []byte("key")); cas != 2 {
		t.Errorf("cas after two sets %d", cas)
	}
	if _, _, ok := tv.proc.shared.get("other_vm", []byte("key")); ok {
		t.Error("shared data leaked across vm_ids")
	}
	q, qn := tv.put(input, "q")
	if st := tv.call("proxy_resolve_shared_queue", 0, 0, q, qn, outP); st != stNotFound {
		t.Errorf("resolve unknown: %d", st)
	}
	if st := tv.call("proxy_register_shared_queue", q, qn, outP); st != stOK || tv.u32(outP) != 1 {
		t.Fatalf("register: %d token %d", st, tv.u32(outP))
	}
	if st := tv.call("proxy_dequeue_shared_queue", 1, outP, outL); st != stEmpty {
		t.Errorf("dequeue empty: %d", st)
	}
	if st := tv.call("proxy_dequeue_shared_queue", 9, outP, outL); st != stNotFound {
		t.Errorf("dequeue unknown: %d", st)
	}
	if st := tv.call("proxy_enqueue_shared_queue", 1, v1, n1); st != stOK || len(tv.env.posts) != 1 {
		t.Fatalf("enqueue: %d, %d posts (want the ready callback posted, not run)", st, len(tv.env.posts))
	}
	if st := tv.call("proxy_dequeue_shared_queue", 1, outP, outL); st != stOK {
		t.Fatal(st)
	}
	if _, _, got := tv.out(outP, outL); got != "one" {
		t.Errorf("dequeued %q", got)
	}
}

func TestMetrics(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	define := func(kind uint64, name string) uint32 {
		p, n := tv.put(input, name)
		if st := tv.call("proxy_define_metric", kind, p, n, outP); st != stOK {
			t.Fatalf("define %s: %d", name, st)
		}
		return tv.u32(outP)
	}
	c, g, h := define(0, "c"), define(1, "g"), define(2, "h")
	if c != 4 || g != 5 || h != 6 || define(0, "c2") != 8 {
		t.Errorf("ids %d %d %d: the type is in the low bits", c, g, h)
	}
	for _, tt := range []struct {
		name   string
		fn     string
		id     uint32
		arg    int64
		status uint64
	}{
		{"counter +2", "proxy_increment_metric", c, 2, stOK},
		{"counter 0", "proxy_increment_metric", c, 0, stBadArgument},
		{"counter -1", "proxy_increment_metric", c, -1, stBadArgument},
		{"gauge -3", "proxy_increment_metric", g, -3, stOK},
		{"histogram increment", "proxy_increment_metric", h, 1, stBadArgument},
		{"unknown counter", "proxy_increment_metric", 12, 1, stNotFound},
		{"record counter adds", "proxy_record_metric", c, 5, stOK},
		{"record histogram", "proxy_record_metric", h, 42, stOK},
	} {
		if st := tv.call(tt.fn, uint64(tt.id), uint64(tt.arg)); st != tt.status {
			t.Errorf("%s: %d, want %d", tt.name, st, tt.status)
		}
	}
	if st := tv.call("proxy_get_metric", uint64(c), outP); st != stOK || binary.LittleEndian.Uint64(mustRead(t, tv, outP, 8)) != 7 {
		t.Errorf("counter value")
	}
	if st := tv.call("proxy_get_metric", uint64(h), outP); st != stBadArgument {
		t.Errorf("get histogram: %d", st)
	}
	if v, _ := tv.proc.stats.lookup(abispec.MetricTypeGauge, "g"); int64(v.value()) != -3 {
		t.Errorf("gauge %d", int64(v.value()))
	}
	if st := tv.call("proxy_define_metric", 3, input, 1, outP); st != stBadArgument {
		t.Errorf("metric type 3: %d", st)
	}
}

func mustRead(t *testing.T, tv *testVM, addr, n uint32) []byte {
	b, ok := tv.mem.Read(addr, n)
	if !ok {
		t.Fatalf("read %d", addr)
	}
	return b
}

func TestHTTPCallArguments(t *testing.T) {
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	good := abispec.AppendPairs(nil, [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "h"}})
	noAuthority := abispec.AppendPairs(nil, [][2]string{{":method", "GET"}, {":path", "/x"}})
	call := func(cluster string, headers []byte, body string, timeout uint32) (uint64, uint32) {
		c, cn := tv.put(input, cluster)
		tv.mem.Write(input2, headers)
		b, bn := tv.put(800, body)
		st := tv.call("proxy_http_call", c, cn, input2, uint64(len(headers)), b, bn, 0, 0, uint64(timeout), outP)
		return st, tv.u32(outP)
	}
	for _, tt := range []struct {
		name    string
		cluster string
		headers []byte
		timeout uint32
		status  uint64
		token   uint32
	}{
		{"first call", "known", good, 1000, stOK, 4},
		{"second call", "known", good, 0, stOK, 8},
		{"unknown cluster", "nope", good, 0, stBadArgument, 0},
		{"no :authority", "known", noAuthority, 0, stBadArgument, 0},
		{"negative timeout", "known", good, 1 << 31, stBadArgument, 0},
	} {
		st, token := call(tt.cluster, tt.headers, "body", tt.timeout)
		if st != tt.status || token != tt.token {
			t.Errorf("%s: status %d token %d, want %d %d", tt.name, st, token, tt.status, tt.token)
		}
	}
	if len(tv.env.callouts) != 2 {
		t.Fatalf("%d calls dispatched", len(tv.env.callouts))
	}
	co := tv.env.callouts[0]
	if cl, _ := co.headers.get("content-length"); cl != "4" || co.timeout != time.Second || co.rootID != tv.root.id {
		t.Errorf("callout %+v", co)
	}
}

func TestWASIStubs(t *testing.T) {
	for _, tt := range []struct {
		version EnvoyVersion
		poll    uint64
	}{
		{EnvoyVersion{33}, errnoNosys},
		{EnvoyVersion{39}, errnoSuccess},
	} {
		tv := newTestVM(t, tinyModule(), tt.version)
		if got := tv.call("poll_oneoff", input, input2, 1, outP); got != tt.poll {
			t.Errorf("%s poll_oneoff = %d, want %d", tt.version, got, tt.poll)
		}
	}
	tv := newTestVM(t, tinyModule(), EnvoyVersion{})
	iov := make([]byte, 8)
	binary.LittleEndian.PutUint32(iov, input2)
	binary.LittleEndian.PutUint32(iov[4:], 5)
	tv.mem.Write(input, iov)
	tv.put(input2, "hi\n\n\n")
	for _, tt := range []struct {
		name string
		fn   string
		args []uint64
		want uint64
	}{
		{"fd_write stdout", "fd_write", []uint64{1, input, 1, outP}, errnoSuccess},
		{"fd_write fd 3", "fd_write", []uint64{3, input, 1, outP}, errnoBadf},
		{"fd_write bad iov", "fd_write", []uint64{2, bad, 1, outP}, errnoFault},
		{"fd_read", "fd_read", []uint64{0, input, 1, outP}, errnoNosys},
		{"clock realtime", "clock_time_get", []uint64{0, 1, outP}, errnoSuccess},
		{"clock cputime", "clock_time_get", []uint64{2, 1, outP}, errnoNotsup},
		{"random 64KiB", "random_get", []uint64{0, 64 << 10}, errnoSuccess},
		{"random too much", "random_get", []uint64{0, 64<<10 + 1}, errnoInval},
		{"fdstat stdin", "fd_fdstat_get", []uint64{0, outP}, errnoBadf},
		{"fdstat set flags", "fd_fdstat_set_flags", []uint64{1, 0}, errnoNosys},
		{"path_open", "path_open", make([]uint64, 9), errnoNoent},
		{"prestat", "fd_prestat_get", []uint64{3, outP}, errnoBadf},
		{"environ sizes", "environ_sizes_get", []uint64{outP, outL}, errnoSuccess},
	} {
		if got := tv.call(tt.fn, tt.args...); got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, got, tt.want)
		}
	}
	if tv.u32(outP) != 2 || tv.u32(outL) != uint32(len("GOGC=50\x00K=v\x00")) {
		t.Errorf("environ sizes %d %d", tv.u32(outP), tv.u32(outL))
	}
	if st := tv.call("environ_get", input, input2); st != 0 || string(mustRead(t, tv, input2, 12)) != "GOGC=50\x00K=v\x00" {
		t.Errorf("environ_get %d %q", st, mustRead(t, tv, input2, 12))
	}
	var lines []string
	for _, e := range tv.proc.log.snapshot() {
		if e.Stdio {
			lines = append(lines, e.Level.String()+":"+e.Message)
		}
	}
	if strings.Join(lines, "|") != "info:hi\n\n" {
		t.Errorf("stdio lines %q (one trailing newline trimmed)", lines)
	}
}
