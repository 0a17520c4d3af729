package scenarios

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// TestDevStackKeepsASharedPrefixOnOnePrefiller runs the dev stack's
// configuration (stack.DevTopology, nixl: cache_aware pools, threshold_on
// uncached) on free ports: two long requests sharing a 3 000-token prefix
// and differing after it go to the same prefill endpoint (x-pdroute-prefill)
// while it is under its load bound, and the second finds the prefix on its
// decoder (x-pdroute-cached); several VMs (workers) share the index.
func TestDevStackKeepsASharedPrefixOnOnePrefiller(t *testing.T) {
	topo := stack.DevTopology(config.ModeNIXL)
	topo.Ports = stack.Ports{}
	topo.Workers = 2
	topo.Prefill = engines(3, stack.EngineSpec{Latency: fast})
	topo.Decode = engines(3, stack.EngineSpec{Latency: fast})
	s := start(t, topo)
	perToken := float64(estimate(t, chat(text(40_000), nil), "/v1/chat/completions")) / 40_000
	prompt := func(head string, tokens int) string {
		return head + " " + text(int(float64(tokens)/perToken))
	}
	for k := range 3 {
		shared := prompt(fmt.Sprintf("context %d:", k), 3000)
		var prefill, decode []string
		for q := range 2 {
			body := chat(shared+" "+prompt(fmt.Sprintf("question %d-%d:", k, q), 1500), nil)
			r := post(t, s, "/v1/chat/completions", body, nil)
			r.expect(t, 200, "disagg")
			prefill = append(prefill, r.Header.Get("x-pdroute-prefill"))
			decode = append(decode, r.Header.Get("x-pdroute-decode"))
			cached := r.Header.Get("x-pdroute-cached")
			if (q == 0) != strings.HasPrefix(cached, "0%") {
				t.Errorf("context %d request %d: x-pdroute-cached %q", k, q, cached)
			}
		}
		if prefill[0] == "" || prefill[0] != prefill[1] || decode[0] != decode[1] {
			t.Errorf("context %d: prefill %v, decode %v: the shared prefix was split", k, prefill, decode)
		}
	}
}
