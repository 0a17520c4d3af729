package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestRunServesUntilSIGTERM(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	upHost, upPort, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	lis := freeAddr(t)
	host, port, _ := net.SplitHostPort(lis)
	cfg := fmt.Sprintf(`
static_resources:
  listeners:
  - name: main
    address: {socket_address: {address: %s, port_value: %s}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config: {virtual_hosts: [{name: all, domains: ["*"], routes: [{match: {prefix: "/"}, route: {cluster: up}}]}]}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: up
    load_assignment: {cluster_name: up, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}}]}]}
`, host, port, upHost, upPort)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	os.WriteFile(path, []byte(cfg), 0o644)
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"-c", path, "--concurrency", "1", "--log-level", "error", "--drain-time-s", "1"})
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + lis + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "upstream" || resp.Header.Get("server") != "envoy" {
				t.Fatalf("got %q %v", b, resp.Header)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyemu never served: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("envoyemu did not stop on SIGTERM")
	}
}

func TestRunRejects(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("static_resources: {clusters: [{name: x, foo: 1}]}"), 0o644)
	for _, tt := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"-c", bad, "--envoy-version", "1.20"}, 2},
		{[]string{"-c", bad, "--log-level", "loud"}, 2},
		{[]string{"-c", bad}, 1},
		{[]string{"-c", filepath.Join(t.TempDir(), "missing.yaml")}, 1},
	} {
		if code := run(tt.args); code != tt.code {
			t.Errorf("run(%q) = %d, want %d", tt.args, code, tt.code)
		}
	}
}
