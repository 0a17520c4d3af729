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

// BenchmarkRun is the simulator's own speed: one configuration on the mixed
// workload (600 requests at 12 req/s, 2P6D, threshold 2048, power of two).
func BenchmarkRun(b *testing.B) {
	w, _ := trace.Lookup("mix")
	reqs, _ := w.Generate(trace.Load{Rate: 12, Requests: 600, Seed: 1})
	p := Prepare("mix", reqs, engine.Profiles[engine.DefaultProfile].BlockSize)
	s, err := Variant{Shape: Shape{2, 6}, Threshold: 2048, Strategy: config.PowerOfTwo}.Setup(engine.Profiles[engine.DefaultProfile])
	if err != nil {
		b.Fatal(err)
	}
	p.Warm([]Setup{s})
	b.ResetTimer()
	for range b.N {
		if _, err := Run(&s, p, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Reqs)*b.N)/b.Elapsed().Seconds(), "requests/s")
}

// Compare's figures do not depend on how many runs go in parallel.
func TestCompareIndependentOfWorkers(t *testing.T) {
	p := prepared(t, "mix", 120, 4)
	var setups []Setup
	for _, v := range Matrix(4)[:6] {
		setups = append(setups, setup(t, v))
	}
	wl := []Workload{{Trace: p, Rates: []float64{4, 8}}}
	a, err := Compare(wl, setups, 3, Bounds{TTFTP90Ms: 1000, ITLP99Ms: 50}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Compare(wl, setups, 3, Bounds{TTFTP90Ms: 1000, ITLP99Ms: 50}, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Results {
		if a.Results[i] != b.Results[i] {
			t.Fatalf("run %d differs:\n%+v\n%+v", i, a.Results[i], b.Results[i])
		}
	}
	if len(a.Results) != 12 || a.Results[0].Rate != 4 || a.Results[11].Rate != 8 {
		t.Errorf("results %d, rates %v…%v", len(a.Results), a.Results[0].Rate, a.Results[11].Rate)
	}
}

// cache_aware follows the prompt, not its first kilobyte: on agentic, where
// every prompt starts with the same system prompt, it hits the cache more
// than prefix_affinity; and with the decoder chosen from the headers alone
// it is back to load-only balancing.
func TestCacheAwareHitsTheCache(t *testing.T) {
	p := prepared(t, "agentic", 400, 8)
	hit := func(v Variant) float64 {
		st := setup(t, v)
		r, err := Run(&st, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r.PrefixHitRate
	}
	agg := Shape{0, 8}
	pa := hit(Variant{Shape: agg, Threshold: Never, Strategy: config.PrefixAffinity})
	ca := hit(Variant{Shape: agg, Threshold: Never, Strategy: config.CacheAware})
	blind := hit(Variant{Shape: agg, Threshold: Never, Strategy: config.CacheAware, DecodeBeforeBody: true})
	rr := hit(Variant{Shape: agg, Threshold: Never, Strategy: config.RoundRobin})
	t.Logf("hits: ca %.2f pa %.2f blind %.2f rr %.2f", ca, pa, blind, rr)
	if ca < pa+0.1 || blind > rr+0.05 {
		t.Errorf("prefix hit rate: cache_aware %.2f, prefix_affinity %.2f, cache_aware from headers %.2f, round_robin %.2f", ca, pa, blind, rr)
	}
}

// threshold_on "uncached" serves prompts whose prefix the decoder holds
// without a prefill: fewer requests are disaggregated than with the same
// threshold on the whole prompt.
func TestUncachedThresholdDisaggregatesLess(t *testing.T) {
	p := prepared(t, "tenants", 300, 4)
	frac := func(on config.ThresholdOn) float64 {
		s := setup(t, Variant{Shape: Shape{4, 4}, Threshold: 4096, Strategy: config.CacheAware, ThresholdOn: on})
		r, err := Run(&s, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r.DisaggregatedFraction
	}
	// tenants: every prompt is 7.2k tokens, 6k of them a context seen before.
	whole, uncached := frac(config.ThresholdOnPrompt), frac(config.ThresholdOnUncached)
	t.Logf("disaggregated: whole %.2f uncached %.2f", whole, uncached)
	if whole != 1 || uncached > 0.8 {
		t.Errorf("disaggregated: whole prompt %.2f, uncached %.2f", whole, uncached)
	}
}

func TestStudiesParse(t *testing.T) {
	for _, v := range append(CacheMatrix(8), UncachedMatrix(8)...) {
		if s := setup(t, v); s.GPUs() != 8 {
			t.Errorf("%s: %d GPUs", s.Name, s.GPUs())
		}
	}
}
