package envoyemu

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRequestTimeoutHeldByFilter: request_timeout runs while a filter holds
// the request, even one whose client sent everything (a GET), and is
// disarmed once the request reaches the router, so it never cuts a slow
// response.
func TestRequestTimeoutHeldByFilter(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "slept")
	}))
	defer up.Close()
	h := startHost(t, hostConfig{plugin: "kitchen", reqTimeout: "0.2s", idleTimeout: "0s", routeCluster: "up",
		clusters: []cluster{{name: "up", endpoints: []string{strings.TrimPrefix(up.URL, "http://")}}}}, Options{Concurrency: 1})
	start := time.Now()
	r := do(t, h, "GET", "/headers-stop", nil)
	if r.status != 408 || r.body != "request timeout" {
		t.Errorf("held request: %d %q", r.status, r.body)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("held request answered after %v", d)
	}
	if r := do(t, h, "GET", "/slow-answer", nil); r.status != 200 || r.body != "slept" {
		t.Errorf("slow response: %d %q", r.status, r.body)
	}
}

// TestTrapWithPausedRequest: a VM traps while a request is paused on its
// http call. Envoy never calls the dead VM again (the call's answer is
// dropped), so only request_timeout ends the paused request; its 408 then
// meets the failed filter, which answers 503 unless the policy is FAIL_OPEN.
// New requests follow the policy: 503, pass-through, or a fresh VM.
func TestTrapWithPausedRequest(t *testing.T) {
	arrived := make(chan struct{}, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			arrived <- struct{}{}
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "http://")
	for _, tt := range []struct {
		policy      string
		trapStatus  int // the request whose callback trapped
		pausedCode  int // the request paused on its http call
		nextStatus  int
		nextFilter  bool
		wantReloads int64
	}{
		{"FAIL_CLOSED", 503, 503, 503, false, 0},
		{"FAIL_OPEN", 200, 408, 200, false, 0},
		{"FAIL_RELOAD", 503, 503, 200, true, 1},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			c := hostConfig{plugin: "kitchen", failure: tt.policy, reqTimeout: "0.3s", idleTimeout: "0s",
				routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{upAddr}}}}
			if tt.policy == "FAIL_RELOAD" {
				c.pluginExtra = "                reload_config: {backoff: {base_interval: 0.001s}}\n"
			}
			h := startHost(t, c, Options{Concurrency: 1})
			paused := make(chan response, 1)
			start := time.Now()
			go func() { paused <- do(t, h, "GET", "/call?cluster=up&path=/hang", nil) }()
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the http call never reached the upstream")
			}
			if n := h.InjectTrap("kitchen_plugin", -1); n != 1 {
				t.Fatalf("armed %d VMs", n)
			}
			if r := do(t, h, "GET", "/pass", nil); r.status != tt.trapStatus {
				t.Errorf("trapping request: %d %q", r.status, r.body)
			}
			r := <-paused
			if r.status != tt.pausedCode {
				t.Errorf("paused request: %d %q, want %d", r.status, r.body, tt.pausedCode)
			}
			if d := time.Since(start); d > 1500*time.Millisecond {
				t.Errorf("paused request answered after %v, want about request_timeout", d)
			}
			time.Sleep(5 * time.Millisecond)
			next := do(t, h, "GET", "/pass", nil)
			if next.status != tt.nextStatus || (next.header.Get("x-seen-status") != "") != tt.nextFilter {
				t.Errorf("next request: %d filter=%t, want %d filter=%t", next.status,
					next.header.Get("x-seen-status") != "", tt.nextStatus, tt.nextFilter)
			}
			ps := h.Plugins()[0]
			if ps.Traps() != 1 || ps.Reloads != tt.wantReloads {
				t.Errorf("traps %d reloads %d", ps.Traps(), ps.Reloads)
			}
		})
	}
}

// TestReloadBackoff: FAIL_RELOAD creates the new VM lazily, for the first new
// stream once base_interval (jittered up to 1.5×) has passed since the last
// load; streams before that fail closed and count as vm_reload_backoff.
func TestReloadBackoff(t *testing.T) {
	up := newUpstream(t, "up")
	h := startHost(t, hostConfig{plugin: "kitchen", failure: "FAIL_RELOAD", routeCluster: "up",
		pluginExtra: "                reload_config: {backoff: {base_interval: 2s}}\n",
		clusters:    []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{Concurrency: 1})
	loaded := time.Now() // a little after the worker's VM was loaded
	if r := do(t, h, "GET", "/trap", nil); r.status != 503 {
		t.Fatalf("trap: %d", r.status)
	}
	if r := do(t, h, "GET", "/pass", nil); time.Since(loaded) < 2*time.Second && r.status != 503 {
		t.Errorf("within the backoff: %d, want 503", r.status)
	}
	if ps := h.Plugins()[0]; ps.Reloads != 0 || ps.ReloadBackoffs < 1 {
		t.Errorf("within the backoff: reloads %d backoffs %d", ps.Reloads, ps.ReloadBackoffs)
	}
	time.Sleep(time.Until(loaded.Add(3*time.Second + 50*time.Millisecond)))
	if r := do(t, h, "GET", "/pass", nil); r.status != 200 || r.header.Get("x-seen-status") == "" {
		t.Errorf("after the backoff: %d, filter ran %t", r.status, r.header.Get("x-seen-status") != "")
	}
	if ps := h.Plugins()[0]; ps.Reloads != 1 || len(ps.Retired) != 1 || ps.Retired[0].Traps != 1 {
		t.Errorf("after the backoff: reloads %d retired %+v", ps.Reloads, ps.Retired)
	}
}
