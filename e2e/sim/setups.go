package sim

import (
	"encoding/json"
	"fmt"

	"github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/filter/config"
)

// Never is the threshold that never disaggregates (the largest the
// configuration accepts).
const Never = 100_000_000

// Shape is a fleet: P prefill engines and D decode engines (P = 0: an
// aggregated fleet, which never disaggregates).
type Shape struct{ P, D int }

func (s Shape) String() string { return fmt.Sprintf("%dP%dD", s.P, s.D) }

// Variant is one configuration of the shipped comparison. Adding a strategy
// (say a cache-aware one) to the comparison is adding its name to
// Strategies: the rest follows from the plugin configuration.
type Variant struct {
	Shape     Shape
	Threshold int
	// Strategy of both pools (config.Strategy names).
	Strategy config.Strategy
	// ThresholdOn is the plugin's threshold_on ("" = the default, prompt).
	ThresholdOn config.ThresholdOn
	// DecodeBeforeBody chooses the decoder from the headers alone (the
	// flag-free request path; see Setup.DecodeBeforeBody).
	DecodeBeforeBody bool
}

// Name is the variant's label in tables and plots.
func (v Variant) Name() string {
	t := fmt.Sprintf("t=%d", v.Threshold)
	switch {
	case v.Shape.P == 0 || v.Threshold >= Never:
		t = "never"
	case v.Threshold == 0:
		t = "always"
	}
	name := fmt.Sprintf("%s %s %s", t, v.Shape, v.Strategy)
	if v.ThresholdOn == config.ThresholdOnUncached && t != "never" && t != "always" {
		name = "uncached " + name
	}
	if v.DecodeBeforeBody {
		name += " headers"
	}
	return name
}

// Strategies are the balancing strategies compared.
var Strategies = []config.Strategy{
	config.RoundRobin, config.Random, config.LeastLoaded, config.QPS, config.PowerOfTwo, config.PrefixAffinity,
	config.CacheAware,
}

// Matrix is the shipped comparison on gpus engines:
//   - thresholds: never (all engines aggregated), always, and several
//     thresholds on a 1:3 prefill:decode split, round robin;
//   - every strategy, aggregated and at the middle threshold;
//   - xPyD shapes at equal engine count at the middle threshold.
func Matrix(gpus int) []Variant {
	pd := Shape{max(gpus/4, 1), gpus - max(gpus/4, 1)}
	agg := Shape{0, gpus}
	const mid = 2048
	var out []Variant
	add := func(v Variant) {
		for _, w := range out {
			if w == v {
				return
			}
		}
		out = append(out, v)
	}
	add(Variant{Shape: agg, Threshold: Never, Strategy: config.RoundRobin})
	add(Variant{Shape: pd, Threshold: 0, Strategy: config.RoundRobin})
	for _, t := range []int{512, 1024, mid, 4096, 8192} {
		add(Variant{Shape: pd, Threshold: t, Strategy: config.RoundRobin})
	}
	for _, s := range Strategies {
		add(Variant{Shape: agg, Threshold: Never, Strategy: s})
		add(Variant{Shape: pd, Threshold: mid, Strategy: s})
	}
	for p := 1; p <= gpus/2; p++ {
		add(Variant{Shape: Shape{p, gpus - p}, Threshold: mid, Strategy: config.RoundRobin})
	}
	return out
}

// PluginJSON is the variant's plugin configuration: nixl mode, endpoints by
// address, every other field at its default.
func (v Variant) PluginJSON() []byte {
	pool := func(prefix string, n int) map[string]any {
		eps := make([]map[string]any, n)
		for i := range eps {
			eps[i] = map[string]any{"name": fmt.Sprintf("%s-%d", prefix, i), "address": fmt.Sprintf("10.0.%d.%d:8000", len(prefix), i+1)}
		}
		return map[string]any{"strategy": string(v.Strategy), "endpoints": eps}
	}
	threshold := v.Threshold
	p := v.Shape.P
	if p == 0 {
		threshold, p = Never, 1 // a placeholder prefill endpoint
	}
	cfg := map[string]any{
		"mode":             "nixl",
		"threshold_tokens": threshold,
		"prefill":          pool("prefill", p),
		"decode":           pool("decode", v.Shape.D),
	}
	if v.ThresholdOn != "" {
		cfg["threshold_on"] = string(v.ThresholdOn)
	}
	b, _ := json.Marshal(cfg)
	return b
}

// Setup builds the variant's setup on profile.
func (v Variant) Setup(profile engine.Params) (Setup, error) {
	raw := v.PluginJSON()
	cfg, err := config.Parse(raw)
	if err != nil {
		return Setup{}, fmt.Errorf("sim: %s: %v", v.Name(), err)
	}
	return Setup{Name: v.Name(), Config: cfg, Raw: raw, Profile: profile, NoPrefillEngines: v.Shape.P == 0,
		DecodeBeforeBody: v.DecodeBeforeBody}, nil
}

// UserSetup is a user's plugin configuration: every endpoint of both pools
// is an engine of profile.
func UserSetup(name string, raw []byte, profile engine.Params) (Setup, error) {
	cfg, err := config.Parse(raw)
	if err != nil {
		return Setup{}, fmt.Errorf("sim: %s: %v", name, err)
	}
	return Setup{Name: name, Config: cfg, Raw: raw, Profile: profile}, nil
}

// CacheMatrix is the cache-aware routing study (docs/ROUTING.md, "Cache-aware
// routing") on gpus aggregated engines: round robin, the load-only
// strategies, prefix_affinity and cache_aware, and cache_aware with the
// decoder chosen from the headers alone (which leaves it load-only).
func CacheMatrix(gpus int) []Variant {
	agg := Shape{0, gpus}
	var out []Variant
	for _, s := range []config.Strategy{config.RoundRobin, config.LeastLoaded, config.PowerOfTwo, config.PrefixAffinity, config.CacheAware} {
		out = append(out, Variant{Shape: agg, Threshold: Never, Strategy: s})
	}
	return append(out, Variant{Shape: agg, Threshold: Never, Strategy: config.CacheAware, DecodeBeforeBody: true})
}

// UncachedMatrix is the effective-length study on a P/D split of gpus
// engines: thresholds on the whole prompt against thresholds on the tokens
// the chosen decoder does not hold, all balanced by cache_aware, and the
// same with the decoder chosen from the headers alone.
func UncachedMatrix(gpus int) []Variant {
	var out []Variant
	for _, p := range []int{max(gpus/4, 1), gpus / 2} {
		pd := Shape{p, gpus - p}
		for _, t := range []int{2048, 4096} {
			out = append(out,
				Variant{Shape: pd, Threshold: t, Strategy: config.CacheAware},
				Variant{Shape: pd, Threshold: t, Strategy: config.CacheAware, ThresholdOn: config.ThresholdOnUncached},
				Variant{Shape: pd, Threshold: t, Strategy: config.CacheAware, ThresholdOn: config.ThresholdOnUncached, DecodeBeforeBody: true},
			)
		}
	}
	return out
}
