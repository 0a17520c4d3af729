package envoyemu

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/wasmbuild"
)

// pluginPath builds a test plugin (once per test binary, cached by content).
func pluginPath(t testing.TB, name string) string {
	t.Helper()
	if name == "filter" {
		return wasmbuild.ForTest(t, "./filter")
	}
	return wasmbuild.ForTest(t, "./e2e/envoyemu/testdata/plugins/"+name)
}

func pluginCode(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(pluginPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// upstream is a loopback HTTP server that reports what it received.
type upstream struct {
	*httptest.Server
	name string
	addr string
}

// newUpstream starts an upstream named name. Paths:
//
//	/slow        answers after 50 ms
//	/sleep?ms=N  answers after N ms
//	/stream      writes "first\n", waits 400 ms, writes "second\n" (so does /resp-buffer)
//	/hang        answers after 2 s (or when the client goes)
//	/status/N    answers status N
//	/reset-mid   sends headers and 5 of 10 body bytes, then closes
//	/drop        closes the connection without answering
//	anything else: 200 with "NAME METHOD PATH", the request headers (one per
//	line, sorted) and the request body.
func newUpstream(t testing.TB, name string) *upstream {
	u := &upstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-upstream-name", name)
		switch {
		case r.URL.Path == "/slow":
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, "slow")
		case r.URL.Path == "/sleep":
			var ms int
			fmt.Sscan(r.URL.Query().Get("ms"), &ms)
			time.Sleep(time.Duration(ms) * time.Millisecond)
			io.WriteString(w, "slept")
		case r.URL.Path == "/stream" || r.URL.Path == "/resp-buffer":
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			time.Sleep(400 * time.Millisecond)
			io.WriteString(w, "second\n")
		case r.URL.Path == "/hang":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
			io.WriteString(w, "late")
		case strings.HasPrefix(r.URL.Path, "/status/"):
			var code int
			fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/status/"), &code)
			w.WriteHeader(code)
			fmt.Fprintf(w, "status %d", code)
		case r.URL.Path == "/reset-mid":
			w.Header().Set("content-length", "10")
			w.WriteHeader(200)
			io.WriteString(w, "12345")
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		case r.URL.Path == "/drop":
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			body, _ := io.ReadAll(r.Body)
			var lines []string
			for k, vs := range r.Header {
				for _, v := range vs {
					lines = append(lines, strings.ToLower(k)+": "+v)
				}
			}
			sort.Strings(lines)
			fmt.Fprintf(w, "%s %s %s\nhost: %s\n%s\n\n%s", name, r.Method, r.URL.RequestURI(), r.Host, strings.Join(lines, "\n"), body)
		}
	}))
	u.addr = strings.TrimPrefix(u.URL, "http://")
	t.Cleanup(u.Close)
	return u
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// cluster describes a test cluster: STATIC with endpoints, or ORIGINAL_DST.
type cluster struct {
	name        string
	endpoints   []string
	originalDst bool
}

// hostConfig describes the one-listener config the tests use.
type hostConfig struct {
	plugin       string // test plugin name ("" for no wasm filter)
	pluginConfig string
	failure      string // failure_policy; default FAIL_CLOSED
	pluginExtra  string // extra PluginConfig YAML lines (indented under config:)
	bufferLimit  int
	idleTimeout  string
	reqTimeout   string // HCM request_timeout
	routeTimeout string
	notFound     string // cluster_not_found_response_code
	clusters     []cluster
	// routeCluster is the route's fixed cluster; "" routes on x-target-cluster.
	routeCluster string
	// routes are route YAML entries placed before the catch-all route
	// (named "catch_all").
	routes string
	admin  bool
}

func (c hostConfig) yaml(t testing.TB) string {
	var b strings.Builder
	if c.admin {
		b.WriteString("admin:\n  address: {socket_address: {address: 127.0.0.1, port_value: 0}}\n")
	}
	b.WriteString("static_resources:\n  listeners:\n  - name: main\n")
	b.WriteString("    address: {socket_address: {address: 127.0.0.1, port_value: 0}}\n")
	if c.bufferLimit > 0 {
		fmt.Fprintf(&b, "    per_connection_buffer_limit_bytes: %d\n", c.bufferLimit)
	}
	b.WriteString(`    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
`)
	if c.idleTimeout != "" {
		fmt.Fprintf(&b, "          stream_idle_timeout: %s\n", c.idleTimeout)
	}
	if c.reqTimeout != "" {
		fmt.Fprintf(&b, "          request_timeout: %s\n", c.reqTimeout)
	}
	b.WriteString("          route_config:\n            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n              routes:\n")
	b.WriteString(c.routes)
	b.WriteString("              - name: catch_all\n                match: {prefix: \"/\"}\n                route:\n")
	if c.routeCluster != "" {
		fmt.Fprintf(&b, "                  cluster: %s\n", c.routeCluster)
	} else {
		b.WriteString("                  cluster_header: x-target-cluster\n")
	}
	if c.routeTimeout != "" {
		fmt.Fprintf(&b, "                  timeout: %s\n", c.routeTimeout)
	}
	if c.notFound != "" {
		fmt.Fprintf(&b, "                  cluster_not_found_response_code: %s\n", c.notFound)
	}
	b.WriteString("          http_filters:\n")
	if c.plugin != "" {
		failure := c.failure
		if failure == "" {
			failure = "FAIL_CLOSED"
		}
		fmt.Fprintf(&b, `          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: kitchen_plugin
                root_id: kitchen_root
                failure_policy: %s
                configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: %q}
                vm_config:
                  vm_id: kitchen_vm
                  runtime: envoy.wasm.runtime.v8
                  code: {local: {filename: %q}}
%s`, failure, c.pluginConfig, pluginPath(t, c.plugin), c.pluginExtra)
	}
	b.WriteString(`          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
`)
	for _, cl := range c.clusters {
		fmt.Fprintf(&b, "  - name: %s\n    connect_timeout: 1s\n", cl.name)
		if cl.originalDst {
			b.WriteString("    type: ORIGINAL_DST\n    lb_policy: CLUSTER_PROVIDED\n    original_dst_lb_config: {use_http_header: true}\n")
			continue
		}
		fmt.Fprintf(&b, "    load_assignment:\n      cluster_name: %s\n      endpoints:\n      - lb_endpoints:\n", cl.name)
		for _, ep := range cl.endpoints {
			host, port, _ := net.SplitHostPort(ep)
			fmt.Fprintf(&b, "        - endpoint: {address: {socket_address: {address: %s, port_value: %s}}}\n", host, port)
		}
	}
	return b.String()
}

// startHost starts a host for c and closes it when the test ends.
func startHost(t testing.TB, c hostConfig, opts Options) *Host {
	t.Helper()
	h, err := StartYAML([]byte(c.yaml(t)), opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

var testClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// response is what a test request got.
type response struct {
	status  int
	header  http.Header
	body    string
	trailer http.Header
	err     error
}

// do sends a request through the host on a new connection.
func do(t testing.TB, h *Host, method, path string, body []byte, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+h.Addr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b), trailer: resp.Trailer, err: err}
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// guestLines returns the plugin log lines containing substr, with their VM.
func guestLines(h *Host, substr string) []LogEntry {
	var out []LogEntry
	for _, e := range h.Logs() {
		if e.Guest && strings.Contains(e.Message, substr) {
			out = append(out, e)
		}
	}
	return out
}
