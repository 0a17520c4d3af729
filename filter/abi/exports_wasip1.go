//go:build wasip1

package abi

import (
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi/abispec"
	"github.com/pdroute/pdroute/filter/internal/idtab"
)

// The module's callbacks (//go:wasmexport), with the exact signatures of
// abispec.Callbacks: uint32 and bool lower to i32. Each one first ends the
// previous callback's allocations (see returned) and records the context that
// runs; user code is reached only through the Guard wrappers.

// callout is an http call waiting for its answer.
type callout struct {
	caller   uint32 // context that dispatched it: the effective context of the answer
	callBack func(numHeaders, bodySize, numTrailers int)
}

// plugin is a root context.
type plugin struct {
	id  uint32
	ctx types.PluginContext
}

// vm is the module's context table: one per VM instance (Envoy worker).
var vm struct {
	// root is the guarded VM context from SetVMContext; nil until then.
	root types.VMContext
	// plugins are the guarded root (plugin) contexts: a VM has one per
	// plugin configuration, a few at most, so a slice scanned by id. HTTP
	// streams live in guards.streams.
	plugins []plugin
	// callouts are the pending http calls by token (tokens are per VM). An
	// entry lives until the host answers or its root is deleted, exactly as
	// long as the host keeps the call itself. A table, as guards.streams.
	callouts idtab.Table[callout]
}

func setVMContext(ctx types.VMContext) {
	vm.root = ctx
	vm.plugins = nil
	vm.callouts = idtab.Table[callout]{}
}

// pluginOf returns the root context id, or nil.
func pluginOf(id uint32) types.PluginContext {
	for _, p := range vm.plugins {
		if p.id == id {
			return p.ctx
		}
	}
	return nil
}

// alive reports whether contextID is a live root or stream.
func alive(contextID uint32) bool {
	return pluginOf(contextID) != nil || streamOf(contextID) != nil
}

// allocations are the buffers handed to the host by the allocator and not
// yet claimed by the host call that asked for them. Keeping them here keeps
// them reachable between the allocator returning and the host call returning
// the pointer; anything unclaimed is released when the next callback starts.
var allocations [][]byte

// proxyOnMemoryAllocate is the allocator Envoy fills host-returned data into.
// It never returns 0 (that is failure to the host), even for size 0, and
// makes no host call (Envoy allows only logging inside it).
//
//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) *byte {
	if into.armed {
		// one allocation per host call: a second one is not the read's
		into.armed = false
		if uint64(size) <= uint64(cap(into.dst)) && size > 0 {
			into.handed = true
			return unsafe.SliceData(into.dst)
		}
		if into.adopt {
			// the caller keeps what it is given: room to grow a little
			b := make([]byte, size, size+size/8)
			allocations = append(allocations, b)
			return &b[0]
		}
	}
	b := make([]byte, max(size, 1))
	allocations = append(allocations, b)
	return &b[0]
}

// into is where the next host call that returns data writes it when
// armed (arm): the caller's buffer dst if the data fits its room,
// else a fresh allocation, as without it. One host call returns data at a
// time, and the allocator runs only inside it, so one target suffices.
var into struct {
	dst                  []byte
	armed, handed, adopt bool
}

// scratch is the buffer transient reads (armScratch) land in: one per VM,
// kept between callbacks, overwritten by the next transient read. Its data
// is only ever handed to code that uses it before returning (the header
// visitors), so no reference outlives it; busy marks such a use, during
// which another transient read allocates as usual.
var scratch struct {
	buf  []byte
	busy bool
}

// The scratch buffer grows to the largest transient read up to maxScratch
// (a request's headers are ~0.2–2 KB; Envoy's limit is 60 KiB); a larger
// read is a fresh allocation as before. Wasm memory never shrinks, so
// maxScratch is what a VM keeps at most.
const maxScratch = 16 << 10

// enter starts a callback: unclaimed allocations of earlier callbacks are
// released and contextID becomes the active context.
func enter(contextID uint32) {
	clear(allocations)
	allocations = allocations[:0]
	into.dst, into.armed, into.handed, into.adopt = nil, false, false, false
	scratch.busy = false
	guards.active = contextID
}

//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion() {}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID, rootContextID uint32) {
	enter(contextID)
	if vm.root == nil {
		logMessage(abispec.LogLevelCritical, "pdroute: no VM context: SetVMContext was not called in init()")
		return
	}
	if rootContextID == 0 {
		p := vm.root.NewPluginContext(contextID)
		for i := range vm.plugins {
			if vm.plugins[i].id == contextID {
				vm.plugins[i].ctx = p
				return
			}
		}
		vm.plugins = append(vm.plugins, plugin{id: contextID, ctx: p})
		return
	}
	if p := pluginOf(rootContextID); p != nil {
		// The guard registers the stream in guards.streams; a plugin that
		// does not handle HTTP returns nil and its streams pass through.
		p.NewHttpContext(contextID)
		return
	}
	LogErrorf("pdroute: context %d created under unknown root %d", contextID, rootContextID)
}

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootContextID, vmConfigurationSize uint32) bool {
	enter(rootContextID)
	if vm.root == nil {
		logMessage(abispec.LogLevelCritical, "pdroute: no VM context: SetVMContext was not called in init()")
		return false
	}
	return bool(vm.root.OnVMStart(int(vmConfigurationSize)))
}

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootContextID, pluginConfigurationSize uint32) bool {
	enter(rootContextID)
	p := pluginOf(rootContextID)
	return p != nil && bool(p.OnPluginStart(int(pluginConfigurationSize)))
}

//go:wasmexport proxy_on_tick
func proxyOnTick(rootContextID uint32) {
	enter(rootContextID)
	if p := pluginOf(rootContextID); p != nil {
		p.OnTick()
	}
}

//go:wasmexport proxy_on_queue_ready
func proxyOnQueueReady(rootContextID, queueID uint32) {
	enter(rootContextID)
	if p := pluginOf(rootContextID); p != nil {
		p.OnQueueReady(queueID)
	}
}

// streamCall runs stream callback cb of contextID; streams the plugin does
// not handle (or no longer knows) pass through.
func streamCall(contextID uint32, cb streamCallback, n uint32, endOfStream bool) uint32 {
	enter(contextID)
	if s := streamOf(contextID); s != nil {
		return uint32(s.run(cb, int(n), endOfStream))
	}
	return continueAction
}

const continueAction = uint32(types.ActionContinue)

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID, numHeaders uint32, endOfStream bool) uint32 {
	return streamCall(contextID, onRequestHeaders, numHeaders, endOfStream)
}

//go:wasmexport proxy_on_request_body
func proxyOnRequestBody(contextID, bodySize uint32, endOfStream bool) uint32 {
	return streamCall(contextID, onRequestBody, bodySize, endOfStream)
}

//go:wasmexport proxy_on_request_trailers
func proxyOnRequestTrailers(contextID, numTrailers uint32) uint32 {
	return streamCall(contextID, onRequestTrailers, numTrailers, false)
}

//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(contextID, numHeaders uint32, endOfStream bool) uint32 {
	return streamCall(contextID, onResponseHeaders, numHeaders, endOfStream)
}

//go:wasmexport proxy_on_response_body
func proxyOnResponseBody(contextID, bodySize uint32, endOfStream bool) uint32 {
	return streamCall(contextID, onResponseBody, bodySize, endOfStream)
}

//go:wasmexport proxy_on_response_trailers
func proxyOnResponseTrailers(contextID, numTrailers uint32) uint32 {
	return streamCall(contextID, onResponseTrailers, numTrailers, false)
}

// proxyOnHttpCallResponse receives every http-call answer on the root
// context. The callback runs with its dispatching context as effective
// context, or is dropped if that context has ended.
//
//go:wasmexport proxy_on_http_call_response
func proxyOnHttpCallResponse(rootContextID, token, numHeaders, bodySize, numTrailers uint32) {
	enter(rootContextID)
	c, ok := vm.callouts.Delete(token)
	if !ok {
		return
	}
	if c.caller != rootContextID {
		if !alive(c.caller) {
			return
		}
		if err := SetEffectiveContext(c.caller); err != nil {
			LogErrorf("pdroute: http call %d: caller %d: %v", token, c.caller, err)
			return
		}
	}
	runCallout(c.caller, c.callBack, int(numHeaders), int(bodySize), int(numTrailers))
}

//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) {
	enter(contextID)
	if s := streamOf(contextID); s != nil {
		s.OnHttpStreamDone()
	}
}

//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) bool {
	enter(contextID)
	if p := pluginOf(contextID); p != nil {
		return p.OnPluginDone()
	}
	return true
}

// proxyOnDelete forgets everything the context held: a stream the host
// never logged, or a root with the calls the host now cancels. A root's
// streams are gone before the root, so those are the calls whose caller is
// the root or no longer alive (the latter would be dropped on arrival).
//
//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) {
	enter(contextID)
	guards.streams.Delete(contextID)
	k := -1
	for i := range vm.plugins {
		if vm.plugins[i].id == contextID {
			k = i
		}
	}
	if k < 0 {
		return
	}
	vm.plugins = append(vm.plugins[:k], vm.plugins[k+1:]...)
	vm.callouts.Each(func(token uint32, c callout) {
		if c.caller == contextID || !alive(c.caller) {
			vm.callouts.Delete(token)
		}
	})
}
