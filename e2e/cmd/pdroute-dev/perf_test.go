package main

import (
	"testing"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

func TestApplyPerf(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == perfEnv {
				return v
			}
			return ""
		}
	}
	topo := stack.DevTopology(config.ModeNIXL)
	if err := applyPerf(&topo, env("")); err != nil || topo.Prefill != nil {
		t.Fatalf("unset: %v %+v", err, topo.Prefill)
	}
	if err := applyPerf(&topo, env("llama-3.1-8b-h100@0.5")); err != nil {
		t.Fatal(err)
	}
	if len(topo.Prefill) != 2 || len(topo.Decode) != 2 {
		t.Fatalf("pools %d/%d, want the default 2/2", len(topo.Prefill), len(topo.Decode))
	}
	var c mocks.Config
	topo.Decode[1].Mock(&c)
	if c.Perf == nil || c.Perf.Name != "llama-3.1-8b-h100" || c.PerfScale != 0.5 {
		t.Errorf("mock config %+v", c)
	}
	for _, bad := range []string{"gpt-9", "llama-3.1-8b-h100@0", "llama-3.1-8b-h100@x"} {
		topo := stack.DevTopology(config.ModeNIXL)
		if err := applyPerf(&topo, env(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
