package lb

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestContentionBounded: a store whose writes keep failing with CasMismatch cannot
// hold a pick: it returns after casAttempts tries and says what it did.
func TestContentionBounded(t *testing.T) {
	cases := []struct {
		name           string
		strategy       Strategy
		match          string // key the failures hit
		fail           int    // injected mismatches; -1 = forever
		wantRetries    int
		wantUnrecorded bool
	}{
		{"round_robin, 3 mismatches", RoundRobin, "rotation", 3, 3, false},
		{"round_robin, forever", RoundRobin, "rotation", -1, casAttempts, true},
		{"least_loaded, forever", LeastLoaded, "inflight", -1, casAttempts, true},
		{"qps, 7 mismatches", QPS, "qps", 7, 7, false},
		{"qps, forever", QPS, "qps", -1, casAttempts, true},
		{"power_of_two, 1 mismatch", PowerOfTwo, "inflight", 1, 1, false},
		{"prefix_affinity, forever", PrefixAffinity, "inflight", -1, casAttempts, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := NewMemStore()
			fs := &faultStore{Store: mem, match: c.match, fail: c.fail}
			b := newTestBalancer(t, fs, testPool(3, c.strategy), 1)
			for i := range 3 {
				if err := b.PutStats(i, EngineStats{Running: float64(i)}, t0); err != nil {
					t.Fatal(err)
				}
			}
			l := mustPick(t, b, t0, 0)
			if l.Retries != c.wantRetries || l.Unrecorded != c.wantUnrecorded || l.Index < 0 || l.Index > 2 {
				t.Fatalf("lease %+v; want %d retries, unrecorded %v", l, c.wantRetries, c.wantUnrecorded)
			}
			if fs.failed != c.wantRetries {
				t.Fatalf("%d writes failed, lease says %d retries", fs.failed, l.Retries)
			}
			// Nothing to give back for an unrecorded in-flight increment.
			fs.mu.Lock()
			fs.fail = 0
			fs.mu.Unlock()
			l.Release(t0)
			for i, e := range b.Snapshot(t0) {
				if e.Inflight != 0 {
					t.Fatalf("endpoint %d in-flight %d after release", i, e.Inflight)
				}
			}
		})
	}
}

func TestProbeClaimContention(t *testing.T) {
	mem := NewMemStore()
	b := newTestBalancer(t, mem, testPool(2, RoundRobin), 1)
	for range 3 {
		for {
			if l := mustPick(t, b, t0, 0); l.Index == 0 {
				if err := l.Report(t0, Failure); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	}
	fs := &faultStore{Store: mem, match: "health", fail: -1}
	b2 := newTestBalancer(t, fs, testPool(2, RoundRobin), 2)
	l := mustPick(t, b2, at(10*time.Second), 0)
	if l.Decision != ByStrategy || l.Index != 1 || l.Retries != casAttempts {
		t.Fatalf("probe claim under contention: %+v; want endpoint 1 by strategy after %d retries", l, casAttempts)
	}
	if err := l.Report(at(10*time.Second), Failure); !errors.Is(err, ErrNotRecorded) {
		t.Fatalf("Report under contention = %v, want ErrNotRecorded", err)
	}
	if err := b2.PutStats(0, EngineStats{}, t0); err != nil {
		t.Fatalf("stats key is not contended: %v", err)
	}
}

// TestReleaseDebt: a release that cannot be written is carried by the VM and
// written with its next in-flight update.
func TestReleaseDebt(t *testing.T) {
	mem := NewMemStore()
	fs := &faultStore{Store: mem, match: "inflight"}
	b := newTestBalancer(t, fs, testPool(2, PrefixAffinity), 1)
	held := mustPick(t, b, t0, 7)
	fs.fail = -1
	held.Release(t0)
	if got := inflightOf(b, t0); got[held.Index] != 1 {
		t.Fatalf("in-flight %v: the failed release must not be visible yet", got)
	}
	fs.fail = 0
	next := mustPick(t, b, t0, 7)
	got := inflightOf(b, t0)
	want := []uint32{0, 0}
	want[next.Index] = 1
	if !slices.Equal(got, want) {
		t.Fatalf("in-flight %v after the next pick, want %v", got, want)
	}
	next.Release(t0)
	if got := inflightOf(b, t0); !slices.Equal(got, []uint32{0, 0}) {
		t.Fatalf("in-flight %v at the end", got)
	}
}

// TestStoreFailures: a host whose shared-data calls all fail still gets answers.
func TestStoreFailures(t *testing.T) {
	for _, s := range []Strategy{RoundRobin, Random, LeastLoaded, QPS, PowerOfTwo, PrefixAffinity} {
		b := newTestBalancer(t, errStore{}, testPool(3, s), 1)
		l := mustPick(t, b, t0, 0)
		wantUnrecorded := s != Random
		if l.Unrecorded != wantUnrecorded || l.Retries != 0 {
			t.Errorf("%v: lease %+v, want unrecorded %v", s, l, wantUnrecorded)
		}
		if err := l.Report(t0, Failure); !errors.Is(err, ErrNotRecorded) {
			t.Errorf("%v: Report = %v", s, err)
		}
		l.Release(t0)
		if err := b.PutStats(0, EngineStats{}, t0); !errors.Is(err, ErrNotRecorded) {
			t.Errorf("%v: PutStats = %v", s, err)
		}
		if snap := b.Snapshot(t0); len(snap) != 3 || snap[1].Name != "e1" || snap[1].Health != Healthy {
			t.Errorf("%v: snapshot %+v", s, snap)
		}
	}
}
