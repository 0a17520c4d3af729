//go:build !wasip1

package abi_test

import (
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

// scriptedPlugin is a test plugin whose callbacks record their calls, panic
// where told and return the configured actions. Every context of the VM
// shares it.
type scriptedPlugin struct {
	// panicIn maps a callback name to the value it panics with. Stream
	// callbacks are named as in types.HttpContext; "callout" is the
	// http-call callback.
	panicIn map[string]any
	// actions maps a stream callback name to its result (default Continue).
	actions map[string]types.Action
	// onHeaders runs in OnHttpRequestHeaders before the script, e.g. to
	// dispatch an http call.
	onHeaders func(contextID uint32)
	// calls records "Callback/contextID" in order.
	calls []string
}

func (p *scriptedPlugin) hook(name string, contextID uint32) types.Action {
	p.calls = append(p.calls, name+"/"+itoa(contextID))
	if v, ok := p.panicIn[name]; ok {
		panic(v)
	}
	return p.actions[name]
}

func itoa(n uint32) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

type scriptedVM struct{ p *scriptedPlugin }

func (v scriptedVM) OnVMStart(int) types.OnVMStartStatus {
	v.p.hook("OnVMStart", 0)
	return true
}

func (v scriptedVM) NewPluginContext(id uint32) types.PluginContext {
	return &scriptedRoot{p: v.p, id: id}
}

type scriptedRoot struct {
	types.DefaultPluginContext
	p  *scriptedPlugin
	id uint32
}

func (r *scriptedRoot) OnPluginStart(int) types.OnPluginStartStatus {
	r.p.hook("OnPluginStart", r.id)
	return true
}

func (r *scriptedRoot) OnTick() { r.p.hook("OnTick", r.id) }

func (r *scriptedRoot) NewHttpContext(id uint32) types.HttpContext {
	r.p.hook("NewHttpContext", id)
	return &scriptedStream{p: r.p, id: id}
}

type scriptedStream struct {
	p  *scriptedPlugin
	id uint32
}

func (s *scriptedStream) OnHttpRequestHeaders(int, bool) types.Action {
	if s.p.onHeaders != nil {
		s.p.onHeaders(s.id)
	}
	return s.p.hook("OnHttpRequestHeaders", s.id)
}

func (s *scriptedStream) OnHttpRequestBody(int, bool) types.Action {
	return s.p.hook("OnHttpRequestBody", s.id)
}

func (s *scriptedStream) OnHttpRequestTrailers(int) types.Action {
	return s.p.hook("OnHttpRequestTrailers", s.id)
}

func (s *scriptedStream) OnHttpResponseHeaders(int, bool) types.Action {
	return s.p.hook("OnHttpResponseHeaders", s.id)
}

func (s *scriptedStream) OnHttpResponseBody(int, bool) types.Action {
	return s.p.hook("OnHttpResponseBody", s.id)
}

func (s *scriptedStream) OnHttpResponseTrailers(int) types.Action {
	return s.p.hook("OnHttpResponseTrailers", s.id)
}

func (s *scriptedStream) OnHttpStreamDone() { s.p.hook("OnHttpStreamDone", s.id) }

// startHost runs p under proxytest behind abi.Guard, as SetVMContext would,
// and starts the VM and plugin.
func startHost(t *testing.T, p *scriptedPlugin) proxytest.HostEmulator {
	t.Helper()
	opt := proxytest.NewEmulatorOption().WithVMContext(abi.Guard(scriptedVM{p}))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if !bool(host.StartVM()) || !bool(host.StartPlugin()) {
		t.Fatalf("start failed; calls %v", p.calls)
	}
	p.calls = nil
	return host
}

var requestHeaders = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "pdroute"},
}
