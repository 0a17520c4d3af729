package lb

import (
	"testing"
	"time"
)

func TestCacheAwareStickyUntilItsLoadBound(t *testing.T) {
	cfg := testPool(4, CacheAware)
	cfg.CacheLoadFactor, cfg.CacheLoadSlack = 1.5, 2
	b := newTestBalancer(t, NewMemStore(), cfg, 1)
	cached := []int{0, 0, 3000, 1000}
	var held []*Lease
	// Endpoint 2 holds the longest prefix: it takes requests until
	// in-flight + 1 > 1.5 × mean + 2.
	for n := range 3 {
		l, err := b.PickCached(at(0), 0, cached, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if l.Index != 2 {
			t.Fatalf("request %d went to %d with endpoint 2 at %d in flight; want 2", n, l.Index, n)
		}
		held = append(held, l)
	}
	// 3 in flight on 2: 3+1 > 1.5 × (3+1)/4 + 2 = 3.5, so it gives way to
	// the next longest prefix, endpoint 3.
	l, _ := b.PickCached(at(0), 0, cached, 10000)
	if l.Index != 3 {
		t.Fatalf("over its bound, endpoint 2 kept the request (went to %d); want 3", l.Index)
	}
	// Once 2's requests end, it is preferred again.
	for _, h := range held {
		h.Release(at(0))
	}
	if l, _ := b.PickCached(at(0), 0, cached, 10000); l.Index != 2 {
		t.Errorf("after releases: %d, want 2", l.Index)
	}
}

func TestCacheAwareWithoutCacheTakesTurns(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(3, CacheAware), 2)
	counts := make([]int, 3)
	for range 9 {
		l := mustPick(t, b, at(0), 0) // Pick: nothing cached
		counts[l.Index]++
	}
	for i, c := range counts {
		if c != 3 {
			t.Fatalf("counts %v: endpoint %d took %d of 9 held requests, want 3 each", counts, i, c)
		}
	}
	// A cached slice of the wrong length is ignored, not a panic.
	if _, err := b.PickCached(at(0), 0, []int{1}, 10000); err != nil {
		t.Fatal(err)
	}
}

func TestCacheAwareSkipsCoolingEndpoint(t *testing.T) {
	cfg := testPool(2, CacheAware)
	cfg.FailureThreshold = 1
	b := newTestBalancer(t, NewMemStore(), cfg, 3)
	l, _ := b.PickCached(at(0), 0, []int{5000, 0}, 10000)
	if l.Index != 0 {
		t.Fatalf("first pick %d, want 0", l.Index)
	}
	_ = l.Report(at(0), Failure)
	l.Release(at(0))
	if l, _ := b.PickCached(at(0), 0, []int{5000, 0}, 10000); l.Index != 1 {
		t.Errorf("endpoint 0 cools down, yet got %d", l.Index)
	}
}

func TestCacheAwareIgnoresSmallDifferences(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(4, CacheAware), 4)
	// Endpoint 1 holds 2 % of the prompt (a shared system prompt), the rest
	// nothing: under cache_min_gain 10 % that is a tie, and load spreads.
	counts := make([]int, 4)
	for range 8 {
		l, err := b.PickCached(at(0), 0, []int{0, 200, 0, 0}, 10000)
		if err != nil {
			t.Fatal(err)
		}
		counts[l.Index]++
	}
	for i, c := range counts {
		if c != 2 {
			t.Fatalf("counts %v: endpoint %d took %d of 8, want 2 each", counts, i, c)
		}
	}
	// 20 % is not a tie.
	if l, _ := b.PickCached(at(0), 0, []int{0, 2000, 0, 0}, 10000); l.Index != 1 {
		t.Errorf("20 %% cached on endpoint 1, went to %d", l.Index)
	}
}

// With nothing worth keeping cached anywhere, in traffic that mostly has
// nothing cached, requests follow the rotation as round robin would, and
// an endpoint is skipped only when it is already more than
// cache_load_slack above the mean in-flight (the mean counting this
// request): loads within the slack are the rotation's own spread, and
// skipping them breaks its regular spacing of long prefills (rag in
// docs/ROUTING.md). With no view of the prompt at all (Pick, or the decoder
// chosen from the headers), the rotation alone. Another VM holds the load
// on endpoint 0, so this VM's own traffic stays cold.
func TestCacheAwareColdRequestsRotate(t *testing.T) {
	cold := []int{0, 0, 0, 0}
	for _, tc := range []struct {
		held   int  // in flight on endpoint 0 (another VM's sticky requests)
		noView bool // the cold pick has no cached slice (Pick)
		want   int  // the cold pick whose turn is endpoint 0's
	}{
		{held: 0, want: 0},
		{held: 2, want: 0},
		{held: 3, want: 0}, // 3 = (3+1)/4 + 2: exactly slack above the mean, not past it
		{held: 4, want: 1}, // 4 > (4+1)/4 + 2
		{held: 7, want: 1},
		{held: 7, noView: true, want: 0},
	} {
		cfg := testPool(4, CacheAware)
		cfg.CacheLoadFactor, cfg.CacheLoadSlack = 100, 2 // the sticky requests stay on 0
		store := NewMemStore()
		loadOn(t, store, []int{tc.held, 0, 0, 0})
		b := newTestBalancer(t, store, cfg, 5) // its rotation is at endpoint 0
		var l *Lease
		if tc.noView {
			l = mustPick(t, b, at(0), 0)
		} else {
			l, _ = b.PickCached(at(0), 0, cold, 10000)
		}
		if l.Index != tc.want {
			t.Errorf("%d in flight on endpoint 0, no view %v: cold request went to %d, want %d", tc.held, tc.noView, l.Index, tc.want)
		}
	}
}

// Even loads: cold requests visit every endpoint in turn, as round robin.
func TestCacheAwareColdRequestsFollowTheRotationExactly(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(4, CacheAware), 6)
	var got []int
	for range 12 {
		l, _ := b.PickCached(at(0), 0, []int{0, 0, 0, 0}, 10000)
		got = append(got, l.Index)
	}
	for n := 4; n < len(got); n++ {
		if got[n] != got[n-4] || got[n] == got[n-1] {
			t.Fatalf("order %v: not a rotation", got)
		}
	}
}

// loadOn holds in-flight requests on store's pool from another VM: n[e] on
// endpoint e.
func loadOn(t *testing.T, store Store, n []int) {
	t.Helper()
	cfg := testPool(len(n), CacheAware)
	cfg.CacheLoadFactor = 100
	other := newTestBalancer(t, store, cfg, 99)
	for e, c := range n {
		cached := make([]int, len(n))
		cached[e] = 9000
		for range c {
			if l, _ := other.PickCached(at(0), 0, cached, 10000); l.Index != e {
				t.Fatalf("setup: a request held for endpoint %d went to %d", e, l.Index)
			}
		}
	}
}

// Once a quarter of a VM's recent requests had a cached prefix, loads are
// the prefixes' doing, and a prompt nobody holds goes to the least
// in-flight endpoint rather than to its turn (tenants in docs/ROUTING.md:
// first visits are the largest prefills there are). The share decays with
// cold traffic.
func TestCacheAwareColdRequestsFillTheGapsOfStickyTraffic(t *testing.T) {
	cold := []int{0, 0, 0, 0}
	for _, tc := range []struct {
		sticky, thenCold int // this VM's picks with a cached prefix, then cold ones (all released)
		want             int
	}{
		{sticky: 0, want: 0},                // the turn: endpoint 0, though 2 in flight
		{sticky: 4, want: 0},                // share 1 − (15/16)^4 = 0.23: still the turn
		{sticky: 5, want: 3},                // 0.28: the least in flight
		{sticky: 16, want: 3},               // 0.64
		{sticky: 16, thenCold: 16, want: 0}, // 0.23 again
		{sticky: 16, thenCold: 12, want: 3}, // 0.30
	} {
		cfg := testPool(4, CacheAware)
		cfg.CacheLoadFactor, cfg.CacheLoadSlack = 100, 2
		store := NewMemStore()
		b := newTestBalancer(t, store, cfg, 7)
		for range tc.sticky {
			l, _ := b.PickCached(at(0), 0, []int{0, 9000, 0, 0}, 10000)
			l.Release(at(0))
		}
		for range tc.thenCold {
			l, _ := b.PickCached(at(0), 0, cold, 10000)
			l.Release(at(0))
		}
		loadOn(t, store, []int{2, 1, 1, 0})
		b.turn = 0 // the rotation at endpoint 0
		// A minute later: the history's pending work has decayed, and only
		// the share it left decides.
		if l, _ := b.PickCached(at(time.Minute), 0, cold, 10000); l.Index != tc.want {
			t.Errorf("%d sticky then %d cold picks (share %.2f): cold request went to %d, want %d",
				tc.sticky, tc.thenCold, b.stickyShare, l.Index, tc.want)
		}
	}
}

// Among endpoints holding the prompt's prefix (within cache_min_gain of the
// longest) and under their load bound, the least in flight takes it; a
// holder past the bound does not, and a shorter prefix is not a holder.
func TestCacheAwareLeastLoadedHolder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   []int // in flight per endpoint
		cached []int
		want   int
	}{
		{"one holder", []int{0, 0, 0, 0}, []int{0, 0, 6000, 0}, 2},
		{"two holders: the less loaded", []int{2, 0, 0, 1}, []int{6000, 0, 0, 6000}, 3},
		{"two holders within the margin", []int{2, 0, 0, 1}, []int{6000, 0, 0, 5500}, 3},
		{"a shorter prefix is no holder", []int{2, 0, 0, 1}, []int{6000, 0, 0, 4000}, 0},
		{"holders past their bound give way", []int{7, 0, 0, 7}, []int{6000, 0, 0, 6000}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testPool(4, CacheAware)
			cfg.CacheLoadFactor, cfg.CacheLoadSlack = 1.5, 2
			store := NewMemStore()
			loadOn(t, store, tc.held)
			b := newTestBalancer(t, store, cfg, 9)
			if l, _ := b.PickCached(at(0), 0, tc.cached, 10000); l.Index != tc.want {
				t.Errorf("in flight %v, cached %v: went to %d, want %d", inflightOf(b, at(0)), tc.cached, l.Index, tc.want)
			}
		})
	}
}

// Where cache_aware places a prompt on an endpoint that does not hold it
// (giving way, rule 2; a cold prompt in sticky traffic, rule 3), the prompt
// this VM recently sent an endpoint that did not hold it counts as load, one
// in-flight request per pendingUnit, decaying with pendingTau: in-flight
// counts say how many requests an endpoint has, not how much prefill they
// bring. Among the holders of a prefix (rule 1) in-flight counts alone
// decide.
func TestCacheAwarePendingPrefillCountsAsLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []int // this many released picks with this cached slice (20 % on one endpoint: rule 1 sends them there, 8 000 of 10 000 uncached each)
		times   int
		held    []int // then in flight per endpoint (another VM)
		after   time.Duration
		cached  []int
		want    int
	}{
		{"giving way: not to the endpoint just sent a cold prompt",
			[]int{0, 2000, 0, 0}, 1, []int{7, 0, 1, 1}, 0, []int{6000, 0, 0, 0}, 2},
		{"giving way, the work decayed",
			[]int{0, 2000, 0, 0}, 1, []int{7, 0, 1, 1}, 30 * time.Second, []int{6000, 0, 0, 0}, 1},
		{"a cold prompt in sticky traffic: not to the endpoint just sent cold prompts",
			[]int{2000, 0, 0, 0}, 5, []int{0, 1, 1, 1}, 0, []int{0, 0, 0, 0}, 1},
		{"a cold prompt in sticky traffic, the work decayed",
			[]int{2000, 0, 0, 0}, 5, []int{0, 1, 1, 1}, 30 * time.Second, []int{0, 0, 0, 0}, 0},
		{"pending work below an in-flight difference does not decide",
			[]int{0, 2000, 0, 0}, 1, []int{20, 0, 9, 9}, 0, []int{6000, 0, 0, 0}, 1},
		{"among holders, in-flight counts alone",
			[]int{2000, 0, 0, 0}, 5, []int{0, 0, 0, 1}, 0, []int{6000, 0, 0, 6000}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testPool(4, CacheAware)
			cfg.CacheLoadFactor, cfg.CacheLoadSlack = 1.5, 2
			store := NewMemStore()
			b := newTestBalancer(t, store, cfg, 11)
			for range tc.times {
				l, _ := b.PickCached(at(0), 0, tc.history, 10000)
				l.Release(at(0))
			}
			loadOn(t, store, tc.held)
			b.turn = 0 // ties go to the lowest index
			if l, _ := b.PickCached(at(tc.after), 0, tc.cached, 10000); l.Index != tc.want {
				t.Errorf("in flight %v, cached %v: went to %d, want %d (pending after the pick %.1f)", inflightOf(b, at(tc.after)), tc.cached, l.Index, tc.want, b.pending)
			}
		})
	}
}

// Cold traffic's rotation (rule 4) does not read the pending work: long
// unique prompts keep round robin's spacing (rag in docs/ROUTING.md).
func TestCacheAwarePendingPrefillLeavesTheRotation(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(4, CacheAware), 12)
	var got []int
	for n := range 8 {
		l, _ := b.PickCached(at(time.Duration(n)*time.Millisecond), 0, []int{0, 0, 0, 0}, 40000)
		l.Release(at(0))
		got = append(got, l.Index)
	}
	for n := 4; n < len(got); n++ {
		if got[n] != got[n-4] || got[n] == got[n-1] {
			t.Fatalf("order %v: not a rotation", got)
		}
	}
}
