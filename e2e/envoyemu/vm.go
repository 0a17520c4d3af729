package envoyemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// vmKey carries the *vm in the context.Context of every call into a module,
// so host functions (shared by all instances of a runtime) find their VM.
type vmKey struct{}

// trap is the panic value a host function raises to abort the guest the way a
// wasm trap does (cpp-host's "restricted_callback").
type trap string

// vmEnv is what a VM needs from the thread that drives it. A worker's event
// loop and the test Driver implement it. Every function passed in runs later
// on the VM's own goroutine, never inside the current VM call.
type vmEnv interface {
	post(f func())
	after(d time.Duration, f func()) (cancel func())
	// dispatch starts an HTTP call; the result comes back through post.
	dispatch(v *vm, c *callout)
}

// restricted-callback allow lists (cpp-host WasmBase::startVm and allocMemory).
// Keys are "env.<name>" and "wasi.<name>" (either WASI module name).
var (
	startAllowStrict = keySet("env.emscripten_notify_memory_growth", "env.proxy_log",
		"wasi.fd_write", "wasi.args_sizes_get", "wasi.args_get", "wasi.environ_sizes_get",
		"wasi.environ_get", "wasi.fd_prestat_get", "wasi.fd_prestat_dir_name",
		"wasi.clock_time_get", "wasi.random_get", "wasi.fd_fdstat_get", "wasi.fd_fdstat_set_flags")
	startAllow139 = keySet("env.emscripten_notify_memory_growth", "env.proxy_log",
		"wasi.fd_write", "wasi.args_sizes_get", "wasi.args_get", "wasi.environ_sizes_get",
		"wasi.environ_get", "wasi.clock_time_get", "wasi.clock_res_get", "wasi.random_get",
		"wasi.poll_oneoff", "wasi.fd_fdstat_get", "wasi.fd_fdstat_set_flags",
		"wasi.fd_advise", "wasi.fd_allocate", "wasi.fd_datasync", "wasi.fd_fdstat_set_rights",
		"wasi.fd_filestat_get", "wasi.fd_filestat_set_size", "wasi.fd_filestat_set_times",
		"wasi.fd_pread", "wasi.fd_prestat_dir_name", "wasi.fd_prestat_get", "wasi.fd_pwrite",
		"wasi.fd_readdir", "wasi.fd_renumber", "wasi.fd_sync", "wasi.fd_tell",
		"wasi.path_create_directory", "wasi.path_filestat_get", "wasi.path_filestat_set_times",
		"wasi.path_link", "wasi.path_readlink", "wasi.path_remove_directory", "wasi.path_rename",
		"wasi.path_symlink", "wasi.path_unlink_file", "wasi.sock_accept", "wasi.sock_recv",
		"wasi.sock_send", "wasi.sock_shutdown")
	allocAllowStrict = keySet("env.proxy_log", "wasi.fd_write", "wasi.clock_time_get")
	allocAllow139    = keySet("env.proxy_log", "wasi.fd_write", "wasi.clock_time_get", "wasi.poll_oneoff")
)

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// vm is one instance of a plugin module: Envoy's WasmBase plus its V8 VM. It
// is single-threaded: every method runs on the goroutine that owns it.
type vm struct {
	m     *module
	spec  *PluginSpec
	proc  *process
	env   vmEnv
	name  string
	inst  api.Module
	mem   api.Memory
	fns   map[string]api.Function
	alloc api.Function
	goctx context.Context

	contexts map[uint32]*ctxState
	nextID   uint32
	vmCtx    *ctxState
	root     *ctxState

	current    *ctxState
	effective  uint32
	restricted map[string]bool
	stopNext   bool
	after      []func()
	stacks     [][]uint64
	depth      int

	failed      string // "" while healthy; Envoy's RuntimeError message once failed
	closed      bool
	created     time.Time
	pendingDone map[uint32]bool // roots whose proxy_on_done returned false
	trapNext    bool            // Host.InjectTrap: the next host call traps

	// spares recycles body memory (the Driver's; see spares).
	spares spares
	// scratch holds what a host function encodes for the guest until
	// copyOut has copied it (header map pairs).
	scratch []byte

	nextHTTPCallID uint32
	nextMetricID   [3]uint32
	metrics        map[uint32]*metric

	calls atomic.Int64
	traps atomic.Int64
	pages atomic.Uint32
}

// newVM instantiates the module and runs the WASI start sequence (_initialize,
// then main(0,0) or __main_void, else _start) with restricted callbacks, like
// WasmBase::initialize. The VM has only its VM context (id 0) afterwards.
func newVM(m *module, spec *PluginSpec, proc *process, env vmEnv, name string) (*vm, error) {
	v := &vm{
		m: m, spec: spec, proc: proc, env: env, name: name,
		contexts: map[uint32]*ctxState{}, nextID: 1, fns: map[string]api.Function{},
		metrics: map[uint32]*metric{}, nextMetricID: [3]uint32{0, 1, 2}, created: time.Now(),
		pendingDone: map[uint32]bool{},
	}
	v.goctx = context.WithValue(context.Background(), vmKey{}, v)
	inst, err := m.rt.InstantiateModule(v.goctx, m.compiled,
		wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("Failed to instantiate Wasm module: %w", err)
	}
	v.inst = inst
	v.mem = inst.Memory()
	for name := range m.exports {
		v.fns[name] = inst.ExportedFunction(name)
	}
	v.alloc = v.fns[m.alloc]
	v.vmCtx = &ctxState{v: v, kind: kindVM}
	v.contexts[0] = v.vmCtx
	v.startVM()
	if v.failed != "" {
		v.close()
		return nil, errors.New(v.failed)
	}
	return v, nil
}

// startVM is WasmBase::startVm.
func (v *vm) startVM() {
	allow := startAllowStrict
	if !v.m.version.StrictWASI() {
		allow = startAllow139
	}
	saved := v.restricted
	v.restricted = allow
	defer func() { v.restricted = saved }()
	if v.fns["_initialize"] != nil {
		v.call(v.vmCtx, "_initialize")
		if v.fns["main"] != nil {
			v.call(v.vmCtx, "main", 0, 0)
		} else if v.fns["__main_void"] != nil {
			v.call(v.vmCtx, "__main_void")
		}
	} else if v.fns["_start"] != nil {
		v.call(v.vmCtx, "_start")
	}
}

// startPlugin creates the root context and runs Envoy's plugin start sequence:
// proxy_on_context_create(root, 0) with the plugin configuration readable,
// proxy_on_vm_start(root, len(vm config)), proxy_on_configure(root, len(plugin
// config)). A false result or a trap is returned as an error.
func (v *vm) startPlugin() error {
	root := v.newContext(kindRoot, 0)
	v.root = root
	ok := true
	v.deferActions(func() {
		if v.fns["proxy_on_context_create"] != nil {
			root.pluginConfig = true
			v.call(root, "proxy_on_context_create", uint64(root.id), 0)
			root.pluginConfig = false
		}
		root.created = true
		if v.fns["proxy_on_vm_start"] != nil {
			r, called := v.call(root, "proxy_on_vm_start", uint64(root.id), uint64(len(v.spec.VMConfig)))
			ok = called && uint32(r) != 0
		}
	})
	if v.failed != "" {
		return errors.New(v.failed)
	}
	if !ok {
		return errors.New("Failed to start base Wasm")
	}
	if v.fns["proxy_on_configure"] != nil {
		v.deferActions(func() {
			root.pluginConfig = true
			r, called := v.call(root, "proxy_on_configure", uint64(root.id), uint64(len(v.spec.PluginConfig)))
			root.pluginConfig = false
			ok = called && uint32(r) != 0
		})
	}
	if v.failed != "" {
		return errors.New(v.failed)
	}
	if !ok {
		return errors.New("Failed to configure base Wasm plugin")
	}
	return nil
}

// shutdown is WasmBase::startShutdown for the root context: proxy_on_done,
// then proxy_on_delete unless on_done returned false, in which case the root
// waits for proxy_done. It reports whether the root is still pending.
func (v *vm) shutdown() (pending bool) {
	r := v.root
	if r == nil || v.contexts[r.id] != r {
		return false
	}
	done := true
	if !r.isFailed() && v.fns["proxy_on_done"] != nil {
		v.deferActions(func() {
			res, ok := v.call(r, "proxy_on_done", uint64(r.id))
			done = !ok || uint32(res) != 0
		})
	}
	if !done {
		v.pendingDone[r.id] = true
		return true
	}
	r.deleteRoot()
	return false
}

// deleteRoot is the end of a root context: proxy_on_delete, and its calls
// are cancelled and its timer stopped.
func (c *ctxState) deleteRoot() {
	if !c.isFailed() && c.v.fns["proxy_on_delete"] != nil {
		c.v.deferActions(func() { c.v.call(c, "proxy_on_delete", uint64(c.id)) })
	}
	c.cancelCallouts()
	c.stopTick()
	delete(c.v.contexts, c.id)
}

// close releases the instance. Pending calls of its root are cancelled (the
// root context dies with the VM) and nothing runs in it again.
func (v *vm) close() {
	if v.closed {
		return
	}
	v.closed = true
	if v.root != nil {
		v.root.cancelCallouts()
		v.root.stopTick()
	}
	if v.inst != nil {
		v.inst.Close(context.Background())
	}
}

// newContext allocates a context id (never reused within a VM).
func (v *vm) newContext(kind ctxKind, parent uint32) *ctxState {
	for v.contexts[v.nextID] != nil {
		v.nextID++
	}
	c := &ctxState{v: v, id: v.nextID, parentID: parent, kind: kind}
	v.nextID++
	v.contexts[c.id] = c
	return c
}

// call invokes an export as cpp-host's wrapped call does: the current context
// is set and the effective context reset for the duration (SaveRestoreContext),
// and a trap fails the VM for good. called is false when the VM had failed or
// the call trapped.
func (v *vm) call(c *ctxState, fn string, args ...uint64) (result uint64, called bool) {
	if v.failed != "" {
		return 0, false
	}
	f := v.fns[fn]
	savedCur, savedEff := v.current, v.effective
	v.current, v.effective = c, 0
	if v.depth == len(v.stacks) {
		v.stacks = append(v.stacks, make([]uint64, 8))
	}
	stack := v.stacks[v.depth]
	copy(stack, args)
	v.depth++
	v.calls.Add(1)
	err := f.CallWithStack(v.goctx, stack)
	v.depth--
	v.current, v.effective = savedCur, savedEff
	v.pages.Store(v.mem.Size() / 65536)
	if err != nil {
		v.fail(fmt.Sprintf("Function: %s failed: %v", fn, err))
		return 0, false
	}
	return stack[0], true
}

// fail marks the VM failed (FailState::RuntimeError); nothing calls into it again.
func (v *vm) fail(msg string) {
	if v.failed != "" {
		return
	}
	v.failed = msg
	v.traps.Add(1)
	v.proc.logf(LevelCritical, v.name, "Wasm VM failed %s", firstLine(msg))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// deferActions is DeferAfterCallActions around f: afterwards the stop flag is
// cleared and the deferred actions (continue/close stream, local replies,
// delayed deliveries) run, including any they queue themselves.
func (v *vm) deferActions(f func()) {
	f()
	v.stopNext = false
	for len(v.after) > 0 {
		a := v.after[0]
		v.after = v.after[1:]
		a()
	}
}

// addAfterVMCall queues an action for when the outermost VM call returns.
func (v *vm) addAfterVMCall(f func()) { v.after = append(v.after, f) }

// inVMCall reports whether a call into the VM is in progress.
func (v *vm) inVMCall() bool { return v.depth > 0 }

// effectiveContext is contextOrEffectiveContext().
func (v *vm) effectiveContext() *ctxState {
	if v.effective != 0 {
		if c := v.contexts[v.effective]; c != nil {
			return c
		}
	}
	return v.current
}

// --- memory protocol ---

func (v *vm) read(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		if ptr > v.mem.Size() {
			return nil, false
		}
		return []byte{}, true
	}
	return v.mem.Read(ptr, size)
}

func (v *vm) readString(ptr, size uint32) (string, bool) {
	b, ok := v.read(ptr, size)
	return string(b), ok
}

func (v *vm) writeU32(ptr, val uint32) bool { return v.mem.WriteUint32Le(ptr, val) }

func (v *vm) writeU64(ptr uint32, val uint64) bool { return v.mem.WriteUint64Le(ptr, val) }

// allocate is WasmBase::allocMemory: the guest allocator runs with the VM
// context and restricted callbacks. It returns the guest address, or false if
// the allocator is missing, trapped, returned 0 or an address out of memory.
func (v *vm) allocate(size uint32) (uint32, bool) {
	allow := allocAllowStrict
	if !v.m.version.StrictWASI() {
		allow = allocAllow139
	}
	saved := v.restricted
	v.restricted = allow
	r, ok := v.call(v.vmCtx, v.m.alloc, uint64(size))
	v.restricted = saved
	ptr := uint32(r)
	if !ok || ptr == 0 {
		return 0, false
	}
	if _, inMem := v.mem.Read(ptr, size); !inMem {
		return 0, false
	}
	return ptr, true
}

// copyOut is copyToPointerSize: data is copied into a fresh guest allocation
// whose address and length are written as 4-byte little-endian words at
// ptrPtr and sizePtr. Empty data writes 0/0 without allocating.
func (v *vm) copyOut(data []byte, ptrPtr, sizePtr uint32) bool {
	var ptr uint32
	if len(data) > 0 {
		p, ok := v.allocate(uint32(len(data)))
		if !ok || !v.mem.Write(p, data) {
			return false
		}
		ptr = p
	}
	return v.writeU32(ptrPtr, ptr) && v.writeU32(sizePtr, uint32(len(data)))
}

// memoryPages returns the linear memory size in 64 KiB pages after the last call.
func (v *vm) memoryPages() uint32 { return v.pages.Load() }

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
