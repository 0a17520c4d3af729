// Command kitchen is envoyemu's test plugin: each request path exercises one
// host behaviour and reports what the host did (in response headers, a local
// reply body or the log), so the tests can check the host, not the plugin.
//
// Plugin configuration: "key=value;..." with keys tick_ms (tick period set at
// start), queue (a shared queue registered at start), reject (fail the start).
package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

func main() {}

func init() {
	abi.LogInfo("kitchen: init")
	abi.SetVMContext(&vmContext{})
}

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &root{} }

type root struct {
	types.DefaultPluginContext
	cfg      map[string]string
	queue    uint32
	inEnq    bool
	requests abi.MetricCounter
	inflight abi.MetricGauge
	sizes    abi.MetricHistogram
}

func parseConfig(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func (r *root) OnPluginStart(int) types.OnPluginStartStatus {
	b, err := abi.GetPluginConfiguration()
	if err != nil && len(b) > 0 {
		abi.LogErrorf("kitchen: config: %v", err)
	}
	r.cfg = parseConfig(string(b))
	if _, ok := r.cfg["reject"]; ok {
		abi.LogError("kitchen: rejecting the configuration")
		return types.OnPluginStartStatusFailed
	}
	r.requests = abi.DefineCounterMetric("kitchen_requests")
	r.inflight = abi.DefineGaugeMetric("kitchen.inflight")
	r.sizes = abi.DefineHistogramMetric("kitchen_body_bytes")
	if ms, err := strconv.Atoi(r.cfg["tick_ms"]); err == nil && ms > 0 {
		if err := abi.SetTickPeriodMilliSeconds(uint32(ms)); err != nil {
			abi.LogErrorf("kitchen: tick: %v", err)
		}
	}
	if q := r.cfg["queue"]; q != "" {
		id, err := abi.RegisterSharedQueue(q)
		if err != nil {
			abi.LogErrorf("kitchen: register queue: %v", err)
		}
		r.queue = id
	}
	abi.LogInfof("kitchen: started with %q", b)
	return types.OnPluginStartStatusOK
}

// OnTick busy-waits 30 ms so tests can see the period counts from the end of
// the tick (Envoy re-arms the timer after the callback returns).
func (r *root) OnTick() {
	start := time.Now()
	abi.LogInfof("tick start %d", start.UnixNano())
	for time.Since(start) < 30*time.Millisecond {
	}
	if r.cfg["tick_stop"] == "1" {
		if err := abi.SetTickPeriodMilliSeconds(0); err != nil {
			abi.LogErrorf("kitchen: stop tick: %v", err)
		}
	}
}

func (r *root) OnQueueReady(id uint32) {
	if r.inEnq {
		abi.LogError("queue ready delivered inside the enqueuing call")
	}
	for {
		item, err := abi.DequeueSharedQueue(id)
		if err != nil {
			abi.LogInfof("queue drained: %v", err)
			return
		}
		abi.LogInfof("dequeued %s", item)
	}
}

func (r *root) NewHttpContext(id uint32) types.HttpContext { return &stream{root: r, id: id} }

type stream struct {
	types.DefaultHttpContext
	root   *root
	id     uint32
	path   string
	query  url.Values
	bodies []string
	// routes: xds.route_name as the filter saw it (/reroute).
	routes []string
}

func (s *stream) reply(code uint32, body string, headers ...[2]string) types.Action {
	if err := abi.SendHttpResponse(code, headers, []byte(body), -1); err != nil {
		abi.LogErrorf("kitchen: local reply: %v", err)
	}
	return types.ActionPause
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func (s *stream) OnHttpRequestHeaders(n int, eos bool) types.Action {
	s.root.requests.Increment(1)
	s.root.inflight.Add(1)
	p, err := abi.GetHttpRequestHeader(":path")
	if err != nil {
		return s.reply(500, "no :path: "+err.Error())
	}
	u, _ := url.Parse(p)
	s.path, s.query = u.Path, u.Query()
	q := s.query.Get
	switch s.path {
	case "/sleep":
		// long enough that the runtime is still waiting when it looks for
		// work, and asks the host (poll_oneoff) to wait: with 1 ms, a
		// loaded machine could let the timer expire first, and the sleep
		// returned without the call TestSleepTrapsUnderStrictProfile needs
		time.Sleep(100 * time.Millisecond)
		return types.ActionContinue
	case "/trap":
		done := make(chan struct{})
		go func() { panic("kitchen: trap on demand") }()
		<-done
	case "/panic":
		panic("kitchen: panic on demand")
	case "/route":
		return s.setHeader("x-target-cluster", q("cluster"))
	case "/reroute":
		// The route as matched before the filter, then after :path changed
		// (ABI 0.2.1: the change clears the route cache).
		s.routes = append(s.routes, s.routeName())
		if err := abi.ReplaceHttpRequestHeader(":path", q("to")); err != nil {
			return s.reply(500, "set :path: "+err.Error())
		}
		s.routes = append(s.routes, s.routeName())
		return types.ActionContinue
	case "/dst":
		return s.setHeader("x-envoy-original-dst-host", q("host"))
	case "/local":
		return s.reply(418, "teapot", [2]string{"x-local", "1"})
	case "/close":
		if err := abi.CloseHttpRequest(); err != nil {
			abi.LogErrorf("kitchen: close: %v", err)
		}
		return types.ActionPause
	case "/call", "/resume":
		return s.call(q)
	case "/pause":
		return s.pauseThenResume()
	case "/cas":
		return s.cas(q("key"))
	case "/shared/set":
		return s.reply(200, errString(abi.SetSharedData(q("key"), []byte(q("val")), 0)))
	case "/shared/get":
		v, cas, err := abi.GetSharedData(q("key"))
		return s.reply(200, fmt.Sprintf("%s cas=%d %s", v, cas, errString(err)))
	case "/enqueue":
		id, err := abi.ResolveSharedQueue("", q("queue"))
		if err != nil {
			return s.reply(500, "resolve: "+err.Error())
		}
		s.root.inEnq = true
		err = abi.EnqueueSharedQueue(id, []byte(q("item")))
		s.root.inEnq = false
		return s.reply(200, "enqueue "+errString(err))
	case "/tick-stop":
		return s.reply(200, errString(abi.SetTickPeriodMilliSeconds(0)))
	case "/props":
		return s.props(q("h"))
	case "/stdio":
		fmt.Fprintln(os.Stdout, "to stdout")
		fmt.Fprintf(os.Stderr, "to stderr\n\n")
		return s.reply(200, "printed")
	case "/loglevel":
		l, err := abi.GetLogLevel()
		return s.reply(200, fmt.Sprintf("%d %s", l, errString(err)))
	case "/metrics":
		return s.reply(200, fmt.Sprintf("requests=%d inflight=%d", s.root.requests.Value(), s.root.inflight.Value()))
	case "/body-rewrite":
		if err := abi.RemoveHttpRequestHeader("content-length"); err != nil {
			abi.LogErrorf("kitchen: remove content-length: %v", err)
		}
	case "/headers-stop":
		return types.ActionPause
	}
	return types.ActionContinue
}

func (s *stream) routeName() string {
	v, err := abi.GetProperty([]string{"xds", "route_name"})
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(v)
}

func (s *stream) setHeader(k, v string) types.Action {
	if err := abi.ReplaceHttpRequestHeader(k, v); err != nil {
		return s.reply(500, "set header: "+err.Error())
	}
	return types.ActionContinue
}

// call dispatches an http call described by the query (cluster, path,
// timeout, dst, body) and either answers with what the callback saw (/call)
// or resumes the request (/resume).
func (s *stream) call(q func(string) string) types.Action {
	headers := [][2]string{{":method", "GET"}, {":path", q("path")}, {":authority", "callee"}}
	if q("nopath") == "1" {
		headers = headers[1:]
	}
	if dst := q("dst"); dst != "" {
		headers = append(headers, [2]string{"x-envoy-original-dst-host", dst})
	}
	timeout, _ := strconv.Atoi(q("timeout"))
	resume := s.path == "/resume"
	inDispatch := true
	var callBody []byte
	if b := q("body"); b != "" {
		callBody = []byte(b)
	}
	_, err := abi.DispatchHttpCall(q("cluster"), headers, callBody, nil, uint32(timeout), func(nh, bodySize, nt int) {
		if inDispatch {
			abi.LogError("http call answered inside the dispatching callback")
		}
		status := ""
		hs, _ := abi.GetHttpCallResponseHeaders()
		for _, kv := range hs {
			if kv[0] == ":status" {
				status = kv[1]
			}
		}
		body, _ := abi.GetHttpCallResponseBody(0, bodySize)
		code, msg, serr := abi.GetStatus()
		summary := fmt.Sprintf("headers=%d status=%s body=%q getstatus=%d/%s/%s", nh, status, body, code, msg, errString(serr))
		abi.LogInfof("call response: %s", summary)
		if !resume {
			s.reply(200, summary)
			return
		}
		if err := abi.AddHttpRequestHeader("x-call-status", status); err != nil {
			abi.LogErrorf("kitchen: add header after call: %v", err)
		}
		if err := abi.ResumeHttpRequest(); err != nil {
			abi.LogErrorf("kitchen: resume: %v", err)
		}
	})
	inDispatch = false
	if err != nil {
		return s.reply(200, "dispatch: "+err.Error())
	}
	return types.ActionPause
}

// pauseThenResume pauses the headers and resumes when an http call to the
// query's path returns, so a test can see which body callbacks arrive while
// the headers wait.
func (s *stream) pauseThenResume() types.Action {
	headers := [][2]string{{":method", "GET"}, {":path", s.query.Get("path")}, {":authority", "callee"}}
	_, err := abi.DispatchHttpCall(s.query.Get("cluster"), headers, nil, nil, 0, func(int, int, int) {
		abi.LogInfof("stream %d: resume", s.id)
		if err := abi.ResumeHttpRequest(); err != nil {
			abi.LogErrorf("kitchen: resume: %v", err)
		}
	})
	if err != nil {
		return s.reply(500, "dispatch: "+err.Error())
	}
	return types.ActionPause
}

// cas reports each step of a compare-and-swap sequence on key.
func (s *stream) cas(key string) types.Action {
	first := abi.SetSharedData(key, []byte("a"), 0)
	_, c1, _ := abi.GetSharedData(key)
	second := abi.SetSharedData(key, []byte("b"), c1)
	_, c2, _ := abi.GetSharedData(key)
	stale := abi.SetSharedData(key, []byte("c"), c1)
	zero := abi.SetSharedData(key, []byte("d"), 0)
	v, c3, _ := abi.GetSharedData(key)
	return s.reply(200, fmt.Sprintf("first=%s c1=%d second=%s c2=%d stale=%s zero=%s c3=%d v=%s",
		errString(first), c1, errString(second), c2, errString(stale), errString(zero), c3, v))
}

func (s *stream) props(header string) types.Action {
	var b strings.Builder
	for _, path := range [][]string{
		{"plugin_name"}, {"plugin_root_id"}, {"plugin_vm_id"}, {"request", "path"}, {"request", "method"},
		{"request", "headers", header}, {"source", "address"}, {"destination", "address"}, {"no_such_property"},
	} {
		v, err := abi.GetProperty(path)
		fmt.Fprintf(&b, "%s=%s(%s)\n", strings.Join(path, "."), v, errString(err))
	}
	return s.reply(200, b.String())
}

func (s *stream) OnHttpRequestBody(size int, eos bool) types.Action {
	s.bodies = append(s.bodies, fmt.Sprintf("%d/%t", size, eos))
	abi.LogInfof("stream %d: request body %d eos=%t", s.id, size, eos)
	switch s.path {
	case "/body-rewrite", "/body-buffer", "/pause":
		if !eos {
			return types.ActionPause
		}
		s.root.sizes.Record(uint64(size))
		if s.path == "/body-rewrite" {
			if err := abi.PrependHttpRequestBody([]byte("head-")); err != nil {
				abi.LogErrorf("kitchen: prepend: %v", err)
			}
			if err := abi.AppendHttpRequestBody([]byte("-tail")); err != nil {
				abi.LogErrorf("kitchen: append: %v", err)
			}
		}
	}
	return types.ActionContinue
}

func (s *stream) OnHttpResponseHeaders(int, bool) types.Action {
	status, _ := abi.GetHttpResponseHeader(":status")
	add := func(k, v string) {
		if err := abi.AddHttpResponseHeader(k, v); err != nil {
			abi.LogErrorf("kitchen: add %s: %v", k, err)
		}
	}
	add("x-seen-status", status)
	if len(s.routes) > 0 {
		add("x-routes", strings.Join(s.routes, ","))
	}
	add("x-request-bodies", strings.Join(s.bodies, ","))
	if s.path == "/lifetime" {
		_, err := abi.GetHttpRequestHeader(":path")
		add("x-req-get", errString(err))
		hs, err := abi.GetHttpRequestHeaders()
		add("x-req-pairs", fmt.Sprintf("%d %s", len(hs), errString(err)))
		add("x-req-add", errString(abi.AddHttpRequestHeader("x-late", "1")))
		_, err = abi.GetProperty([]string{"request", "path"})
		add("x-req-prop", errString(err))
	}
	return types.ActionContinue
}

func (s *stream) OnHttpResponseBody(size int, eos bool) types.Action {
	abi.LogInfof("stream %d: response body %d eos=%t", s.id, size, eos)
	if s.path == "/resp-buffer" && !eos {
		return types.ActionPause
	}
	return types.ActionContinue
}

func (s *stream) OnHttpStreamDone() {
	s.root.inflight.Add(-1)
	abi.LogInfof("stream %d: done", s.id)
}
