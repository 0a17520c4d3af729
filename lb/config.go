package lb

import (
	"fmt"
	"math"
	"time"
)

// Strategy names how a pool chooses an endpoint. The zero value is RoundRobin.
type Strategy uint8

// The strategies; their JSON names are given by [Strategy.String].
const (
	// RoundRobin rotates over the usable endpoints with one counter shared by all
	// VMs, so the distribution is exactly even however many workers pick.
	RoundRobin Strategy = iota
	// Random picks a usable endpoint uniformly; it touches no shared state.
	Random
	// LeastLoaded picks the lowest running_weight×running + waiting_weight×waiting +
	// inflight_weight×in-flight, and rotates like RoundRobin while any usable
	// endpoint lacks fresh engine stats.
	LeastLoaded
	// QPS picks the endpoint with the fewest requests started in the last
	// qps_window.
	QPS
	// PowerOfTwo draws two distinct usable endpoints at random and takes the less
	// loaded one (same load as LeastLoaded; engine stats count only when both are
	// fresh).
	PowerOfTwo
	// PrefixAffinity sends equal prompt prefixes to the same endpoint (rendezvous
	// hashing of the prefix key) unless that endpoint is above affinity_load_factor
	// × the mean in-flight, in which case the key's next choice takes it.
	PrefixAffinity
	// CacheAware sends a request to the usable endpoint holding the longest
	// cached prefix of its prompt (from the shared prefix index, lb/prefix)
	// among those whose in-flight count is under cache_load_factor × the mean
	// + cache_load_slack; when every holder is past that, to the least
	// loaded (in flight, plus the uncached prompt this VM recently sent it);
	// with nothing worth keeping cached, in turns as round robin. See
	// [Balancer.PickCached].
	CacheAware
)

var strategyNames = [...]string{
	RoundRobin:     "round_robin",
	Random:         "random",
	LeastLoaded:    "least_loaded",
	QPS:            "qps",
	PowerOfTwo:     "power_of_two",
	PrefixAffinity: "prefix_affinity",
	CacheAware:     "cache_aware",
}

// String returns the strategy's configuration name, e.g. "least_loaded".
func (s Strategy) String() string {
	if int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("strategy(%d)", uint8(s))
}

// ParseStrategy returns the strategy with configuration name name.
func ParseStrategy(name string) (Strategy, error) {
	for s, n := range strategyNames {
		if n == name {
			return Strategy(s), nil
		}
	}
	return 0, fmt.Errorf("unknown strategy %q", name)
}

// countsInflight reports whether the strategy reads pdroute's in-flight counts, and
// so whether picks and releases must maintain them.
func (s Strategy) countsInflight() bool {
	return s == LeastLoaded || s == PowerOfTwo || s == PrefixAffinity || s == CacheAware
}

// MaxEndpoints is the largest pool accepted: the size the shared values and the
// per-pick cost were designed and benchmarked for (a 512-endpoint in-flight value is
// 2 KiB, the qps window about 12 KiB).
const MaxEndpoints = 512

// PoolConfig is one pool ("prefill" or "decode") of the plugin configuration; it
// mirrors the JSON pool object of docs/CONTRACTS.md, with durations as
// time.Duration. Start from [DefaultPoolConfig]: zero weights and durations are
// meaningful values, not "unset".
type PoolConfig struct {
	// Strategy (JSON "strategy"). Default CacheAware: in the simulator it is
	// better than or equal to RoundRobin on every shipped workload
	// (docs/ROUTING.md), and with nothing worth keeping cached it takes round
	// robin's turns. (The filter keeps RoundRobin for an sglang decode pool,
	// whose engines keep no prefix cache: filter/config.)
	Strategy Strategy

	// RunningWeight, WaitingWeight and InflightWeight (JSON "running_weight",
	// "waiting_weight", "inflight_weight") weigh the engine's running and waiting
	// requests and pdroute's own in-flight count in the load of LeastLoaded and
	// PowerOfTwo. Default 1 each: a queued request costs about as much as a running
	// one, and in-flight corrects stats that are up to a scrape interval old.
	RunningWeight  float64
	WaitingWeight  float64
	InflightWeight float64

	// StatsMaxAge (JSON "stats_max_age_ms"): engine stats observed longer ago than
	// this are stale. Default 15s: three missed scrapes at the 5 s default interval.
	StatsMaxAge time.Duration

	// QPSWindow (JSON "qps_window_ms"): the sliding window of QPS, kept as 10
	// buckets of QPSWindow/10. Default 10s; at least 1s.
	QPSWindow time.Duration

	// AffinityPrefixBytes (JSON "affinity_prefix_bytes"): how much leading prompt
	// text the caller hashes into the prefix key (computed by tokenest; lb does not
	// read it). Default 1024.
	AffinityPrefixBytes int

	// AffinityLoadFactor (JSON "affinity_load_factor"): under PrefixAffinity no
	// endpoint takes a request that would put it above factor × the mean in-flight
	// (consistent hashing with bounded loads). Default 1.25, the value the
	// bounded-loads paper recommends; at least 1.
	AffinityLoadFactor float64

	// CacheLoadFactor and CacheLoadSlack (JSON "cache_load_factor",
	// "cache_load_slack"): under CacheAware an endpoint is under its load bound
	// while its in-flight count + 1 ≤ factor × mean + slack (mean over the
	// usable endpoints, counting this request). Defaults 1.5 and 4, chosen
	// with the simulator (docs/ROUTING.md): the slack keeps a prefix where it
	// is cached while the pool is lightly loaded, since a continuous-batching
	// engine serves a few extra requests almost for free, and the factor
	// gives way before one endpoint takes a queue the others do not have.
	// The slack is also how far above the mean in-flight an endpoint must
	// already be for a prompt nobody holds to skip its turn (cacheaware.go).
	CacheLoadFactor float64
	CacheLoadSlack  float64
	// CacheMinGain (JSON "cache_min_gain"): under CacheAware, endpoints whose
	// cached prefixes differ by less than this share of the prompt are
	// equal, and load decides between them. Default 0.1: a shared system
	// prompt of 2 % of a long unique document must not pull every request
	// to the endpoint that served it first.
	CacheMinGain float64

	// FailureThreshold (JSON "failure_threshold"): consecutive failures that put an
	// endpoint in cool-down. Default 3: one failure can be a client-caused reset.
	// 0 disables passive health (no health reads or writes at all).
	FailureThreshold int

	// Cooldown (JSON "cooldown_ms"): how long a failed endpoint is skipped before one
	// half-open probe request. Default 10s.
	Cooldown time.Duration

	// Endpoints (JSON "endpoints"), 1 to MaxEndpoints, with unique non-empty names.
	// The order is part of the pool's identity (see [New]).
	Endpoints []Endpoint
}

// Endpoint is one entry of a pool's "endpoints" as lb sees it: a name, used
// for hashing and for the pool's key fingerprint. How an endpoint is reached
// (cluster, address, per-mode fields) is the filter's business
// (filter/config.Endpoint); index i here is endpoint i there.
type Endpoint struct {
	// Name (JSON "name") identifies the endpoint in keys, hashing and metrics.
	Name string
}

// DefaultPoolConfig returns a pool with every default of docs/CONTRACTS.md and no
// endpoints.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{
		Strategy:            CacheAware,
		RunningWeight:       1,
		WaitingWeight:       1,
		InflightWeight:      1,
		StatsMaxAge:         15 * time.Second,
		QPSWindow:           10 * time.Second,
		AffinityPrefixBytes: 1024,
		AffinityLoadFactor:  1.25,
		CacheLoadFactor:     1.5,
		CacheLoadSlack:      4,
		CacheMinGain:        0.1,
		FailureThreshold:    3,
		Cooldown:            10 * time.Second,
	}
}

// FieldError is a configuration error; Field is the JSON path inside the pool
// (e.g. "endpoints[2].name"), so the config parser can prefix the pool's own path.
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "field: message".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Validate checks what lb relies on and returns a *FieldError for the first problem.
func (c *PoolConfig) Validate() error {
	if err := c.validateSettings(); err != nil {
		return err
	}
	if len(c.Endpoints) == 0 || len(c.Endpoints) > MaxEndpoints {
		return &FieldError{"endpoints", fmt.Sprintf("need 1 to %d endpoints, have %d", MaxEndpoints, len(c.Endpoints))}
	}
	seen := make(map[string]int, len(c.Endpoints))
	for i, e := range c.Endpoints {
		field := fmt.Sprintf("endpoints[%d].name", i)
		if e.Name == "" {
			return &FieldError{field, "must not be empty"}
		}
		if j, dup := seen[e.Name]; dup {
			return &FieldError{field, fmt.Sprintf("%q already names endpoints[%d]", e.Name, j)}
		}
		seen[e.Name] = i
	}
	return nil
}

// ValidateSettings checks everything but the endpoints (a dynamic pool's
// endpoints are checked by [Balancer.SetEndpoints]).
func (c *PoolConfig) ValidateSettings() error { return c.validateSettings() }

func (c *PoolConfig) validateSettings() error {
	if int(c.Strategy) >= len(strategyNames) {
		return &FieldError{"strategy", "unknown strategy"}
	}
	weights := []struct {
		field string
		v     float64
	}{{"running_weight", c.RunningWeight}, {"waiting_weight", c.WaitingWeight}, {"inflight_weight", c.InflightWeight}}
	for _, w := range weights {
		if math.IsNaN(w.v) || math.IsInf(w.v, 0) || w.v < 0 {
			return &FieldError{w.field, "must be a finite number >= 0"}
		}
	}
	if (c.Strategy == LeastLoaded || c.Strategy == PowerOfTwo) && c.RunningWeight+c.WaitingWeight+c.InflightWeight == 0 {
		return &FieldError{"inflight_weight", "all load weights are 0, so every endpoint would look idle"}
	}
	if c.StatsMaxAge <= 0 {
		return &FieldError{"stats_max_age_ms", "must be > 0"}
	}
	if c.QPSWindow < time.Second {
		return &FieldError{"qps_window_ms", "must be >= 1000"}
	}
	if c.AffinityPrefixBytes < 0 {
		return &FieldError{"affinity_prefix_bytes", "must be >= 0"}
	}
	if math.IsNaN(c.AffinityLoadFactor) || math.IsInf(c.AffinityLoadFactor, 0) || c.AffinityLoadFactor < 1 {
		return &FieldError{"affinity_load_factor", "must be a finite number >= 1"}
	}
	if math.IsNaN(c.CacheLoadFactor) || math.IsInf(c.CacheLoadFactor, 0) || c.CacheLoadFactor < 1 {
		return &FieldError{"cache_load_factor", "must be a finite number >= 1"}
	}
	if math.IsNaN(c.CacheLoadSlack) || math.IsInf(c.CacheLoadSlack, 0) || c.CacheLoadSlack < 0 {
		return &FieldError{"cache_load_slack", "must be a finite number >= 0"}
	}
	if math.IsNaN(c.CacheMinGain) || c.CacheMinGain < 0 || c.CacheMinGain > 1 {
		return &FieldError{"cache_min_gain", "must be a number in [0, 1]"}
	}
	if c.FailureThreshold < 0 || c.FailureThreshold > math.MaxUint16 {
		return &FieldError{"failure_threshold", fmt.Sprintf("must be in [0, %d]", math.MaxUint16)}
	}
	if c.FailureThreshold > 0 && c.Cooldown <= 0 {
		return &FieldError{"cooldown_ms", "must be > 0 when failure_threshold > 0"}
	}
	return nil
}
