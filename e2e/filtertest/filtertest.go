// Package filtertest runs one plugin test body against two hosts: the SDK's
// proxytest emulator with the plugin's native Go VMContext, and the compiled
// .wasm in envoyemu's VM-level Driver (Envoy's host semantics, Go 1.24 wasip1,
// strict WASI). What breaks only in wasm (a host call in init, a sleep, a
// callback signature, a header map read after its phase) fails the wasm half
// while the native half passes.
//
// The pass-through module's test (filter/main_test.go, package main, where
// its VMContext lives) reads:
//
//	filtertest.Run(t, filtertest.Spec{
//		VMContext: func() types.VMContext { return &vmContext{} },
//		Package:   "./filter",
//	}, func(t *testing.T, h filtertest.Harness) {
//		h.StartVM(); h.StartPlugin()
//		id := h.InitializeHttpContext()
//		h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
//		// assert x-pdroute: passthrough in h.GetCurrentResponseHeaders(id)
//	})
//
// It is test code for packages under filter/ and e2e/; it imports the SDK,
// filter/abi (for the native panic guard), envoyemu and wasmbuild.
package filtertest

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// Spec names the plugin in both forms and its configuration.
type Spec struct {
	// VMContext returns a fresh native VMContext (the one the wasm main
	// package passes to abi.SetVMContext). Nil skips the native half.
	VMContext func() types.VMContext
	// Package is the Go package of the wasm module, an import path or a path
	// relative to the module root ("./filter"). Empty skips the wasm half.
	Package string
	// PluginConfig and VMConfig are the plugin and VM configurations.
	PluginConfig []byte
	VMConfig     []byte
	// EnvoyVersion is the Envoy version the wasm half emulates; the zero
	// value is envoyemu.DefaultEnvoyVersion (strict WASI).
	EnvoyVersion envoyemu.EnvoyVersion
	// Clusters are the clusters http calls may name in the wasm half (nil:
	// any). proxytest accepts any name.
	Clusters []string
}

// LocalResponse is a local reply the plugin sent.
type LocalResponse struct {
	StatusCode int
	Details    string
	Body       []byte
	// Headers have lower-cased keys (Envoy lower-cases them).
	Headers [][2]string
	// GRPCStatus is -1 when none.
	GRPCStatus int
}

// Callout is a dispatched http call.
type Callout struct {
	ID       uint32
	Upstream string
	Headers  [][2]string
	Body     []byte
	Trailers [][2]string
}

// Harness is what a test body drives: the proxytest.HostEmulator operations
// a filter test uses. Both implementations return the plugin's action as
// Continue or Pause.
type Harness interface {
	// Kind is "native" or "wasm".
	Kind() string
	StartVM() bool
	StartPlugin() bool
	InitializeHttpContext() uint32
	CallOnRequestHeaders(id uint32, headers [][2]string, endOfStream bool) types.Action
	CallOnRequestBody(id uint32, body []byte, endOfStream bool) types.Action
	CallOnRequestTrailers(id uint32, trailers [][2]string) types.Action
	CallOnResponseHeaders(id uint32, headers [][2]string, endOfStream bool) types.Action
	CallOnResponseBody(id uint32, body []byte, endOfStream bool) types.Action
	CallOnResponseTrailers(id uint32, trailers [][2]string) types.Action
	// CompleteHttpContext ends the stream (on_log, then done/delete).
	CompleteHttpContext(id uint32)
	GetCurrentHttpStreamAction(id uint32) types.Action
	GetCurrentRequestHeaders(id uint32) [][2]string
	GetCurrentResponseHeaders(id uint32) [][2]string
	GetCurrentRequestBody(id uint32) []byte
	GetCurrentResponseBody(id uint32) []byte
	// GetSentLocalResponse is nil when the plugin sent none.
	GetSentLocalResponse(id uint32) *LocalResponse
	// GetCalloutAttributesFromContext lists the calls the stream (or, for the
	// root's id, the root) dispatched, answered or not, in order.
	GetCalloutAttributesFromContext(id uint32) []Callout
	CallOnHttpCallResponse(calloutID uint32, headers, trailers [][2]string, body []byte)
	Tick()
	// GetTickPeriod is in milliseconds.
	GetTickPeriod() uint32
	GetCounterMetric(name string) (uint64, error)
	GetGaugeMetric(name string) (uint64, error)
	// GetLogs returns the messages the plugin logged at level.
	GetLogs(level abispec.LogLevel) []string
}

// Run runs body twice, as subtests "native" and "wasm". The native half runs
// under proxytest with abi.Guard around spec.VMContext(); the wasm half builds
// spec.Package once per test binary and drives it with envoyemu.Driver.
func Run(t *testing.T, spec Spec, body func(t *testing.T, h Harness)) {
	t.Helper()
	t.Run("native", func(t *testing.T) {
		if spec.VMContext == nil {
			t.Skip("spec has no native VMContext")
		}
		opt := proxytest.NewEmulatorOption().
			WithVMContext(abi.Guard(spec.VMContext())).
			WithPluginConfiguration(spec.PluginConfig).
			WithVMConfiguration(spec.VMConfig)
		host, reset := proxytest.NewHostEmulator(opt)
		defer reset()
		body(t, &nativeHarness{host: host})
	})
	t.Run("wasm", func(t *testing.T) {
		if spec.Package == "" {
			t.Skip("spec has no wasm package")
		}
		code, err := os.ReadFile(wasmbuild.ForTest(t, spec.Package))
		if err != nil {
			t.Fatal(err)
		}
		d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{
			PluginConfig: spec.PluginConfig, VMConfig: spec.VMConfig,
			EnvoyVersion: spec.EnvoyVersion, Clusters: spec.Clusters, LogLevel: envoyemu.LevelTrace,
		})
		if err != nil {
			t.Fatalf("load %s: %v", spec.Package, err)
		}
		defer d.Close()
		body(t, &wasmHarness{d: d})
		if f := d.Failed(); f != "" {
			t.Errorf("the wasm VM failed: %s", f)
		}
	})
}

// --- native ---

type nativeHarness struct{ host proxytest.HostEmulator }

func (h *nativeHarness) Kind() string { return "native" }
func (h *nativeHarness) StartVM() bool {
	return h.host.StartVM() == types.OnVMStartStatusOK
}
func (h *nativeHarness) StartPlugin() bool {
	return h.host.StartPlugin() == types.OnPluginStartStatusOK
}
func (h *nativeHarness) InitializeHttpContext() uint32 { return h.host.InitializeHttpContext() }
func (h *nativeHarness) CallOnRequestHeaders(id uint32, hs [][2]string, eos bool) types.Action {
	return h.host.CallOnRequestHeaders(id, hs, eos)
}
func (h *nativeHarness) CallOnRequestBody(id uint32, b []byte, eos bool) types.Action {
	return h.host.CallOnRequestBody(id, b, eos)
}
func (h *nativeHarness) CallOnRequestTrailers(id uint32, ts [][2]string) types.Action {
	return h.host.CallOnRequestTrailers(id, ts)
}
func (h *nativeHarness) CallOnResponseHeaders(id uint32, hs [][2]string, eos bool) types.Action {
	return h.host.CallOnResponseHeaders(id, hs, eos)
}
func (h *nativeHarness) CallOnResponseBody(id uint32, b []byte, eos bool) types.Action {
	return h.host.CallOnResponseBody(id, b, eos)
}
func (h *nativeHarness) CallOnResponseTrailers(id uint32, ts [][2]string) types.Action {
	return h.host.CallOnResponseTrailers(id, ts)
}
func (h *nativeHarness) CompleteHttpContext(id uint32) { h.host.CompleteHttpContext(id) }
func (h *nativeHarness) GetCurrentHttpStreamAction(id uint32) types.Action {
	return h.host.GetCurrentHttpStreamAction(id)
}
func (h *nativeHarness) GetCurrentRequestHeaders(id uint32) [][2]string {
	return h.host.GetCurrentRequestHeaders(id)
}
func (h *nativeHarness) GetCurrentResponseHeaders(id uint32) [][2]string {
	return h.host.GetCurrentResponseHeaders(id)
}
func (h *nativeHarness) GetCurrentRequestBody(id uint32) []byte {
	return h.host.GetCurrentRequestBody(id)
}
func (h *nativeHarness) GetCurrentResponseBody(id uint32) []byte {
	return h.host.GetCurrentResponseBody(id)
}
func (h *nativeHarness) GetSentLocalResponse(id uint32) *LocalResponse {
	r := h.host.GetSentLocalResponse(id)
	if r == nil {
		return nil
	}
	return &LocalResponse{StatusCode: int(r.StatusCode), Details: r.StatusCodeDetail, Body: r.Data,
		Headers: lowerKeys(r.Headers), GRPCStatus: int(r.GRPCStatus)}
}
func (h *nativeHarness) GetCalloutAttributesFromContext(id uint32) []Callout {
	var out []Callout
	for _, a := range h.host.GetCalloutAttributesFromContext(id) {
		out = append(out, Callout{ID: a.CalloutID, Upstream: a.Upstream, Headers: a.Headers, Body: a.Body, Trailers: a.Trailers})
	}
	return out
}
func (h *nativeHarness) CallOnHttpCallResponse(id uint32, hs, ts [][2]string, b []byte) {
	h.host.CallOnHttpCallResponse(id, hs, ts, b)
}
func (h *nativeHarness) Tick()                 { h.host.Tick() }
func (h *nativeHarness) GetTickPeriod() uint32 { return h.host.GetTickPeriod() }
func (h *nativeHarness) GetCounterMetric(name string) (uint64, error) {
	return h.host.GetCounterMetric(name)
}
func (h *nativeHarness) GetGaugeMetric(name string) (uint64, error) {
	return h.host.GetGaugeMetric(name)
}
func (h *nativeHarness) GetLogs(level abispec.LogLevel) []string {
	switch level {
	case abispec.LogLevelTrace:
		return h.host.GetTraceLogs()
	case abispec.LogLevelDebug:
		return h.host.GetDebugLogs()
	case abispec.LogLevelInfo:
		return h.host.GetInfoLogs()
	case abispec.LogLevelWarn:
		return h.host.GetWarnLogs()
	case abispec.LogLevelError:
		return h.host.GetErrorLogs()
	}
	return h.host.GetCriticalLogs()
}

func lowerKeys(hs [][2]string) [][2]string {
	out := make([][2]string, len(hs))
	for i, p := range hs {
		out[i] = [2]string{strings.ToLower(p[0]), p[1]}
	}
	return out
}

// --- wasm ---

type wasmHarness struct{ d *envoyemu.Driver }

func (h *wasmHarness) Kind() string                  { return "wasm" }
func (h *wasmHarness) StartVM() bool                 { return h.d.StartVM() }
func (h *wasmHarness) StartPlugin() bool             { return h.d.StartPlugin() }
func (h *wasmHarness) InitializeHttpContext() uint32 { return h.d.InitializeHttpContext() }
func (h *wasmHarness) CallOnRequestHeaders(id uint32, hs [][2]string, eos bool) types.Action {
	return h.d.CallOnRequestHeaders(id, hs, eos)
}
func (h *wasmHarness) CallOnRequestBody(id uint32, b []byte, eos bool) types.Action {
	return h.d.CallOnRequestBody(id, b, eos)
}
func (h *wasmHarness) CallOnRequestTrailers(id uint32, ts [][2]string) types.Action {
	return h.d.CallOnRequestTrailers(id, ts)
}
func (h *wasmHarness) CallOnResponseHeaders(id uint32, hs [][2]string, eos bool) types.Action {
	return h.d.CallOnResponseHeaders(id, hs, eos)
}
func (h *wasmHarness) CallOnResponseBody(id uint32, b []byte, eos bool) types.Action {
	return h.d.CallOnResponseBody(id, b, eos)
}
func (h *wasmHarness) CallOnResponseTrailers(id uint32, ts [][2]string) types.Action {
	return h.d.CallOnResponseTrailers(id, ts)
}
func (h *wasmHarness) CompleteHttpContext(id uint32) { h.d.CompleteHttpContext(id) }
func (h *wasmHarness) GetCurrentHttpStreamAction(id uint32) types.Action {
	return h.d.CurrentHttpStreamAction(id)
}
func (h *wasmHarness) GetCurrentRequestHeaders(id uint32) [][2]string { return h.d.RequestHeaders(id) }
func (h *wasmHarness) GetCurrentResponseHeaders(id uint32) [][2]string {
	return h.d.ResponseHeaders(id)
}
func (h *wasmHarness) GetCurrentRequestBody(id uint32) []byte  { return h.d.RequestBody(id) }
func (h *wasmHarness) GetCurrentResponseBody(id uint32) []byte { return h.d.ResponseBody(id) }
func (h *wasmHarness) GetSentLocalResponse(id uint32) *LocalResponse {
	r := h.d.SentLocalResponse(id)
	if r == nil {
		return nil
	}
	return &LocalResponse{StatusCode: r.StatusCode, Details: r.Details, Body: r.Body, Headers: r.Headers, GRPCStatus: r.GRPCStatus}
}
func (h *wasmHarness) GetCalloutAttributesFromContext(id uint32) []Callout {
	var out []Callout
	for _, c := range h.d.HTTPCallouts() {
		if c.ContextID == id {
			out = append(out, Callout{ID: c.Token, Upstream: c.Cluster, Headers: c.Headers, Body: c.Body, Trailers: c.Trailers})
		}
	}
	return out
}
func (h *wasmHarness) CallOnHttpCallResponse(id uint32, hs, ts [][2]string, b []byte) {
	h.d.CallOnHttpCallResponse(id, hs, ts, b)
}
func (h *wasmHarness) Tick()                 { h.d.Tick() }
func (h *wasmHarness) GetTickPeriod() uint32 { return uint32(h.d.TickPeriod().Milliseconds()) }
func (h *wasmHarness) GetCounterMetric(name string) (uint64, error) {
	return metric(h.d, abispec.MetricTypeCounter, name)
}
func (h *wasmHarness) GetGaugeMetric(name string) (uint64, error) {
	return metric(h.d, abispec.MetricTypeGauge, name)
}
func (h *wasmHarness) GetLogs(level abispec.LogLevel) []string {
	return h.d.GuestLogs(envoyemu.LogLevel(level))
}

func metric(d *envoyemu.Driver, kind abispec.MetricType, name string) (uint64, error) {
	v, ok := d.Metric(kind, name)
	if !ok {
		return 0, errors.New(name + " not found")
	}
	return v, nil
}
