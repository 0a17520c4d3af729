package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/filtertest"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
	"github.com/pdroute/pdroute/filter/plugin"
)

// TestModuleStarts runs the shipped module — natively and as the wasm that
// make build produces — with a valid and an invalid configuration. The
// plugin's behaviour is tested in filter/plugin and e2e/scenarios.
func TestModuleStarts(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		ok           bool
	}{
		{"valid", `{"mode":"nixl","prefill":{"endpoints":[{"name":"p1","cluster":"p1"}]},"decode":{"endpoints":[{"name":"d1","cluster":"d1"}]}}`, true},
		{"invalid", `{"mode":"nixl"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			filtertest.Run(t, filtertest.Spec{VMContext: plugin.NewVMContext, Package: "./filter", PluginConfig: []byte(tc.config)},
				func(t *testing.T, h filtertest.Harness) {
					if !h.StartVM() {
						t.Fatal("VM did not start")
					}
					if got := h.StartPlugin(); got != tc.ok {
						t.Fatalf("plugin start = %v, want %v; critical logs %v", got, tc.ok, h.GetLogs(5))
					}
					if !tc.ok && !strings.Contains(strings.Join(h.GetLogs(5), "\n"), "decode") {
						t.Errorf("the rejection does not name the missing field: %v", h.GetLogs(5))
					}
				})
		})
	}
}

// TestNoTimerPackages keeps packages that arm runtime timers out of the
// module. A timer makes every later GC poll WASI poll_oneoff, which Envoy
// 1.33–1.38 answer with ENOSYS: the VM dies at its next collection.
// crypto/rand (through crypto/internal/sysrand) arms one on first use; the
// module takes randomness from abi.RandomBytes instead.
func TestNoTimerPackages(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command(goCmd, "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "crypto/internal/sysrand" || pkg == "crypto/rand" {
			t.Errorf("the module imports %s, which arms a timer inside the VM", pkg)
		}
	}
}

// TestStrictWASISoak runs thousands of requests through one VM of the
// shipped module under Envoy 1.35's strict WASI (poll_oneoff ENOSYS), enough
// for many garbage collections: the VM must never trap.
func TestStrictWASISoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test")
	}
	code, err := os.ReadFile(wasmbuild.ForTest(t, "./filter"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{
		PluginConfig: []byte(`{"mode":"nixl","threshold_tokens":100000,"prefill":{"endpoints":[{"name":"p1","cluster":"p1"}]},"decode":{"endpoints":[{"name":"d1","cluster":"d1"}]}}`),
		EnvoyVersion: envoyemu.EnvoyVersion{Minor: 35},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !d.StartVM() || !d.StartPlugin() {
		t.Fatalf("start failed: %s", d.Failed())
	}
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("a long prompt ", 200) + `"}`)
	for i := range 3000 {
		id := d.InitializeHttpContext()
		d.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "x"},
			{"content-type", "application/json"}}, false)
		d.CallOnRequestBody(id, body, true)
		d.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		d.CallOnResponseBody(id, []byte(`{"choices":[]}`), true)
		d.CompleteHttpContext(id)
		if f := d.Failed(); f != "" {
			t.Fatalf("the VM failed at request %d: %s", i, f)
		}
	}
}
