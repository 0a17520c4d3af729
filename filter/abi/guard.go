package abi

import (
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/internal/idtab"
)

// A Go panic that escapes a wasm export is a trap, and a trap fails the whole
// VM: every stream of that Envoy worker. The wrappers below stop panics at
// each callback of the user's contexts instead, once, in plain Go, so the
// native (proxytest) and wasm builds fail a panicking stream the same way.

// guardState is the per-VM bookkeeping of the recovery layer.
type guardState struct {
	// streams holds the live HTTP streams by context id: from
	// NewHttpContext to OnHttpStreamDone (or proxy_on_delete if the host
	// skips the log call). An idtab.Table rather than a map: O(1) on far
	// less code per callback than the runtime's map functions.
	streams idtab.Table[*streamGuard]
	// active is the context whose code runs now: set on every callback entry
	// and by SetEffectiveContext. Http calls are attributed to it.
	active uint32
	// free are guards of ended streams kept for reuse (reuseGuards).
	free []*streamGuard
}

// maxFreeGuards bounds guards.free.
const maxFreeGuards = 16

var guards guardState

// streamOf returns the live stream with context id, or nil.
func streamOf(id uint32) *streamGuard {
	s, _ := guards.streams.Get(id)
	return s
}

// Guard wraps vm so that every callback of it, of the plugin contexts it
// creates and of their HTTP contexts, recovers panics:
//   - a stream callback (or an http-call callback dispatched by a stream):
//     logged at error level with the context id and callback name; the stream
//     gets a 500 local reply with an OpenAI-style JSON error or, if its
//     response headers already went downstream, is closed; afterwards its
//     callbacks return Continue without entering user code, except
//     OnHttpStreamDone, which still runs (under its own recovery) so the
//     plugin can release what the stream holds;
//   - OnVMStart / OnPluginStart: logged, and the start fails (config rejected);
//   - other root callbacks (tick, queue, root http calls, done): logged, and
//     the VM keeps running.
//
// SetVMContext applies Guard itself. Native tests under proxytest pass
// Guard(vm) to proxytest's WithVMContext so they exercise the same recovery.
// Guard starts a fresh per-VM state: call it once per VM (or per emulator).
func Guard(vm types.VMContext) types.VMContext {
	guards = guardState{}
	return &vmGuard{user: vm}
}

// internalErrorHeaders are the headers of the 500 reply for a panic.
var internalErrorHeaders = [][2]string{{"content-type", "application/json"}}

// internalErrorDetails is the response code detail Envoy logs for the reply.
const internalErrorDetails = "pdroute_internal_error"

// internalErrorBody is the OpenAI-style error body for a panic value.
func internalErrorBody(panicValue any) []byte {
	msg, _ := json.Marshal("pdroute: internal error: " + fmt.Sprint(panicValue))
	return []byte(`{"error":{"message":` + string(msg) + `,"type":"internal_error","code":500}}`)
}

// panicReply builds the local reply for a stream whose callback panicked.
var panicReply = func(panicValue any) (status uint32, body []byte) {
	return 500, internalErrorBody(panicValue)
}

// SetPanicReply replaces the status and body of the local reply a panicking
// stream gets (default: 500 with internalErrorBody), so a plugin can answer
// in the same error shape as its other errors. Call it before the VM starts
// (from init); it is not a host call.
func SetPanicReply(reply func(panicValue any) (status uint32, body []byte)) {
	panicReply = reply
}

func logPanic(contextID uint32, callback string, panicValue any) {
	LogErrorf("pdroute: panic in %s (context %d): %v\n%s", callback, contextID, panicValue, debug.Stack())
}

type vmGuard struct{ user types.VMContext }

func (g *vmGuard) OnVMStart(vmConfigurationSize int) (ok types.OnVMStartStatus) {
	defer catchStart(0, "OnVMStart", (*bool)(&ok))
	return g.user.OnVMStart(vmConfigurationSize)
}

func (g *vmGuard) NewPluginContext(contextID uint32) types.PluginContext {
	return &pluginGuard{id: contextID, user: newPluginContext(g.user, contextID)}
}

// newPluginContext calls the user's factory; if it panics the root gets a
// plugin whose start fails, so the host rejects the configuration.
func newPluginContext(vm types.VMContext, contextID uint32) (p types.PluginContext) {
	defer func() {
		if r := recover(); r != nil {
			logPanic(contextID, "NewPluginContext", r)
			p = &failedPlugin{}
		}
	}()
	return vm.NewPluginContext(contextID)
}

// failedPlugin stands for a plugin context whose creation panicked.
type failedPlugin struct{ types.DefaultPluginContext }

func (*failedPlugin) OnPluginStart(int) types.OnPluginStartStatus { return false }

// catchStart is deferred by start callbacks: a panic is logged and the start
// reported as failed.
func catchStart(contextID uint32, callback string, ok *bool) {
	if r := recover(); r != nil {
		logPanic(contextID, callback, r)
		*ok = false
	}
}

// catchRoot is deferred by the other root callbacks: a panic is logged only.
func catchRoot(contextID uint32, callback string) {
	if r := recover(); r != nil {
		logPanic(contextID, callback, r)
	}
}

type pluginGuard struct {
	id   uint32
	user types.PluginContext
}

func (p *pluginGuard) OnPluginStart(pluginConfigurationSize int) (ok types.OnPluginStartStatus) {
	guards.active = p.id
	defer catchStart(p.id, "OnPluginStart", (*bool)(&ok))
	return p.user.OnPluginStart(pluginConfigurationSize)
}

func (p *pluginGuard) OnPluginDone() (done bool) {
	guards.active = p.id
	// A panicking plugin cannot finish pending work: report done so the host
	// can delete it instead of waiting forever.
	done = true
	defer catchRoot(p.id, "OnPluginDone")
	return p.user.OnPluginDone()
}

func (p *pluginGuard) OnQueueReady(queueID uint32) {
	guards.active = p.id
	defer catchRoot(p.id, "OnQueueReady")
	p.user.OnQueueReady(queueID)
}

func (p *pluginGuard) OnTick() {
	guards.active = p.id
	defer catchRoot(p.id, "OnTick")
	p.user.OnTick()
}

// NewTcpContext returns nil: pdroute is an HTTP filter only.
func (p *pluginGuard) NewTcpContext(uint32) types.TcpContext { return nil }

// NewHttpContext calls the user's factory. A plugin that does not handle
// HTTP returns nil. If the factory panics the stream gets a context that
// fails it at its first callback, so the client sees the 500.
func (p *pluginGuard) NewHttpContext(contextID uint32) (h types.HttpContext) {
	guards.active = contextID
	defer func() {
		if r := recover(); r != nil {
			logPanic(contextID, "NewHttpContext", r)
			h = newStreamGuard(contextID, &failedStream{panicValue: r})
		}
	}()
	user := p.user.NewHttpContext(contextID)
	if user == nil {
		return nil
	}
	return newStreamGuard(contextID, user)
}

// newStreamGuard registers the guard of a new stream.
func newStreamGuard(contextID uint32, user types.HttpContext) *streamGuard {
	var s *streamGuard
	if n := len(guards.free); n > 0 {
		s = guards.free[n-1]
		guards.free[n-1] = nil
		guards.free = guards.free[:n-1]
		*s = streamGuard{id: contextID, user: user}
	} else {
		s = &streamGuard{id: contextID, user: user}
	}
	guards.streams.Put(contextID, s) // replaces a stream the host never ended
	return s
}

// failedStream stands for an HTTP context whose creation panicked: it
// re-raises that panic at the first callback, where the stream guard turns it
// into the 500 reply.
type failedStream struct {
	types.DefaultHttpContext
	panicValue any
}

func (f *failedStream) OnHttpRequestHeaders(int, bool) types.Action { panic(f.panicValue) }

// streamGuard wraps one HTTP context.
type streamGuard struct {
	id   uint32
	user types.HttpContext
	// failed is set once a callback panicked: user code is not entered again
	// except OnHttpStreamDone.
	failed bool
	// responseStarted is set once response headers may have gone downstream;
	// a local reply is impossible from then on.
	responseStarted bool
}

// streamCallback names a stream callback that returns an action.
type streamCallback uint8

const (
	onRequestHeaders streamCallback = iota
	onRequestBody
	onRequestTrailers
	onResponseHeaders
	onResponseBody
	onResponseTrailers
)

var streamCallbackNames = [...]string{
	onRequestHeaders:   "OnHttpRequestHeaders",
	onRequestBody:      "OnHttpRequestBody",
	onRequestTrailers:  "OnHttpRequestTrailers",
	onResponseHeaders:  "OnHttpResponseHeaders",
	onResponseBody:     "OnHttpResponseBody",
	onResponseTrailers: "OnHttpResponseTrailers",
}

// run is every stream callback that returns an action, with one recovery:
// one shared path rather than one wrapper per callback, so a request runs
// the same few functions whichever callbacks it gets.
func (s *streamGuard) run(cb streamCallback, n int, endOfStream bool) (action types.Action) {
	if s.failed {
		return types.ActionContinue
	}
	guards.active = s.id
	// A closure literal, not defer s.catch(…): that would run a generated
	// wrapper and catch, two functions per callback instead of one.
	defer func() {
		if r := recover(); r != nil {
			action = s.fail(streamCallbackNames[cb], r)
		}
	}()
	switch cb {
	case onRequestHeaders:
		return s.user.OnHttpRequestHeaders(n, endOfStream)
	case onRequestBody:
		return s.user.OnHttpRequestBody(n, endOfStream)
	case onRequestTrailers:
		return s.user.OnHttpRequestTrailers(n)
	case onResponseHeaders:
		action = s.user.OnHttpResponseHeaders(n, endOfStream)
		if action == types.ActionContinue {
			s.responseStarted = true
		}
		return action
	case onResponseBody:
		return s.user.OnHttpResponseBody(n, endOfStream)
	}
	return s.user.OnHttpResponseTrailers(n)
}

// fail records a panic of the stream's user code and ends the stream for the
// client: a 500 JSON reply, or a reset once the response has started.
func (s *streamGuard) fail(callback string, panicValue any) types.Action {
	s.failed = true
	logPanic(s.id, callback, panicValue)
	// The panicking code may have moved the effective context elsewhere.
	if err := SetEffectiveContext(s.id); err != nil {
		LogErrorf("pdroute: stream %d: set effective context after panic: %v", s.id, err)
	}
	if s.responseStarted {
		if err := CloseHttpResponse(); err != nil {
			LogErrorf("pdroute: stream %d: close after panic: %v", s.id, err)
		}
		return types.ActionPause
	}
	status, body := panicReply(panicValue)
	if err := sendLocalResponse(status, internalErrorDetails, internalErrorHeaders, body, -1); err != nil {
		LogErrorf("pdroute: stream %d: 500 reply after panic: %v", s.id, err)
	}
	return types.ActionPause
}

func (s *streamGuard) OnHttpRequestHeaders(numHeaders int, endOfStream bool) types.Action {
	return s.run(onRequestHeaders, numHeaders, endOfStream)
}

func (s *streamGuard) OnHttpRequestBody(bodySize int, endOfStream bool) types.Action {
	return s.run(onRequestBody, bodySize, endOfStream)
}

func (s *streamGuard) OnHttpRequestTrailers(numTrailers int) types.Action {
	return s.run(onRequestTrailers, numTrailers, false)
}

func (s *streamGuard) OnHttpResponseHeaders(numHeaders int, endOfStream bool) types.Action {
	return s.run(onResponseHeaders, numHeaders, endOfStream)
}

func (s *streamGuard) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	return s.run(onResponseBody, bodySize, endOfStream)
}

func (s *streamGuard) OnHttpResponseTrailers(numTrailers int) types.Action {
	return s.run(onResponseTrailers, numTrailers, false)
}

// OnHttpStreamDone runs even for a failed stream so the plugin can release
// what the stream holds; a panic here is only logged. The stream leaves the
// registry: a late http-call answer for it is dropped. In the wasm module
// the registry was the guard's only holder, so the guard is kept for the
// next stream (reuseGuards).
func (s *streamGuard) OnHttpStreamDone() {
	guards.streams.Delete(s.id)
	guards.active = s.id
	defer func() {
		if r := recover(); r != nil {
			logPanic(s.id, "OnHttpStreamDone", r)
		}
	}()
	s.user.OnHttpStreamDone()
	if reuseGuards && len(guards.free) < maxFreeGuards {
		s.user = nil
		guards.free = append(guards.free, s)
	}
}

// guardCallout wraps an http-call callback dispatched by context caller
// (for hosts that take a closure; the wasm module calls runCallout itself).
func guardCallout(caller uint32, callBack func(numHeaders, bodySize, numTrailers int)) func(int, int, int) {
	return func(numHeaders, bodySize, numTrailers int) {
		runCallout(caller, callBack, numHeaders, bodySize, numTrailers)
	}
}

// runCallout runs an http-call callback dispatched by context caller: not
// at all if that stream failed, and a panic fails the stream (or is only
// logged for a root caller).
func runCallout(caller uint32, callBack func(numHeaders, bodySize, numTrailers int), numHeaders, bodySize, numTrailers int) {
	s := streamOf(caller)
	if s != nil && s.failed {
		return
	}
	guards.active = caller
	defer func() {
		if r := recover(); r != nil {
			if s != nil {
				s.fail("http call callback", r)
				return
			}
			logPanic(caller, "http call callback", r)
		}
	}()
	callBack(numHeaders, bodySize, numTrailers)
}
