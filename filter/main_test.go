package main

import (
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/filtertest"
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
