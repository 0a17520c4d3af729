package sim

import (
	"testing"

	"github.com/pdroute/pdroute/filter/config"
)

// The miss breakdown accounts for every prompt token its run's engines
// missed, once; on tenants every context's first request is a first visit,
// and round robin's repeat visits that miss are "elsewhere" (it has no index).
func TestMissBreakdownAddsUp(t *testing.T) {
	p := prepared(t, "tenants", 300, 16)
	contexts := map[uint64]bool{}
	for i := range p.Reqs {
		k, _ := contextKey(&p.Reqs[i])
		contexts[k] = true
	}
	got := map[config.Strategy]*Misses{}
	MissReport = func(setup, _ string, _ float64, m *Misses) {
		c := *m
		for _, s := range []config.Strategy{config.RoundRobin, config.CacheAware} {
			if setup == (Variant{Shape: Shape{0, 8}, Threshold: Never, Strategy: s}).Name() {
				got[s] = &c
			}
		}
	}
	defer func() { MissReport = nil }()
	for _, s := range []config.Strategy{config.RoundRobin, config.CacheAware} {
		st := setup(t, Variant{Shape: Shape{0, 8}, Threshold: Never, Strategy: s})
		r, err := Run(&st, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		m := got[s]
		if m == nil {
			t.Fatalf("%s: no breakdown reported", s)
		}
		var missed int64
		var n int
		for _, c := range missOrder {
			missed += m.Tokens[c]
			n += m.Requests[c]
		}
		if missed != m.Prompt-m.Cached || n != r.Completed {
			t.Errorf("%s: causes sum to %d tokens of %d missed, %d requests of %d", s, missed, m.Prompt-m.Cached, n, r.Completed)
		}
		if hit := float64(m.Cached) / float64(m.Prompt); hit != r.PrefixHitRate {
			t.Errorf("%s: breakdown's hit rate %.3f, run's %.3f", s, hit, r.PrefixHitRate)
		}
		if m.Requests[MissFirst] != len(contexts) {
			t.Errorf("%s: %d first visits, want %d (distinct contexts)", s, m.Requests[MissFirst], len(contexts))
		}
		t.Logf("%s: %s", s, m)
	}
	if got[config.RoundRobin].Requests[MissElsewhere] == 0 || got[config.RoundRobin].Requests[MissGiveWay] != 0 {
		t.Errorf("round robin: %s; want misses elsewhere and no give-way (no index)", got[config.RoundRobin])
	}
	if got[config.CacheAware].Tokens[MissElsewhere] >= got[config.RoundRobin].Tokens[MissElsewhere]/4 {
		t.Errorf("cache_aware misses elsewhere %d tokens, round robin %d", got[config.CacheAware].Tokens[MissElsewhere], got[config.RoundRobin].Tokens[MissElsewhere])
	}
}
