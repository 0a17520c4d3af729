package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
)

// perfEnv makes the mock engines behave like a small GPU fleet: the engine
// performance model of the routing simulator (e2e/engine) times their
// answers. Its value is a profile, optionally with a time scale:
// "llama-3.1-8b-h100" or "llama-3.1-8b-h100@0.5" (twice as fast).
const perfEnv = "PDROUTE_DEV_PERF"

// applyPerf sets every engine of topo on the performance model named by
// PDROUTE_DEV_PERF; unset leaves the mocks' fixed latencies.
func applyPerf(topo *stack.Topology, getenv func(string) string) error {
	v := getenv(perfEnv)
	if v == "" {
		return nil
	}
	name, scaleText, _ := strings.Cut(v, "@")
	prof, err := engine.Profile(name)
	if err != nil {
		return fmt.Errorf("%s: %w", perfEnv, err)
	}
	scale := 1.0
	if scaleText != "" {
		if scale, err = strconv.ParseFloat(scaleText, 64); err != nil || !(scale > 0) {
			return fmt.Errorf("%s=%q: the scale after @ must be a positive number", perfEnv, v)
		}
	}
	set := func(specs []stack.EngineSpec) []stack.EngineSpec {
		if specs == nil {
			specs = make([]stack.EngineSpec, 2) // the topology's default pool
		}
		for i := range specs {
			prev := specs[i].Mock
			specs[i].Mock = func(c *mocks.Config) {
				if prev != nil {
					prev(c)
				}
				p := prof
				c.Perf, c.PerfScale = &p, scale
				c.MaxModelLen = max(c.MaxModelLen, 1<<16)
			}
		}
		return specs
	}
	topo.Prefill, topo.Decode = set(topo.Prefill), set(topo.Decode)
	return nil
}
