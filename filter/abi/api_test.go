//go:build !wasip1

package abi_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// inStream runs fn inside a request-headers callback of a fresh stream, so
// the host calls act on that stream, and returns the stream id.
func inStream(t *testing.T, host proxytest.HostEmulator, p *scriptedPlugin, fn func()) uint32 {
	t.Helper()
	p.onHeaders = func(uint32) { fn() }
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, requestHeaders, false)
	p.onHeaders = nil
	return id
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHeaderMapsReachTheirMap checks each map's operations land on that map
// (the native build routes them through a table of SDK functions).
func TestHeaderMapsReachTheirMap(t *testing.T) {
	type mapAPI struct {
		add, replace func(k, v string) error
		remove       func(k string) error
		get          func(k string) (string, error)
		getAll       func() ([][2]string, error)
		setAll       func([][2]string) error
		current      func(host proxytest.HostEmulator, id uint32) [][2]string
	}
	for _, tc := range []struct {
		name string
		api  mapAPI
		// fill loads the map into the host before the callback runs.
		fill func(host proxytest.HostEmulator, id uint32)
	}{
		{"request headers", mapAPI{
			abi.AddHttpRequestHeader, abi.ReplaceHttpRequestHeader, abi.RemoveHttpRequestHeader,
			abi.GetHttpRequestHeader, abi.GetHttpRequestHeaders, abi.ReplaceHttpRequestHeaders,
			proxytest.HostEmulator.GetCurrentRequestHeaders,
		}, nil},
		{"response headers", mapAPI{
			abi.AddHttpResponseHeader, abi.ReplaceHttpResponseHeader, abi.RemoveHttpResponseHeader,
			abi.GetHttpResponseHeader, abi.GetHttpResponseHeaders, abi.ReplaceHttpResponseHeaders,
			proxytest.HostEmulator.GetCurrentResponseHeaders,
		}, func(host proxytest.HostEmulator, id uint32) {
			host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		}},
		{"request trailers", mapAPI{
			abi.AddHttpRequestTrailer, abi.ReplaceHttpRequestTrailer, abi.RemoveHttpRequestTrailer,
			abi.GetHttpRequestTrailer, abi.GetHttpRequestTrailers, abi.ReplaceHttpRequestTrailers,
			requestTrailers,
		}, func(host proxytest.HostEmulator, id uint32) {
			host.CallOnRequestTrailers(id, [][2]string{{"grpc-status", "0"}})
		}},
		{"response trailers", mapAPI{
			abi.AddHttpResponseTrailer, abi.ReplaceHttpResponseTrailer, abi.RemoveHttpResponseTrailer,
			abi.GetHttpResponseTrailer, abi.GetHttpResponseTrailers, abi.ReplaceHttpResponseTrailers,
			responseTrailers,
		}, func(host proxytest.HostEmulator, id uint32) {
			host.CallOnResponseTrailers(id, [][2]string{{"grpc-status", "0"}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &scriptedPlugin{}
			host := startHost(t, p)
			id := inStream(t, host, p, func() {})
			if tc.fill != nil {
				tc.fill(host, id)
			}
			must(t, abi.SetEffectiveContext(id))
			must(t, tc.api.setAll([][2]string{{"keep", "1"}, {"drop", "2"}, {"swap", "a"}}))
			must(t, tc.api.add("new", "n"))
			must(t, tc.api.replace("swap", "b"))
			must(t, tc.api.remove("drop"))
			want := [][2]string{{"keep", "1"}, {"swap", "b"}, {"new", "n"}}
			if got := tc.api.current(host, id); !slices.Equal(got, want) {
				t.Errorf("host map = %v, want %v", got, want)
			}
			if got, err := tc.api.getAll(); err != nil || !slices.Equal(got, want) {
				t.Errorf("get all = %v %v", got, err)
			}
			if v, err := tc.api.get("swap"); err != nil || v != "b" {
				t.Errorf("get swap = %q %v", v, err)
			}
			if _, err := tc.api.get("absent"); !errors.Is(err, types.ErrorStatusNotFound) {
				t.Errorf("get absent: %v", err)
			}
		})
	}
}

// proxytest has no getter for trailers; read them back through the API.
func requestTrailers(proxytest.HostEmulator, uint32) [][2]string {
	m, _ := abi.GetHttpRequestTrailers()
	return m
}

func responseTrailers(proxytest.HostEmulator, uint32) [][2]string {
	m, _ := abi.GetHttpResponseTrailers()
	return m
}

func TestBodiesReachTheirBuffer(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		get                      func(start, max int) ([]byte, error)
		append, prepend, replace func([]byte) error
		call                     func(host proxytest.HostEmulator, id uint32, body []byte) types.Action
		current                  func(host proxytest.HostEmulator, id uint32) []byte
	}{
		{"request", abi.GetHttpRequestBody, abi.AppendHttpRequestBody, abi.PrependHttpRequestBody,
			abi.ReplaceHttpRequestBody,
			func(host proxytest.HostEmulator, id uint32, body []byte) types.Action {
				return host.CallOnRequestBody(id, body, true)
			}, proxytest.HostEmulator.GetCurrentRequestBody},
		{"response", abi.GetHttpResponseBody, abi.AppendHttpResponseBody, abi.PrependHttpResponseBody,
			abi.ReplaceHttpResponseBody,
			func(host proxytest.HostEmulator, id uint32, body []byte) types.Action {
				return host.CallOnResponseBody(id, body, true)
			}, proxytest.HostEmulator.GetCurrentResponseBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &scriptedPlugin{}
			host := startHost(t, p)
			id := inStream(t, host, p, func() {})
			tc.call(host, id, []byte("middle"))
			must(t, abi.SetEffectiveContext(id))
			if b, err := tc.get(1, 3); err != nil || string(b) != "idd" {
				t.Errorf("get(1,3) = %q %v", b, err)
			}
			must(t, tc.prepend([]byte("<")))
			must(t, tc.append([]byte(">")))
			if got := string(tc.current(host, id)); got != "<middle>" {
				t.Errorf("after prepend+append = %q", got)
			}
			must(t, tc.replace([]byte("new")))
			if got := string(tc.current(host, id)); got != "new" {
				t.Errorf("after replace = %q", got)
			}
		})
	}
}

func TestRootServices(t *testing.T) {
	p := &scriptedPlugin{}
	opt := proxytest.NewEmulatorOption().
		WithVMContext(abi.Guard(scriptedVM{p})).
		WithPluginConfiguration([]byte(`{"mode":"nixl"}`)).
		WithVMConfiguration([]byte("vm")).
		WithProperty([]string{"plugin_root_id"}, []byte("pdroute"))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()

	if b, err := abi.GetPluginConfiguration(); err != nil || string(b) != `{"mode":"nixl"}` {
		t.Errorf("plugin configuration = %q %v", b, err)
	}
	if b, err := abi.GetVMConfiguration(); err != nil || string(b) != "vm" {
		t.Errorf("vm configuration = %q %v", b, err)
	}
	if b, err := abi.GetProperty([]string{"plugin_root_id"}); err != nil || string(b) != "pdroute" {
		t.Errorf("property = %q %v", b, err)
	}
	must(t, abi.SetProperty([]string{"pdroute", "mode"}, []byte("x")))
	if b, err := host.GetProperty([]string{"pdroute", "mode"}); err != nil || string(b) != "x" {
		t.Errorf("set property reached host as %q %v", b, err)
	}
	if _, err := abi.GetProperty(nil); err == nil {
		t.Error("empty property path accepted")
	}
	if err := abi.SetProperty([]string{"a"}, nil); err == nil {
		t.Error("empty property value accepted")
	}
	if level, err := abi.GetLogLevel(); err != nil || level != abispec.LogLevelTrace {
		t.Errorf("log level = %v %v", level, err)
	}

	// Shared data: CAS semantics come from the host; the binding passes them.
	must(t, abi.SetSharedData("pdroute/k", []byte("v1"), 0))
	v, cas, err := abi.GetSharedData("pdroute/k")
	if err != nil || string(v) != "v1" {
		t.Fatalf("get = %q %v", v, err)
	}
	must(t, abi.SetSharedData("pdroute/k", []byte("v2"), cas))
	if err := abi.SetSharedData("pdroute/k", []byte("v3"), cas); !errors.Is(err, types.ErrorStatusCasMismatch) {
		t.Errorf("stale cas: %v", err)
	}
	if _, _, err := abi.GetSharedData("pdroute/absent"); !errors.Is(err, types.ErrorStatusNotFound) {
		t.Errorf("absent key: %v", err)
	}

	// Queues.
	q, err := abi.RegisterSharedQueue("kv-ready")
	must(t, err)
	must(t, abi.EnqueueSharedQueue(q, []byte("req-1")))
	if err := abi.EnqueueSharedQueue(q, nil); err == nil {
		t.Error("empty queue item accepted")
	}
	if b, err := abi.DequeueSharedQueue(q); err != nil || string(b) != "req-1" {
		t.Errorf("dequeue = %q %v", b, err)
	}
	if _, err := abi.DequeueSharedQueue(q); !errors.Is(err, types.ErrorStatusEmpty) {
		t.Errorf("dequeue empty: %v", err)
	}

	must(t, abi.SetTickPeriodMilliSeconds(250))
	if got := host.GetTickPeriod(); got != 250 {
		t.Errorf("tick period = %d", got)
	}
	if err := abi.CloseHttpRequest(); !errors.Is(err, types.ErrorUnimplemented) {
		t.Errorf("close under proxytest: %v", err)
	}
}

func TestLogLevelsReachTheirLevel(t *testing.T) {
	host := startHost(t, &scriptedPlugin{})
	abi.LogTrace("t")
	abi.LogTracef("t%d", 1)
	abi.LogDebug("d")
	abi.LogDebugf("d%d", 1)
	abi.LogInfo("i")
	abi.LogInfof("i%d", 1)
	abi.LogWarn("w")
	abi.LogWarnf("w%d", 1)
	abi.LogError("e")
	abi.LogErrorf("e%d", 1)
	abi.LogCritical("c")
	abi.LogCriticalf("c%d", 1)
	for _, tc := range []struct {
		got  []string
		want []string
	}{
		{host.GetTraceLogs(), []string{"t", "t1"}},
		{host.GetDebugLogs(), []string{"d", "d1"}},
		{host.GetInfoLogs(), []string{"i", "i1"}},
		{host.GetWarnLogs(), []string{"w", "w1"}},
		{host.GetErrorLogs(), []string{"e", "e1"}},
		{host.GetCriticalLogs(), []string{"c", "c1"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("logs = %q, want %q", tc.got, tc.want)
		}
	}
}

func TestMetrics(t *testing.T) {
	host := startHost(t, &scriptedPlugin{})
	requests := abi.DefineCounterMetric("pdroute_requests_total")
	requests.Increment(2)
	requests.Increment(0) // skipped: Envoy rejects 0
	requests.Increment(3)
	inflight := abi.DefineGaugeMetric("pdroute_inflight")
	inflight.Add(5)
	inflight.Add(-2)
	tokens := abi.DefineHistogramMetric("pdroute_prompt_tokens")
	tokens.Record(512)

	if v, err := host.GetCounterMetric("pdroute_requests_total"); err != nil || v != 5 || requests.Value() != 5 {
		t.Errorf("counter = %d %v, Value %d", v, err, requests.Value())
	}
	if v, err := host.GetGaugeMetric("pdroute_inflight"); err != nil || v != 3 || inflight.Value() != 3 {
		t.Errorf("gauge = %d %v, Value %d", v, err, inflight.Value())
	}
	if v, err := host.GetHistogramMetric("pdroute_prompt_tokens"); err != nil || v != 512 {
		t.Errorf("histogram = %d %v", v, err)
	}

	// The zero value is a no-op metric.
	var unset abi.MetricCounter
	unset.Increment(1)
	if unset.Value() != 0 || len(host.GetErrorLogs()) != 0 {
		t.Errorf("zero metric: value %d, error logs %q", unset.Value(), host.GetErrorLogs())
	}
}
