package envoyemu

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// TestPassthroughFilter runs a plugin built with filter/abi over real HTTP:
// the client gets the upstream's answer plus x-pdroute: passthrough. (The
// real ./filter is played over HTTP by e2e/scenarios.)
func TestPassthroughFilter(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "passthrough", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	r := do(t, h, "GET", "/v1/models", nil)
	if r.err != nil || r.status != 200 {
		t.Fatalf("got %d %v", r.status, r.err)
	}
	if got := r.header.Get("x-pdroute"); got != "passthrough" {
		t.Errorf("x-pdroute = %q", got)
	}
	if !strings.HasPrefix(r.body, "up GET /v1/models\n") {
		t.Errorf("body = %q", r.body)
	}
	for _, want := range []string{"x-forwarded-proto: http", "x-envoy-expected-rq-timeout-ms: 15000", "x-request-id: "} {
		if !strings.Contains(r.body, want) {
			t.Errorf("upstream did not see %q:\n%s", want, r.body)
		}
	}
	if r.header.Get("server") != "envoy" || r.header.Get("x-envoy-upstream-service-time") == "" {
		t.Errorf("missing Envoy response headers: %v", r.header)
	}
}

// TestStartSequence: _initialize runs for the base VM, the canary and each
// worker (2 + N); the plugin start (on_configure) for the canary and each
// worker (1 + N), each in its own VM.
func TestStartSequence(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", pluginConfig: "x=1", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{Concurrency: 3})
	if n := len(guestLines(h, "kitchen: init")); n != 5 {
		t.Errorf("_initialize ran %d times, want 2 + 3 workers", n)
	}
	starts := guestLines(h, `kitchen: started with "x=1"`)
	var vms []string
	for _, e := range starts {
		vms = append(vms, e.VM)
	}
	if strings.Join(vms, ",") != "canary,worker_0,worker_1,worker_2" {
		t.Errorf("plugin started in %v", vms)
	}
	ps := h.Plugins()
	if len(ps) != 1 || len(ps[0].Workers) != 3 || ps[0].Traps() != 0 {
		t.Fatalf("plugins = %+v", ps)
	}
	for _, w := range ps[0].Workers {
		if w.MemoryPages == 0 || w.Calls == 0 {
			t.Errorf("worker VM stats %+v", w)
		}
	}
}

// TestConfigRejectedByPlugin: a plugin whose on_configure fails in the canary
// rejects the config.
func TestConfigRejectedByPlugin(t *testing.T) {
	c := hostConfig{plugin: "kitchen", pluginConfig: "reject=1", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}
	_, err := StartYAML([]byte(c.yaml(t)), Options{})
	if err == nil || !strings.Contains(err.Error(), "Failed to configure base Wasm plugin") {
		t.Fatalf("err = %v", err)
	}
}

// TestInitHostCallTraps: a host call other than logging in init() traps with
// restricted_callback during _initialize, so the config is rejected.
func TestInitHostCallTraps(t *testing.T) {
	c := hostConfig{plugin: "initcall", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}
	h, err := StartYAML([]byte(c.yaml(t)), Options{})
	if err == nil {
		h.Close()
		t.Fatal("config accepted")
	}
	if !strings.Contains(err.Error(), "restricted_callback") || !strings.Contains(err.Error(), "_initialize") {
		t.Errorf("err = %v", err)
	}
}

// TestLinking: importing a WASI function outside Envoy 1.33's set fails to
// link; Envoy 1.39 links it (and its stub answers 1 ns). A bad export
// signature fails the load under any version.
func TestLinking(t *testing.T) {
	tests := []struct {
		plugin  string
		version EnvoyVersion
		wantErr string
	}{
		{"rawimport", EnvoyVersion{33}, "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1.clock_res_get"},
		{"rawimport", EnvoyVersion{38}, "missing import: wasi_snapshot_preview1.clock_res_get"},
		{"rawimport", EnvoyVersion{39}, ""},
		{"badexport", EnvoyVersion{39}, "Bad function signature for: proxy_on_request_headers, want: (i32 i32 i32) -> (i32), but the module exports: (i32 i32) -> (i32)"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.plugin, tt.version), func(t *testing.T) {
			d, err := NewDriver(pluginCode(t, tt.plugin), DriverOptions{EnvoyVersion: tt.version})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if !d.StartVM() {
				t.Error("clock_res_get did not answer 1 ns")
			}
		})
	}
}

// TestSleepTrapsUnderStrictProfile: time.Sleep reaches poll_oneoff, which
// Envoy 1.33–1.38 answer ENOSYS: the Go runtime throws and the VM traps, so
// FAIL_CLOSED answers 503 from then on. On 1.39 the sleep returns.
func TestSleepTrapsUnderStrictProfile(t *testing.T) {
	up := newUpstream(t, "up")
	for _, tt := range []struct {
		version    EnvoyVersion
		wantStatus int
		wantTraps  int64
	}{
		{EnvoyVersion{33}, 503, 1},
		{EnvoyVersion{39}, 200, 0},
	} {
		t.Run(tt.version.String(), func(t *testing.T) {
			h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}},
				Options{Concurrency: 1, EnvoyVersion: tt.version})
			r := do(t, h, "GET", "/sleep", nil)
			if r.status != tt.wantStatus {
				t.Fatalf("status %d (%v), want %d", r.status, r.err, tt.wantStatus)
			}
			if got := h.Plugins()[0].Traps(); got != tt.wantTraps {
				t.Errorf("traps = %d, want %d", got, tt.wantTraps)
			}
			if tt.wantTraps > 0 {
				if r := do(t, h, "GET", "/pass", nil); r.status != 503 {
					t.Errorf("after the trap: status %d, want 503", r.status)
				}
				if f := h.Plugins()[0].Workers[0].Failed; !strings.Contains(f, "proxy_on_request_headers") {
					t.Errorf("failure message %q", f)
				}
			}
		})
	}
}

// TestPauseResumeFromHTTPCall: on_request_headers pauses and dispatches a
// call; its answer arrives later (never inside the dispatch), the callback
// adds a header and resumes, and the upstream sees the header.
func TestPauseResumeFromHTTPCall(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	r := do(t, h, "GET", "/resume?cluster=up&path=/status/201", nil)
	if r.status != 200 || !strings.Contains(r.body, "x-call-status: 201") {
		t.Fatalf("status %d body %q", r.status, r.body)
	}
	if n := len(guestLines(h, "inside the dispatching callback")); n != 0 {
		t.Errorf("http call answered re-entrantly %d times", n)
	}
}

// TestHTTPCallOutcomes: any HTTP answer is a success, including Envoy's own
// 503 (no host, connect failure) and 504 (timeout); a reset after the headers
// is a failure (0 headers, get_status 11 "reset"); bad arguments are
// BadArgument at dispatch.
func TestHTTPCallOutcomes(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{
		{name: "up", endpoints: []string{up.addr}},
		{name: "down", endpoints: []string{closedAddr(t)}},
		{name: "dyn", originalDst: true},
	}}, Options{})
	tests := []struct {
		name, query, want string
	}{
		{"ok", "cluster=up&path=/status/202", `status=202 body="status 202" getstatus=0//ok`},
		{"upstream 500", "cluster=up&path=/status/500", `status=500 body="status 500"`},
		{"timeout", "cluster=up&path=/hang&timeout=100", `status=504 body="upstream request timeout"`},
		{"connect refused", "cluster=down&path=/", `status=503 body="upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: 111"`},
		{"dropped", "cluster=up&path=/drop", `status=503 body="upstream connect error or disconnect/reset before headers. reset reason: connection termination"`},
		{"reset after headers", "cluster=up&path=/reset-mid", `headers=0 status= body="" getstatus=11/reset/ok`},
		{"original dst without header", "cluster=dyn&path=/", `status=503 body="no healthy upstream"`},
		{"original dst", "cluster=dyn&path=/status/203&dst=" + up.addr, `status=203`},
		{"unknown cluster", "cluster=nope&path=/", "dispatch: error status returned by host: bad argument"},
		{"missing :path", "cluster=up&path=/&nopath=1", "dispatch: error status returned by host: bad argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, h, "GET", "/call?"+tt.query, nil)
			if r.status != 200 || !strings.Contains(r.body, tt.want) {
				t.Errorf("got %d %q, want %q", r.status, r.body, tt.want)
			}
		})
	}
}

// TestClusterHeaderRouting: the route's cluster_header sees the header the
// filter set (request-header changes clear the route cache); a missing or
// unknown cluster answers cluster_not_found_response_code (503 by default).
func TestClusterHeaderRouting(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	clusters := []cluster{{name: "a", endpoints: []string{a.addr}}, {name: "b", endpoints: []string{b.addr}}}
	for _, tt := range []struct {
		notFound   string
		path       string
		client     string // client-supplied x-target-cluster
		wantStatus int
		wantBody   string
	}{
		{"NOT_FOUND", "/route?cluster=b", "a", 200, "b GET /route?cluster=b"},
		{"NOT_FOUND", "/pass", "a", 200, "a GET /pass"},
		{"NOT_FOUND", "/route?cluster=zzz", "a", 404, ""},
		{"NOT_FOUND", "/pass", "", 404, ""},
		{"", "/route?cluster=zzz", "", 503, ""},
	} {
		t.Run(tt.notFound+tt.path+tt.client, func(t *testing.T) {
			h := startHost(t, hostConfig{plugin: "kitchen", notFound: tt.notFound, clusters: clusters}, Options{Concurrency: 1})
			var hdr []string
			if tt.client != "" {
				hdr = []string{"x-target-cluster", tt.client}
			}
			r := do(t, h, "GET", tt.path, nil, hdr...)
			if r.status != tt.wantStatus || !strings.HasPrefix(r.body, tt.wantBody) {
				t.Errorf("got %d %q", r.status, r.body)
			}
		})
	}
}

// TestOriginalDstRoute: an ORIGINAL_DST route goes to the host in
// x-envoy-original-dst-host; without it, 503 no healthy upstream.
func TestOriginalDstRoute(t *testing.T) {
	up := newUpstream(t, "picked")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "dyn", clusters: []cluster{{name: "dyn", originalDst: true}}}, Options{})
	if r := do(t, h, "GET", "/dst?host="+up.addr, nil); r.status != 200 || !strings.HasPrefix(r.body, "picked GET") {
		t.Errorf("with header: %d %q", r.status, r.body)
	}
	if r := do(t, h, "GET", "/pass", nil); r.status != 503 || r.body != "no healthy upstream" {
		t.Errorf("without header: %d %q", r.status, r.body)
	}
	if r := do(t, h, "GET", "/dst?host=not-an-ip:80", nil); r.status != 503 {
		t.Errorf("with a hostname: %d %q", r.status, r.body)
	}
}

// TestUpstreamFailures: connect failure 503 and route timeout 504 with
// Envoy's bodies.
func TestUpstreamFailures(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{routeTimeout: "0.2s", clusters: []cluster{
		{name: "up", endpoints: []string{up.addr}}, {name: "down", endpoints: []string{closedAddr(t)}},
	}}, Options{})
	r := do(t, h, "GET", "/", nil, "x-target-cluster", "down")
	if r.status != 503 || !strings.HasPrefix(r.body, "upstream connect error or disconnect/reset before headers.") {
		t.Errorf("refused: %d %q", r.status, r.body)
	}
	start := time.Now()
	r = do(t, h, "GET", "/hang", nil, "x-target-cluster", "up")
	if r.status != 504 || r.body != "upstream request timeout" {
		t.Errorf("timeout: %d %q", r.status, r.body)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("timeout took %v", d)
	}
	if r := do(t, h, "GET", "/", nil, "x-target-cluster", "up"); r.status != 200 || r.header.Get("content-type") != "text/plain; charset=utf-8" {
		t.Errorf("without filter: %d %v", r.status, r.header)
	}
}

// TestStreaming: the first chunk of a streamed response reaches the client
// long before the upstream finishes, through a filter that sees each chunk.
func TestStreaming(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	start := time.Now()
	resp, err := testClient.Get("http://" + h.Addr() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	first, err := rd.ReadString('\n')
	firstAt := time.Since(start)
	if err != nil || first != "first\n" {
		t.Fatalf("first chunk %q, %v", first, err)
	}
	second, _ := rd.ReadString('\n')
	total := time.Since(start)
	if second != "second\n" {
		t.Errorf("second chunk %q", second)
	}
	if firstAt > 250*time.Millisecond || total < 400*time.Millisecond {
		t.Errorf("first chunk after %v, whole response after %v: not streamed", firstAt, total)
	}
	eventually(t, "the last body callback", func() bool { return len(guestLines(h, "eos=true")) == 1 })
	var calls []string
	for _, e := range guestLines(h, "response body") {
		calls = append(calls, strings.TrimPrefix(e.Message, "stream 2: response body "))
	}
	// One callback per upstream chunk; Go's chunked reader may or may not
	// deliver the terminator with the last chunk.
	if got := strings.Join(calls, ","); got != "6 eos=false,7 eos=true" && got != "6 eos=false,7 eos=false,0 eos=true" {
		t.Errorf("response body callbacks %q", got)
	}
}

// TestResponseBodyBuffering: a response body callback returning
// StopIterationAndBuffer holds the chunks; the plugin sees the cumulative size
// and the client gets the whole body at the end.
func TestResponseBodyBuffering(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	start := time.Now()
	resp, err := testClient.Get("http://" + h.Addr() + "/resp-buffer")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := resp.Body.Read(b); err != nil || time.Since(start) < 400*time.Millisecond {
		t.Errorf("first byte after %v (%v): the body was not held", time.Since(start), err)
	}
	rest := new(strings.Builder)
	bufio.NewReader(resp.Body).WriteTo(rest)
	resp.Body.Close()
	if string(b)+rest.String() != "first\nsecond\n" {
		t.Errorf("body %q", string(b)+rest.String())
	}
	var sizes []string
	for _, e := range guestLines(h, "response body") {
		sizes = append(sizes, strings.TrimPrefix(e.Message, "stream 2: response body "))
	}
	if got := strings.Join(sizes, ","); got != "6 eos=false,13 eos=true" && got != "6 eos=false,13 eos=false,13 eos=true" {
		t.Errorf("response body callbacks %q", got)
	}
}

// TestLocalReplyThroughResponseCallbacks: a local reply from
// on_request_headers runs through the plugin's own on_response_headers.
func TestLocalReplyThroughResponseCallbacks(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{})
	r := do(t, h, "GET", "/local", nil)
	if r.status != 418 || r.body != "teapot" || r.header.Get("x-local") != "1" {
		t.Fatalf("got %d %q %v", r.status, r.body, r.header)
	}
	if r.header.Get("x-seen-status") != "418" || r.header.Get("content-type") != "text/plain" {
		t.Errorf("the plugin did not see its own reply: %v", r.header)
	}
}

// TestRequestBodyBuffering: StopIterationAndBuffer accumulates chunks (the
// plugin sees the cumulative size), a rewrite reaches the upstream, and a
// body over per_connection_buffer_limit_bytes is answered 413.
func TestRequestBodyBuffering(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", bufferLimit: 100 << 10, routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	body := strings.Repeat("x", 40<<10)
	r := do(t, h, "POST", "/body-rewrite", []byte(body))
	if r.status != 200 || !strings.HasSuffix(r.body, "\n\nhead-"+body+"-tail") {
		t.Fatalf("status %d, body tail %q", r.status, r.body[max(0, len(r.body)-40):])
	}
	sizes := guestLines(h, "request body")
	last := sizes[len(sizes)-1].Message
	if !strings.HasSuffix(last, fmt.Sprintf("request body %d eos=true", len(body))) {
		t.Errorf("last body callback %q, want the cumulative size", last)
	}
	r = do(t, h, "POST", "/body-buffer", []byte(strings.Repeat("y", 200<<10)))
	if r.status != 413 || r.body != "Payload Too Large" {
		t.Errorf("oversized: %d %q", r.status, r.body)
	}
}

// TestHeaderPauseStopsBodyCallbacks: Envoy turns a header Pause into
// StopAllIterationAndWatermark: no body callback reaches the plugin until it
// resumes, then the buffered body arrives in one call. With
// allow_on_headers_stop_iteration (Envoy ≥ 1.35) the body callbacks arrive
// while the headers wait.
func TestHeaderPauseStopsBodyCallbacks(t *testing.T) {
	up := newUpstream(t, "up")
	for _, tt := range []struct {
		allow bool
		want  string
	}{
		{false, "3000/true"},
		// The chunked terminator is a separate, empty end-of-stream chunk.
		{true, "1000/false,2000/false,3000/false,3000/true"},
	} {
		t.Run(fmt.Sprintf("allow=%t", tt.allow), func(t *testing.T) {
			c := hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}
			if tt.allow {
				c.pluginExtra = "                allow_on_headers_stop_iteration: true\n"
			}
			h := startHost(t, c, Options{EnvoyVersion: EnvoyVersion{35}})
			conn, err := net.Dial("tcp", h.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The call that resumes the headers takes 300 ms: the whole body is in by then.
			fmt.Fprintf(conn, "POST /pause?cluster=up&path=%%2Fsleep%%3Fms%%3D300 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(conn, "%x\r\n%s\r\n", 1000, strings.Repeat("z", 1000))
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Fprintf(conn, "0\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("x-request-bodies"); got != tt.want {
				t.Errorf("body callbacks %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHeaderMapLifetime: in on_response_headers the request headers are gone:
// get_value and add are BadArgument, get_pairs is OK and empty, and the
// request.path property is NotFound.
func TestHeaderMapLifetime(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	r := do(t, h, "GET", "/lifetime", nil)
	want := map[string]string{
		"x-req-get": "error status returned by host: bad argument",
		// The host answers OK with 0/0; filter/abi reports an empty map as
		// NotFound (as the SDK does), unlike the BadArgument of the others.
		"x-req-pairs": "0 error status returned by host: not found",
		"x-req-add":   "error status returned by host: bad argument",
		"x-req-prop":  "error status returned by host: not found",
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

// TestSharedDataAcrossWorkers: a value set through one worker's VM is read
// through the other's (shared data is process-wide), and the CAS rules hold.
func TestSharedDataAcrossWorkers(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{Concurrency: 2})
	if r := do(t, h, "GET", "/shared/set?key=k&val=hello", nil); r.body != "ok" {
		t.Fatalf("set: %q", r.body)
	}
	r := do(t, h, "GET", "/shared/get?key=k", nil) // a new connection: the other worker
	if !strings.HasPrefix(r.body, "hello cas=1 ok") {
		t.Errorf("get: %q", r.body)
	}
	workers := map[string]bool{}
	for _, e := range h.Logs() {
		if e.Guest {
			workers[e.VM] = true
		}
	}
	if v, cas, ok := h.SharedData("kitchen_vm", "k"); !ok || string(v) != "hello" || cas != 1 {
		t.Errorf("host view: %q %d %t", v, cas, ok)
	}
	r = do(t, h, "GET", "/cas?key=c", nil)
	// The process-wide CAS counter started at 1 and the set above took it.
	if r.body != "first=ok c1=2 second=ok c2=3 stale=error status returned by host: cas mismatch zero=ok c3=4 v=d" {
		t.Errorf("cas: %q", r.body)
	}
}

// TestQueueReadyToConsumer: every worker registers the queue at start, so the
// last one (worker_1) is the consumer; an item enqueued through any worker is
// announced to it, after the enqueuing call returned.
func TestQueueReadyToConsumer(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", pluginConfig: "queue=jobs", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{Concurrency: 2})
	for i := 0; i < 2; i++ {
		if r := do(t, h, "GET", fmt.Sprintf("/enqueue?queue=jobs&item=job%d", i), nil); r.body != "enqueue ok" {
			t.Fatalf("enqueue: %q", r.body)
		}
	}
	eventually(t, "both items", func() bool { return len(guestLines(h, "dequeued job")) == 2 })
	for _, e := range guestLines(h, "dequeued job") {
		if e.VM != "worker_1" {
			t.Errorf("%q delivered to %s, want the last registrant worker_1", e.Message, e.VM)
		}
	}
	if n := len(guestLines(h, "inside the enqueuing call")); n != 0 {
		t.Errorf("queue ready delivered re-entrantly")
	}
	if r := do(t, h, "GET", "/enqueue?queue=nope&item=x", nil); r.body != "resolve: error status returned by host: not found" {
		t.Errorf("unknown queue: %q", r.body)
	}
}

// TestTickPerRoot: each worker VM ticks on its own, and the timer is re-armed
// after the tick returns (a 30 ms tick with a 20 ms period starts every
// ≥ 50 ms); period 0 stops it.
func TestTickPerRoot(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", pluginConfig: "tick_ms=20", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{Concurrency: 2})
	eventually(t, "ticks on both workers", func() bool {
		seen := map[string]int{}
		for _, e := range guestLines(h, "tick start") {
			seen[e.VM]++
		}
		return seen["worker_0"] >= 3 && seen["worker_1"] >= 3
	})
	starts := map[string][]int64{}
	for _, e := range guestLines(h, "tick start") {
		var ns int64
		fmt.Sscan(strings.TrimPrefix(e.Message, "tick start "), &ns)
		starts[e.VM] = append(starts[e.VM], ns)
	}
	for vm, ts := range starts {
		for i := 1; i < len(ts); i++ {
			if d := time.Duration(ts[i] - ts[i-1]); d < 49*time.Millisecond {
				t.Errorf("%s: ticks %v apart, want ≥ 50ms (period counted from the end of the tick)", vm, d)
			}
		}
	}
	if _, ok := starts["canary"]; ok {
		t.Error("the canary VM ticked")
	}
	// Period 0 stops the timer of the worker that served the request only.
	if r := do(t, h, "GET", "/tick-stop", nil); r.body != "ok" {
		t.Fatalf("tick-stop: %q", r.body)
	}
	done := guestLines(h, ": done")
	stoppedVM, other := done[len(done)-1].VM, "worker_0"
	if stoppedVM == "worker_0" {
		other = "worker_1"
	}
	stoppedAt := time.Now()
	time.Sleep(400 * time.Millisecond)
	after := map[string]int{}
	for _, e := range guestLines(h, "tick start") {
		if e.Time.After(stoppedAt) {
			after[e.VM]++
		}
	}
	if after[stoppedVM] != 0 || after[other] < 2 {
		t.Errorf("ticks after the stop: %v (%s stopped)", after, stoppedVM)
	}
}

// TestPanicInOneRequest: a panic recovered by filter/abi fails only that
// request (500 JSON); the VM keeps serving.
func TestPanicInOneRequest(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{Concurrency: 1})
	r := do(t, h, "GET", "/panic", nil)
	if r.status != 500 || !strings.Contains(r.body, `"type":"internal_error"`) {
		t.Errorf("panic: %d %q", r.status, r.body)
	}
	if r := do(t, h, "GET", "/pass", nil); r.status != 200 {
		t.Errorf("next request: %d %q", r.status, r.body)
	}
	if n := h.Plugins()[0].Traps(); n != 0 {
		t.Errorf("%d traps", n)
	}
}

// TestFailurePolicies: after a trap, FAIL_CLOSED answers 503, FAIL_OPEN lets
// requests through without the filter, FAIL_RELOAD serves new requests from
// a fresh VM.
func TestFailurePolicies(t *testing.T) {
	up := newUpstream(t, "up")
	for _, tt := range []struct {
		policy     string
		wantStatus int
		wantFilter bool
		reloads    int64
	}{
		{"FAIL_CLOSED", 503, false, 0},
		{"FAIL_OPEN", 200, false, 0},
		{"FAIL_RELOAD", 200, true, 1},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			c := hostConfig{plugin: "kitchen", failure: tt.policy, routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}
			if tt.policy == "FAIL_RELOAD" {
				c.pluginExtra = "                reload_config: {backoff: {base_interval: 0.001s}}\n"
			}
			h := startHost(t, c, Options{Concurrency: 1})
			if r := do(t, h, "GET", "/trap", nil); r.status != 503 && tt.policy != "FAIL_OPEN" {
				t.Errorf("trapping request: %d", r.status)
			}
			time.Sleep(5 * time.Millisecond)
			r := do(t, h, "GET", "/pass", nil)
			if r.status != tt.wantStatus {
				t.Fatalf("next request: %d %q", r.status, r.body)
			}
			if got := r.header.Get("x-seen-status") != ""; got != tt.wantFilter {
				t.Errorf("filter ran = %t, want %t", got, tt.wantFilter)
			}
			ps := h.Plugins()[0]
			if ps.Reloads != tt.reloads || ps.Traps() != 1 {
				t.Errorf("reloads %d traps %d", ps.Reloads, ps.Traps())
			}
		})
	}
}

// TestCloseStream: proxy_close_stream resets the stream: the client sees the
// connection end without a response.
func TestCloseStream(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{})
	if r := do(t, h, "GET", "/close", nil); r.err == nil {
		t.Errorf("got a response %d %q", r.status, r.body)
	}
	eventually(t, "on_log/on_done for the closed stream", func() bool { return len(guestLines(h, ": done")) == 1 })
	if n := h.StreamsDone(); n != 1 {
		t.Errorf("StreamsDone = %d", n)
	}
}

// TestStdioAndLogLevel: fd 1/2 output becomes INFO/ERROR lines with one
// trailing newline trimmed; proxy_get_log_level reports the host level.
func TestStdioAndLogLevel(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{LogLevel: LevelWarn})
	do(t, h, "GET", "/stdio", nil)
	var got []string
	for _, e := range h.Logs() {
		if e.Stdio {
			got = append(got, fmt.Sprintf("%s:%q", e.Level, e.Message))
		}
	}
	if strings.Join(got, " ") != `info:"to stdout" error:"to stderr\n"` {
		t.Errorf("stdio lines %v", got)
	}
	if r := do(t, h, "GET", "/loglevel", nil); r.body != "3 ok" {
		t.Errorf("log level: %q", r.body)
	}
}

// TestPropertiesAndMetrics checks property values and the admin /stats.
func TestPropertiesAndMetrics(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", admin: true, routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{Concurrency: 2})
	r := do(t, h, "GET", "/props?h=x-foo&q=1", nil, "x-foo", "bar")
	for _, want := range []string{
		"plugin_name=kitchen_plugin(ok)", "plugin_root_id=kitchen_root(ok)", "plugin_vm_id=kitchen_vm(ok)",
		"request.path=/props?h=x-foo&q=1(ok)", "request.method=GET(ok)", "request.headers.x-foo=bar(ok)",
		"source.address=127.0.0.1:", "destination.address=" + h.Addr() + "(ok)",
		"no_such_property=(error status returned by host: not found)",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("properties lack %q:\n%s", want, r.body)
		}
	}
	do(t, h, "GET", "/metrics", nil)
	if n, ok := h.Metric(abispec.MetricTypeCounter, "kitchen_requests"); !ok || n != 2 {
		t.Errorf("kitchen_requests = %d %t (process-wide across both workers)", n, ok)
	}
	resp, err := testClient.Get("http://" + h.AdminAddr() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	bufio.NewReader(resp.Body).WriteTo(b)
	resp.Body.Close()
	for _, want := range []string{"wasmcustom.kitchen_requests: 2\n", "wasmcustom.kitchen.inflight: "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("/stats lacks %q:\n%s", want, b)
		}
	}
	resp, err = testClient.Get("http://" + h.AdminAddr() + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	bufio.NewReader(resp.Body).WriteTo(b)
	resp.Body.Close()
	if !strings.Contains(b.String(), "# TYPE kitchen_requests counter\nkitchen_requests{} 2\n") || !strings.Contains(b.String(), "kitchen_inflight{}") {
		t.Errorf("/stats/prometheus:\n%s", b)
	}
}

// TestClientDisconnect: a client that goes away ends the stream: on_log,
// on_done and on_delete still run; the pending http call is not cancelled.
func TestClientDisconnect(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{Concurrency: 1})
	conn, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /call?cluster=up&path=/slow HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(10 * time.Millisecond)
	conn.Close()
	eventually(t, "stream done", func() bool { return len(guestLines(h, ": done")) == 1 })
	eventually(t, "the call answered after the stream ended", func() bool {
		for _, e := range h.Logs() {
			if strings.Contains(e.Message, "http call 4 to up answered") {
				return true
			}
		}
		return false
	})
}

// TestFailClosedInFlight: when the VM fails, a stream in flight fails at its
// next callback (503 wasm_fail_stream). A stream paused with no callback to
// come waits for the HCM stream idle timeout; the 408 it triggers passes
// through the failed filter, which answers 503 instead (Envoy sends that
// nested reply straight to the codec).
func TestFailClosedInFlight(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", idleTimeout: "0.3s", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{Concurrency: 1})
	// A: a buffered request body, half sent.
	a, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fmt.Fprintf(a, "POST /body-buffer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	// B: paused at the headers, waiting for an http call that will never be delivered.
	b, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fmt.Fprintf(b, "GET /call?cluster=up&path=/slow HTTP/1.1\r\nHost: x\r\n\r\n")
	eventually(t, "both streams in the filter", func() bool { return len(guestLines(h, "request body 5 eos=false")) == 1 })
	if r := do(t, h, "GET", "/trap", nil); r.status != 503 {
		t.Fatalf("trap: %d", r.status)
	}
	fmt.Fprintf(a, "5\r\nworld\r\n0\r\n\r\n")
	ra, err := http.ReadResponse(bufio.NewReader(a), nil)
	if err != nil || ra.StatusCode != 503 {
		t.Fatalf("in-flight stream A: %v %v", ra, err)
	}
	rb, err := http.ReadResponse(bufio.NewReader(b), nil)
	if err != nil || rb.StatusCode != 503 {
		t.Fatalf("paused stream B: %v %v", rb, err)
	}
}

// TestStreamIdleTimeout: a request paused forever is ended by the HCM stream
// idle timeout: 408 "stream timeout", which the plugin sees in its response
// callback.
func TestStreamIdleTimeout(t *testing.T) {
	h := startHost(t, hostConfig{plugin: "kitchen", idleTimeout: "0.2s", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{"127.0.0.1:1"}}}}, Options{})
	start := time.Now()
	r := do(t, h, "GET", "/headers-stop", nil)
	if r.status != 408 || r.body != "stream timeout" || r.header.Get("x-seen-status") != "408" {
		t.Errorf("got %d %q %v", r.status, r.body, r.header)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("answered after %v", d)
	}
}

// TestRequestTrailers: a chunked request with trailers goes through the
// filter (on_request_trailers) and its body reaches the upstream.
func TestRequestTrailers(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{})
	conn, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /pass HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: x-t\r\n\r\n4\r\nbody\r\n0\r\nx-t: 1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	bufio.NewReader(resp.Body).WriteTo(b)
	if resp.StatusCode != 200 || !strings.HasSuffix(b.String(), "\n\nbody") || resp.Header.Get("x-request-bodies") != "4/false" {
		t.Errorf("got %d %q bodies %q", resp.StatusCode, b, resp.Header.Get("x-request-bodies"))
	}
}

// TestRouteCache: Envoy matches the route when the request headers arrive,
// before the filters, and again only after the cache is cleared; a wasm
// filter's request-header change clears it (ABI <= 0.2.1). So the route
// the filter reads before its change is the catch-all, the one after it and
// the one the router uses is the route of the new path.
func TestRouteCache(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	h := startHost(t, hostConfig{
		plugin:   "kitchen",
		clusters: []cluster{{name: "a", endpoints: []string{a.addr}}, {name: "b", endpoints: []string{b.addr}}},
		routes:   "              - name: to_a\n                match: {prefix: \"/a/\"}\n                route: {cluster: a}\n",
	}, Options{Concurrency: 1})
	r := do(t, h, "GET", "/reroute?to=/a/x", nil, "x-target-cluster", "b")
	if r.status != 200 || !strings.HasPrefix(r.body, "a GET /a/x") {
		t.Errorf("got %d %q, want cluster a (the route of the changed path)", r.status, r.body)
	}
	if got := r.header.Get("x-routes"); got != "catch_all,to_a" {
		t.Errorf("xds.route_name before,after the :path change = %q, want catch_all,to_a", got)
	}
	// Unchanged headers keep the route matched on arrival.
	r = do(t, h, "GET", "/a/y", nil)
	if r.status != 200 || !strings.HasPrefix(r.body, "a GET /a/y") {
		t.Errorf("got %d %q", r.status, r.body)
	}
}
