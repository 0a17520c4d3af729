package lb

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name      string
		edit      func(*PoolConfig)
		wantField string // "" = valid
		wantMsg   string
	}{
		{"defaults with endpoints", func(*PoolConfig) {}, "", ""},
		{"unknown strategy", func(c *PoolConfig) { c.Strategy = 42 }, "strategy", "unknown"},
		{"negative weight", func(c *PoolConfig) { c.WaitingWeight = -1 }, "waiting_weight", ">= 0"},
		{"NaN weight", func(c *PoolConfig) { c.RunningWeight = math.NaN() }, "running_weight", "finite"},
		{"all weights zero for least_loaded", func(c *PoolConfig) {
			c.Strategy, c.RunningWeight, c.WaitingWeight, c.InflightWeight = LeastLoaded, 0, 0, 0
		}, "inflight_weight", "all load weights are 0"},
		{"all weights zero is fine for round_robin", func(c *PoolConfig) {
			c.RunningWeight, c.WaitingWeight, c.InflightWeight = 0, 0, 0
		}, "", ""},
		{"stats max age", func(c *PoolConfig) { c.StatsMaxAge = 0 }, "stats_max_age_ms", "> 0"},
		{"qps window too short", func(c *PoolConfig) { c.QPSWindow = 999 * time.Millisecond }, "qps_window_ms", ">= 1000"},
		{"prefix bytes", func(c *PoolConfig) { c.AffinityPrefixBytes = -1 }, "affinity_prefix_bytes", ">= 0"},
		{"load factor below 1", func(c *PoolConfig) { c.AffinityLoadFactor = 0.9 }, "affinity_load_factor", ">= 1"},
		{"load factor inf", func(c *PoolConfig) { c.AffinityLoadFactor = math.Inf(1) }, "affinity_load_factor", "finite"},
		{"threshold negative", func(c *PoolConfig) { c.FailureThreshold = -1 }, "failure_threshold", "[0, 65535]"},
		{"threshold zero disables health, cooldown unused", func(c *PoolConfig) { c.FailureThreshold, c.Cooldown = 0, 0 }, "", ""},
		{"cooldown zero", func(c *PoolConfig) { c.Cooldown = 0 }, "cooldown_ms", "> 0"},
		{"no endpoints", func(c *PoolConfig) { c.Endpoints = nil }, "endpoints", "have 0"},
		{"too many endpoints", func(c *PoolConfig) { *c = testPool(MaxEndpoints+1, RoundRobin) }, "endpoints", "have 513"},
		{"empty name", func(c *PoolConfig) { c.Endpoints[1].Name = "" }, "endpoints[1].name", "empty"},
		{"duplicate name", func(c *PoolConfig) { c.Endpoints[2].Name = "e0" }, "endpoints[2].name", `"e0" already names endpoints[0]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testPool(3, RoundRobin)
			c.edit(&cfg)
			err := cfg.Validate()
			if c.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.wantField || !strings.Contains(fe.Msg, c.wantMsg) {
				t.Fatalf("Validate() = %v, want %s: ...%s...", err, c.wantField, c.wantMsg)
			}
			if !strings.HasPrefix(err.Error(), c.wantField+": ") {
				t.Fatalf("error %q does not start with its field path", err)
			}
		})
	}
}

func TestParseStrategy(t *testing.T) {
	for s := RoundRobin; s <= PrefixAffinity; s++ {
		got, err := ParseStrategy(s.String())
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %v, %v", s.String(), got, err)
		}
	}
	if _, err := ParseStrategy("least-loaded"); err == nil {
		t.Error("ParseStrategy accepted a misspelling")
	}
	if got := Strategy(9).String(); got != "strategy(9)" {
		t.Errorf("String of unknown = %q", got)
	}
}

func TestNewRejects(t *testing.T) {
	src := rand.NewPCG(1, 2)
	cfg := testPool(2, RoundRobin)
	cases := []struct {
		name  string
		pool  string
		cfg   PoolConfig
		store Store
		src   rand.Source
		want  string
	}{
		{"empty pool", "", cfg, NewMemStore(), src, "pool name"},
		{"slash in pool", "a/b", cfg, NewMemStore(), src, "pool name"},
		{"nil store", "decode", cfg, nil, src, "required"},
		{"nil source", "decode", cfg, NewMemStore(), nil, "required"},
		{"invalid config", "decode", PoolConfig{}, NewMemStore(), src, "stats_max_age_ms"},
	}
	for _, c := range cases {
		if _, err := New(c.pool, c.cfg, c.store, c.src); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New error = %v, want containing %q", c.name, err, c.want)
		}
	}
}

// TestKeysFollowEndpointSet: the same endpoint list shares keys whatever the other
// settings; another list (or order) gets other keys.
func TestKeysFollowEndpointSet(t *testing.T) {
	s := NewMemStore()
	a := newTestBalancer(t, s, testPool(3, RoundRobin), 1)
	other := testPool(3, LeastLoaded)
	other.Cooldown = time.Minute
	b := newTestBalancer(t, s, other, 2)
	if a.keys != b.keys {
		t.Errorf("same endpoints, different keys: %v vs %v", a.keys, b.keys)
	}
	reordered := testPool(3, RoundRobin)
	reordered.Endpoints[0], reordered.Endpoints[1] = reordered.Endpoints[1], reordered.Endpoints[0]
	for _, cfg := range []PoolConfig{testPool(4, RoundRobin), reordered} {
		if c := newTestBalancer(t, s, cfg, 3); c.keys.inflight == a.keys.inflight {
			t.Errorf("endpoint list %v shares keys with %v", cfg.Endpoints, a.cfg.Endpoints)
		}
	}
	if !strings.HasPrefix(a.keys.rotation, "lb/decode/") || !strings.HasSuffix(a.keys.rotation, "/rotation") {
		t.Errorf("rotation key %q", a.keys.rotation)
	}
}
