package lb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is the base time of the tests.
var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// testPool returns the default pool with n endpoints named e0..e<n-1>.
func testPool(n int, s Strategy) PoolConfig {
	cfg := DefaultPoolConfig()
	cfg.Strategy = s
	for i := range n {
		cfg.Endpoints = append(cfg.Endpoints, Endpoint{Name: fmt.Sprintf("e%d", i)})
	}
	return cfg
}

func newTestBalancer(tb testing.TB, store Store, cfg PoolConfig, seed uint64) *Balancer {
	tb.Helper()
	b, err := New("decode", cfg, store, rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return b
}

func mustPick(tb testing.TB, b *Balancer, now time.Time, key uint64) *Lease {
	tb.Helper()
	l, err := b.Pick(now, key)
	if err != nil {
		tb.Fatalf("Pick at %v: %v", now.Sub(t0), err)
	}
	return l
}

// faultStore wraps a Store and fails Sets of keys containing match with
// ErrCasMismatch while fail > 0 (fail < 0: forever), without storing. It can also
// run a hook between a Get and the following Set of the same key.
type faultStore struct {
	Store
	mu        sync.Mutex
	match     string
	fail      int
	failed    int
	beforeSet func(key string)
}

func (f *faultStore) Set(key string, value []byte, cas uint32) error {
	f.mu.Lock()
	hook := f.beforeSet
	inject := strings.Contains(key, f.match) && f.fail != 0
	if inject {
		f.failed++
		if f.fail > 0 {
			f.fail--
		}
	}
	f.mu.Unlock()
	if hook != nil {
		hook(key)
	}
	if inject {
		return ErrCasMismatch
	}
	return f.Store.Set(key, value, cas)
}

// errStore fails every call, like a host whose shared-data calls all error.
type errStore struct{}

func (errStore) Get(string) ([]byte, uint32, error) { return nil, 0, fmt.Errorf("host: bad argument") }
func (errStore) Set(string, []byte, uint32) error   { return fmt.Errorf("host: bad argument") }

// counts returns how many leases chose each endpoint index.
func counts(n int, leases []*Lease) []int {
	c := make([]int, n)
	for _, l := range leases {
		c[l.Index]++
	}
	return c
}

func inflightOf(b *Balancer, now time.Time) []uint32 {
	var out []uint32
	for _, e := range b.Snapshot(now) {
		out = append(out, e.Inflight)
	}
	return out
}

func inf() float64 { return math.Inf(1) }
func nan() float64 { return math.NaN() }
