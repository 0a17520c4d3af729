package sim

import (
	"testing"

	"github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/e2e/sim/trace"
	"github.com/pdroute/pdroute/filter/config"
)

func prepared(t *testing.T, workload string, n int, rate float64) *Prepared {
	t.Helper()
	w, err := trace.Lookup(workload)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := w.Generate(trace.Load{Rate: rate, Requests: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return Prepare(workload, reqs, engine.Profiles[engine.DefaultProfile].BlockSize)
}

func setup(t *testing.T, v Variant) Setup {
	t.Helper()
	s, err := v.Setup(engine.Profiles[engine.DefaultProfile])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDeterministicForASeed(t *testing.T) {
	p := prepared(t, "mix", 150, 8)
	for _, v := range []Variant{{Shape: Shape{2, 6}, Threshold: 2048, Strategy: config.PowerOfTwo}, {Shape: Shape{0, 8}, Threshold: Never, Strategy: config.Random}} {
		s := setup(t, v)
		a, err := Run(&s, p, 7)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Run(&s, p, 7)
		if a != b {
			t.Errorf("%s: two runs differ:\n%+v\n%+v", s.Name, a, b)
		}
		if a.Completed != len(p.Reqs) {
			t.Errorf("%s: %d of %d completed", s.Name, a.Completed, len(p.Reqs))
		}
	}
}

// The route is the filter's decision on the rendered body: a threshold
// between the workload's short and long prompts splits them.
func TestThresholdDecides(t *testing.T) {
	p := prepared(t, "mix", 200, 4)
	frac := func(threshold int) float64 {
		s := setup(t, Variant{Shape: Shape{2, 6}, Threshold: threshold, Strategy: config.RoundRobin})
		r, err := Run(&s, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r.DisaggregatedFraction
	}
	// mix: 45% short (< 500 tokens), the rest 3.5k to 12k tokens.
	if a, mid, n := frac(0), frac(2048), frac(Never); a != 1 || mid < 0.4 || mid > 0.7 || n != 0 {
		t.Errorf("disaggregated: always %.2f, threshold 2048 %.2f, never %.2f", a, mid, n)
	}
}

// prefix_affinity keeps a tenant's context on one engine, so it hits the
// prefix cache more than round robin does.
func TestPrefixAffinityHitsTheCache(t *testing.T) {
	p := prepared(t, "tenants", 600, 8)
	hit := func(s config.Strategy) float64 {
		st := setup(t, Variant{Shape: Shape{0, 8}, Threshold: Never, Strategy: s})
		r, err := Run(&st, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r.PrefixHitRate
	}
	if rr, pa := hit(config.RoundRobin), hit(config.PrefixAffinity); pa < 2*rr {
		t.Errorf("prefix hit rate: round_robin %.2f, prefix_affinity %.2f", rr, pa)
	}
}

func TestMatrixParsesAndIsUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range Matrix(8) {
		s := setup(t, v)
		if seen[s.Name] {
			t.Errorf("duplicate %s", s.Name)
		}
		seen[s.Name] = true
		if s.GPUs() != 8 {
			t.Errorf("%s: %d GPUs", s.Name, s.GPUs())
		}
	}
}
