package lb

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func TestReleaseOnce(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(1, LeastLoaded), 1)
	first, second := mustPick(t, b, t0, 0), mustPick(t, b, t0, 0)
	if got := inflightOf(b, t0); !slices.Equal(got, []uint32{2}) {
		t.Fatalf("in-flight %v after two picks", got)
	}
	first.Release(t0)
	first.Release(t0)
	if got := inflightOf(b, t0); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("in-flight %v after releasing one lease twice, want [1]", got)
	}
	second.Release(t0)
	if got := inflightOf(b, t0); !slices.Equal(got, []uint32{0}) {
		t.Fatalf("in-flight %v at the end", got)
	}
	var none *Lease
	none.Release(t0)
	if err := none.Report(t0, Failure); err != nil {
		t.Fatalf("Report on nil lease = %v", err)
	}
}

func TestReportOnce(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(1, RoundRobin), 1)
	l := mustPick(t, b, t0, 0)
	for range 5 {
		if err := l.Report(t0, Failure); err != nil {
			t.Fatal(err)
		}
	}
	expectHealth(t, b, t0, 0, Healthy, 1)
}

// TestCountsNeverNegative: a value reset under a held lease (garbage, another
// version) makes its release a no-op, not a wrap to 2^32-1.
func TestCountsNeverNegative(t *testing.T) {
	s := NewMemStore()
	b := newTestBalancer(t, s, testPool(2, PrefixAffinity), 1)
	l := mustPick(t, b, t0, 0)
	if err := s.Set(b.keys.inflight, []byte("garbage"), 0); err != nil {
		t.Fatal(err)
	}
	l.Release(t0)
	if got := inflightOf(b, t0); !slices.Equal(got, []uint32{0, 0}) {
		t.Fatalf("in-flight %v", got)
	}
}

// TestReleaseAcrossReload: a lease from before a reload that changed the endpoint
// list releases into its own keys and leaves the new list's counts alone.
func TestReleaseAcrossReload(t *testing.T) {
	s := NewMemStore()
	old := newTestBalancer(t, s, testPool(2, LeastLoaded), 1)
	held := mustPick(t, old, t0, 0)
	reloaded := newTestBalancer(t, s, testPool(3, LeastLoaded), 2)
	var kept []*Lease
	for range 3 {
		kept = append(kept, mustPick(t, reloaded, t0, 0))
	}
	held.Release(t0)
	if got := inflightOf(reloaded, t0); !slices.Equal(got, []uint32{1, 1, 1}) {
		t.Fatalf("new pool in-flight %v, want [1 1 1]", got)
	}
	if got := inflightOf(old, t0); !slices.Equal(got, []uint32{0, 0}) {
		t.Fatalf("old pool in-flight %v, want [0 0]", got)
	}
	// Unchanged list, other settings: same keys, so the old lease's release counts.
	same := testPool(3, PrefixAffinity)
	same.InflightWeight = 2
	again := newTestBalancer(t, s, same, 3)
	kept[0].Release(t0)
	if got := inflightOf(again, t0); slices.Max(got) != 1 || got[kept[0].Index] != 0 {
		t.Fatalf("in-flight %v after releasing endpoint %d", got, kept[0].Index)
	}
}

func TestLeaseEndpoint(t *testing.T) {
	cfg := testPool(2, RoundRobin)
	b := newTestBalancer(t, NewMemStore(), cfg, 1)
	mustPick(t, b, t0, 0)
	l := mustPick(t, b, t0, 0)
	if e := l.Endpoint(); e.Name != "e1" || l.Index != 1 {
		t.Fatalf("Endpoint() = %+v", e)
	}
	cfg.Endpoints[1].Name = "changed after New"
	if l.Endpoint().Name != "e1" {
		t.Fatal("balancer shares the caller's endpoint slice")
	}
}

func TestPutStatsAndSnapshot(t *testing.T) {
	s := NewMemStore()
	b := newTestBalancer(t, s, testPool(3, LeastLoaded), 1)
	observed := at(time.Second)
	if err := b.PutStats(1, EngineStats{Running: 4, Waiting: 2, KVCacheUsage: 0.25}, observed); err != nil {
		t.Fatal(err)
	}
	if err := b.PutStats(2, EngineStats{Running: 1e300}, observed); err != nil { // saturates
		t.Fatal(err)
	}
	for _, bad := range []struct {
		i int
		s EngineStats
	}{{3, EngineStats{}}, {-1, EngineStats{}}, {0, EngineStats{Running: -1}}, {0, EngineStats{Waiting: inf()}}, {0, EngineStats{KVCacheUsage: nan()}}} {
		if err := b.PutStats(bad.i, bad.s, observed); err == nil {
			t.Errorf("PutStats(%d, %+v) accepted", bad.i, bad.s)
		}
	}
	other := newTestBalancer(t, s, testPool(3, PowerOfTwo), 2) // another VM reads them
	snap := other.Snapshot(at(16 * time.Second))
	if snap[0].StatsObserved != (time.Time{}) || snap[0].StatsFresh {
		t.Errorf("endpoint 0 never scraped: %+v", snap[0])
	}
	if got := snap[1]; got.Name != "e1" || got.Stats != (EngineStats{Running: 4, Waiting: 2, KVCacheUsage: 0.25}) ||
		!got.StatsObserved.Equal(observed) || !got.StatsFresh {
		t.Errorf("endpoint 1: %+v", got)
	}
	if got := snap[2].Stats.Running; got != 3.4028234663852886e38 {
		t.Errorf("saturated running = %v", got)
	}
	if other.Snapshot(at(17 * time.Second))[1].StatsFresh {
		t.Error("stats 16s old still fresh with max age 15s")
	}
}

// TestGarbageValuesSurvived: foreign or corrupt values under every key are read as
// absent and replaced by the next write.
func TestGarbageValuesSurvived(t *testing.T) {
	fiveEndpoints := func(kind string) []byte {
		switch kind {
		case "rotation":
			return []byte{valueVersion, kindRotation, 1}
		case "inflight":
			return newInflight(nil, 5)
		case "health":
			return appendHealth(nil, make([]healthEntry, 5))
		case "stats":
			return newStats(nil, 5)
		}
		return newQPS(nil, 5, int64(time.Second), 0)
	}
	garbage := map[string]func(kind string) []byte{
		"text":          func(string) []byte { return []byte("hello, other plugin") },
		"empty":         func(string) []byte { return []byte{} },
		"next version":  func(k string) []byte { v := bytes.Clone(fiveEndpoints(k)); v[0]++; return v },
		"five endpoint": fiveEndpoints,
		"claims 65535 endpoints": func(k string) []byte {
			v := bytes.Clone(fiveEndpoints(k))
			if len(v) >= 4 {
				le.PutUint16(v[2:], 0xffff)
			}
			return v
		},
	}
	for _, kind := range []string{"rotation", "inflight", "health", "stats", "qps"} {
		for gname, build := range garbage {
			s := NewMemStore()
			strategy := map[string]Strategy{"rotation": RoundRobin, "qps": QPS}[kind]
			if kind == "inflight" || kind == "stats" {
				strategy = PowerOfTwo
			}
			b := newTestBalancer(t, s, testPool(3, strategy), 1)
			key := map[string]string{"rotation": b.keys.rotation, "inflight": b.keys.inflight,
				"health": b.keys.health, "stats": b.keys.stats, "qps": b.keys.qps}[kind]
			if err := s.Set(key, build(kind), 0); err != nil {
				t.Fatal(err)
			}
			l := mustPick(t, b, t0, 0)
			if l.Unrecorded || l.Index < 0 || l.Index > 2 {
				t.Fatalf("%s/%s: lease %+v", kind, gname, l)
			}
			if err := l.Report(t0, Failure); err != nil {
				t.Fatal(err)
			}
			if err := b.PutStats(0, EngineStats{Running: 1}, t0); err != nil {
				t.Fatal(err)
			}
			v, _, _ := s.Get(key)
			var ok bool
			switch kind {
			case "rotation":
				_, ok = parseRotation(v)
			case "inflight":
				var iv inflightView
				iv, ok = parseInflight(v)
				ok = ok && iv.len() == 3
			case "health":
				h := make([]healthEntry, 3)
				ok = parseHealth(v, h) && h[l.Index].failures == 1
			case "stats":
				var sv statsView
				sv, ok = parseStats(v)
				ok = ok && sv.len() == 3
			case "qps":
				var q qpsView
				q, ok = parseQPS(v)
				ok = ok && q.len() == 3 && q.total(l.Index) == 1
			}
			if !ok {
				t.Errorf("%s/%s: value not replaced by a valid one: % x", kind, gname, v)
			}
			if cap(b.health) != 3 || cap(b.buf) > 1024 {
				t.Errorf("%s/%s: scratch grew to %d health entries, %d bytes", kind, gname, cap(b.health), cap(b.buf))
			}
		}
	}
}

// FuzzBalancerGarbage writes arbitrary bytes under every key of a pool and drives
// each strategy over them: nothing may panic and every answer stays in range.
func FuzzBalancerGarbage(f *testing.F) {
	for _, v := range goldenValues() {
		f.Add(v, uint64(1), int64(0))
	}
	f.Add([]byte{valueVersion, kindHealth, 3, 0, 1, 0, 0, 0, 9, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, uint64(5), int64(-1))
	f.Fuzz(func(t *testing.T, garbage []byte, key uint64, offset int64) {
		now := t0.Add(time.Duration(offset))
		for s := RoundRobin; s <= PrefixAffinity; s++ {
			store := NewMemStore()
			b := newTestBalancer(t, store, testPool(3, s), key)
			for _, k := range []string{b.keys.rotation, b.keys.inflight, b.keys.health, b.keys.stats, b.keys.qps} {
				if err := store.Set(k, garbage, 0); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				l, err := b.Pick(now, key)
				if err != nil {
					continue // garbage may validly say every endpoint is out
				}
				if l.Index < 0 || l.Index > 2 {
					t.Fatalf("%v: index %d", s, l.Index)
				}
				_ = l.Report(now, Outcome(key%2))
				l.Release(now)
			}
			if snap := b.Snapshot(now); len(snap) != 3 {
				t.Fatalf("snapshot of %d endpoints", len(snap))
			}
		}
	})
}
