package lb

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestRoundRobinOrderAcrossVMs(t *testing.T) {
	s := NewMemStore()
	cfg := testPool(3, RoundRobin)
	vms := []*Balancer{newTestBalancer(t, s, cfg, 1), newTestBalancer(t, s, cfg, 2)}
	var got []int
	for i := range 7 {
		l := mustPick(t, vms[i%2], t0, 0)
		if l.Decision != ByStrategy || l.Retries != 0 || l.Unrecorded {
			t.Fatalf("pick %d: %+v", i, l)
		}
		got = append(got, l.Index)
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("rotation across two VMs = %v, want %v", got, want)
	}
}

// TestRoundRobinConcurrentExact: VMs (goroutines, one balancer each) picking at once
// on one store share a single rotation, so the split of the recorded picks is exact.
// A pick whose cas lost 8 times in a row is served but not recorded (Lease.Unrecorded,
// the bounded-retry rule); on a loaded 2-core machine that happens now and then with 8
// goroutines, so the test allows a few and checks the rest. Run with -race.
func TestRoundRobinConcurrentExact(t *testing.T) {
	const vms, each, endpoints = 8, 300, 4
	s := NewMemStore()
	cfg := testPool(endpoints, RoundRobin)
	results := make([][]*Lease, vms)
	var wg sync.WaitGroup
	for v := range vms {
		b := newTestBalancer(t, s, cfg, uint64(v))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				l, err := b.Pick(t0, 0)
				if err != nil {
					t.Error(err)
					return
				}
				results[v] = append(results[v], l)
			}
		}()
	}
	wg.Wait()
	var recorded []*Lease
	retries, unrecorded := 0, 0
	for _, l := range slices.Concat(results...) {
		retries += l.Retries
		if l.Unrecorded {
			unrecorded++
			continue
		}
		recorded = append(recorded, l)
	}
	if unrecorded > vms*each/100 {
		t.Fatalf("%d of %d picks not recorded after the retry bound", unrecorded, vms*each)
	}
	// Every recorded pick advanced the one shared counter by one, so the recorded
	// picks took consecutive rotation slots: an even split, to within one.
	got := counts(endpoints, recorded)
	for _, c := range got {
		if c < len(recorded)/endpoints || c > (len(recorded)+endpoints-1)/endpoints {
			t.Fatalf("distribution of %d recorded picks %v, want an even split", len(recorded), got)
		}
	}
	v, _, _ := s.Get(newTestBalancer(t, s, cfg, 0).keys.rotation)
	if c, _ := parseRotation(v); c != uint64(len(recorded)) {
		t.Fatalf("rotation counter %d, want %d (the recorded picks)", c, len(recorded))
	}
	t.Logf("%d picks, %d unrecorded, %d cas retries", vms*each, unrecorded, retries)
}

// TestCreateIfAbsent: two VMs that both find a key absent cannot overwrite each
// other's first write (the anchor cas makes the second create fail and retry).
func TestCreateIfAbsent(t *testing.T) {
	mem := NewMemStore()
	cfg := testPool(2, RoundRobin)
	cfg.FailureThreshold = 0
	fs := &faultStore{Store: mem}
	a := newTestBalancer(t, fs, cfg, 1)
	b := newTestBalancer(t, mem, cfg, 2)
	a.absentCAS() // prime the anchor so the hook fires on the rotation write only
	fired := false
	fs.beforeSet = func(key string) {
		if key == a.keys.rotation && !fired {
			fired = true
			mustPick(t, b, t0, 0) // B creates the key between A's Get and Set
		}
	}
	la := mustPick(t, a, t0, 0)
	if la.Retries != 1 || la.Index != 1 {
		t.Fatalf("A: retries %d index %d, want 1 retry and the second slot", la.Retries, la.Index)
	}
	v, _, _ := mem.Get(a.keys.rotation)
	if c, _ := parseRotation(v); c != 2 {
		t.Fatalf("rotation %d after two creating picks, want 2", c)
	}
}

func TestRandomUniformAndSeeded(t *testing.T) {
	cfg := testPool(4, Random)
	b1 := newTestBalancer(t, NewMemStore(), cfg, 7)
	b2 := newTestBalancer(t, NewMemStore(), cfg, 7)
	var l1, l2 []*Lease
	for range 4000 {
		l1 = append(l1, mustPick(t, b1, t0, 0))
		l2 = append(l2, mustPick(t, b2, t0, 0))
	}
	c1, c2 := counts(4, l1), counts(4, l2)
	if !slices.Equal(c1, c2) {
		t.Fatalf("same seed, different picks: %v vs %v", c1, c2)
	}
	for i, c := range c1 {
		if c < 850 || c > 1150 {
			t.Errorf("endpoint %d got %d of 4000 picks, want about 1000", i, c)
		}
	}
}

func TestLeastLoaded(t *testing.T) {
	type stat struct {
		running, waiting float64
		age              time.Duration // observed at now-age
		missing          bool
	}
	fresh := func(r, w float64) stat { return stat{running: r, waiting: w} }
	cases := []struct {
		name     string
		edit     func(*PoolConfig)
		stats    []stat
		inflight []int // leases held before the measured pick
		want     []int // endpoints of successive picks
		decision Decision
	}{
		{"fresh: lowest running+waiting", nil, []stat{fresh(5, 1), fresh(2, 0), fresh(1, 3)}, nil, []int{1}, ByStrategy},
		{"in-flight joins the load", nil, []stat{fresh(5, 1), fresh(2, 0), fresh(1, 3)}, []int{1, 1, 1}, []int{2}, ByStrategy},
		{"successive picks spread by in-flight", nil, []stat{fresh(0, 0), fresh(1.5, 0), fresh(3.2, 0)}, nil, []int{0, 0, 1, 0, 1, 0}, ByStrategy},
		{"weights", func(c *PoolConfig) { c.WaitingWeight = 10 }, []stat{fresh(5, 1), fresh(9, 0), fresh(1, 3)}, nil, []int{1}, ByStrategy},
		{"small future age is fresh", nil, []stat{{running: 0, age: -time.Second}, fresh(4, 0), fresh(4, 0)}, nil, []int{0}, ByStrategy},
		{"one stale: rotate", nil, []stat{fresh(9, 9), {running: 0, age: 16 * time.Second}, fresh(9, 9)}, nil, []int{0, 1, 2, 0}, ByRoundRobinFallback},
		{"one missing: rotate", nil, []stat{fresh(9, 9), fresh(0, 0), {missing: true}}, nil, []int{0, 1, 2}, ByRoundRobinFallback},
		{"age exactly max age is fresh", nil, []stat{{running: 3, age: 15 * time.Second}, fresh(4, 0)}, nil, []int{0}, ByStrategy},
		{"far future is stale", nil, []stat{{running: 3, age: -16 * time.Second}, fresh(4, 0)}, nil, []int{0, 1}, ByRoundRobinFallback},
	}
	now := at(time.Minute)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testPool(len(c.stats), LeastLoaded)
			if c.edit != nil {
				c.edit(&cfg)
			}
			b := newTestBalancer(t, NewMemStore(), cfg, 3)
			for i, st := range c.stats {
				if st.missing {
					continue
				}
				if err := b.PutStats(i, EngineStats{Running: st.running, Waiting: st.waiting}, now.Add(-st.age)); err != nil {
					t.Fatal(err)
				}
			}
			// Hold one lease per listed endpoint: pick until it lands there.
			for _, i := range c.inflight {
				for {
					l := mustPick(t, b, now, 0)
					if l.Index == i {
						break
					}
					l.Release(now)
				}
			}
			var got []int
			for range c.want {
				l := mustPick(t, b, now, 0)
				if l.Decision != c.decision {
					t.Fatalf("decision %v, want %v", l.Decision, c.decision)
				}
				got = append(got, l.Index)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("picks %v, want %v (in-flight now %v)", got, c.want, inflightOf(b, now))
			}
		})
	}
}

// TestLeastLoadedTiesRandom: with equal loads the first pick is not always index 0.
func TestLeastLoadedTiesRandom(t *testing.T) {
	seen := map[int]bool{}
	for seed := range uint64(40) {
		b := newTestBalancer(t, NewMemStore(), testPool(4, LeastLoaded), seed)
		for i := range 4 {
			if err := b.PutStats(i, EngineStats{Running: 1}, t0); err != nil {
				t.Fatal(err)
			}
		}
		seen[mustPick(t, b, t0, 0).Index] = true
	}
	if len(seen) != 4 {
		t.Fatalf("first picks over 40 seeds hit only %v", seen)
	}
}

func TestQPSWindow(t *testing.T) {
	cfg := testPool(3, QPS) // 10 s window: 10 buckets of 1 s
	b := newTestBalancer(t, NewMemStore(), cfg, 5)
	recent := func(now time.Time) []uint32 {
		var out []uint32
		for _, e := range b.Snapshot(now) {
			out = append(out, e.RecentRequests)
		}
		return out
	}
	// t=0: three picks spread over the three endpoints.
	first := counts(3, []*Lease{mustPick(t, b, at(0), 0), mustPick(t, b, at(0), 0), mustPick(t, b, at(0), 0)})
	if !slices.Equal(first, []int{1, 1, 1}) {
		t.Fatalf("first three picks %v, want one each", first)
	}
	// t=9s: endpoint fewest-started is still a tie; make 0 and 1 busier by hand-off:
	// two picks go to two distinct endpoints, the third to the remaining one.
	l1, l2 := mustPick(t, b, at(9*time.Second), 0), mustPick(t, b, at(9*time.Second), 0)
	if l1.Index == l2.Index {
		t.Fatalf("two picks at equal counts went to the same endpoint %d", l1.Index)
	}
	rest := 3 - l1.Index - l2.Index
	if l := mustPick(t, b, at(9500*time.Millisecond), 0); l.Index != rest {
		t.Fatalf("pick after two busier endpoints = %d, want %d", l.Index, rest)
	}
	if got := recent(at(9900 * time.Millisecond)); !slices.Equal(got, []uint32{2, 2, 2}) {
		t.Fatalf("window at 9.9s = %v, want [2 2 2]", got)
	}
	// t=10s: the t=0 bucket falls out of the window.
	if got := recent(at(10 * time.Second)); !slices.Equal(got, []uint32{1, 1, 1}) {
		t.Fatalf("window at 10s = %v, want [1 1 1]", got)
	}
	// t=25s: everything fell out; the next pick starts a new count.
	mustPick(t, b, at(25*time.Second), 0)
	var sum uint32
	for _, c := range recent(at(25 * time.Second)) {
		sum += c
	}
	if sum != 1 {
		t.Fatalf("window at 25s holds %d requests, want 1", sum)
	}
	// A different window width resets rather than misreading buckets.
	cfg.QPSWindow = 20 * time.Second
	b2 := newTestBalancer(t, b.store, cfg, 6)
	if got := b2.Snapshot(at(25 * time.Second)); got[0].RecentRequests+got[1].RecentRequests+got[2].RecentRequests != 0 {
		t.Fatalf("20s window read the 10s window's counts: %+v", got)
	}
}

// TestPowerOfTwoReducesSkew simulates requests of random length and compares the
// time-averaged variance of in-flight across endpoints under power_of_two and random.
func TestPowerOfTwoReducesSkew(t *testing.T) {
	variance := func(s Strategy) float64 {
		b := newTestBalancer(t, NewMemStore(), testPool(8, s), 42)
		dur := rand.New(rand.NewPCG(9, 9))
		type active struct {
			l   *Lease
			end int
		}
		var live []active
		inflight := make([]int, 8)
		total := 0.0
		const steps = 4000
		for step := range steps {
			kept := live[:0]
			for _, a := range live {
				if a.end == step {
					a.l.Release(t0)
					inflight[a.l.Index]--
				} else {
					kept = append(kept, a)
				}
			}
			live = kept
			l := mustPick(t, b, t0, 0)
			inflight[l.Index]++
			live = append(live, active{l, step + 1 + dur.IntN(63)})
			mean := float64(len(live)) / 8
			for _, c := range inflight {
				total += (float64(c) - mean) * (float64(c) - mean) / 8
			}
		}
		if got := inflightOf(b, t0); s == PowerOfTwo && !slices.Equal(got, toUint32(inflight)) {
			t.Fatalf("shared in-flight %v, simulation %v", got, inflight)
		}
		return total / steps
	}
	random, p2c := variance(Random), variance(PowerOfTwo)
	t.Logf("mean variance of in-flight over 8 endpoints (about 4 each): random %.2f, power_of_two %.2f", random, p2c)
	if p2c > random/2 {
		t.Fatalf("power_of_two variance %.2f not under half of random's %.2f", p2c, random)
	}
}

func toUint32(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}

func TestPowerOfTwoUsesFreshStats(t *testing.T) {
	// Two endpoints: every pick compares both. Endpoint 0 reports a long queue.
	b := newTestBalancer(t, NewMemStore(), testPool(2, PowerOfTwo), 1)
	if err := b.PutStats(0, EngineStats{Waiting: 50}, t0); err != nil {
		t.Fatal(err)
	}
	if err := b.PutStats(1, EngineStats{}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if l := mustPick(t, b, t0, 0); l.Index != 1 {
			t.Fatalf("pick %d went to the queued endpoint", i)
		}
	}
	// Once stale, only in-flight counts: 10 on endpoint 1, so 0 wins.
	if l := mustPick(t, b, at(time.Minute), 0); l.Index != 0 {
		t.Fatalf("with stale stats the pick went to %d, want 0", l.Index)
	}
}

// affinityMap picks each key once (releasing at once, so no load) and returns
// key → endpoint name.
func affinityMap(t *testing.T, cfg PoolConfig, keys []uint64) map[uint64]string {
	b := newTestBalancer(t, NewMemStore(), cfg, 1)
	out := make(map[uint64]string, len(keys))
	for _, k := range keys {
		l := mustPick(t, b, t0, k)
		out[k] = l.Endpoint().Name
		l.Release(t0)
	}
	return out
}

func TestPrefixAffinityStableAndMinimalMoves(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]uint64, 20000)
	for i := range keys {
		keys[i] = r.Uint64()
	}
	ten := testPool(10, PrefixAffinity)
	base := affinityMap(t, ten, keys)
	if again := affinityMap(t, ten, keys); !mapsEqual(base, again) {
		t.Fatal("same keys, same pool: different endpoints (another VM would disagree)")
	}
	perEndpoint := map[string]int{}
	for _, name := range base {
		perEndpoint[name]++
	}
	for name, c := range perEndpoint {
		if c < 1600 || c > 2400 {
			t.Errorf("%s owns %d of 20000 keys, want about 2000", name, c)
		}
	}

	removed := testPool(10, PrefixAffinity)
	removed.Endpoints = slices.Delete(removed.Endpoints, 3, 4) // drop e3
	added := testPool(11, PrefixAffinity)                      // add e10
	for _, c := range []struct {
		name     string
		cfg      PoolConfig
		onlyFrom string // moved keys must all come from this endpoint ("" = any)
		onlyTo   string // ... or all go to this one
		lo, hi   float64
	}{
		{"remove e3", removed, "e3", "", 0.08, 0.12},
		{"add e10", added, "", "e10", 0.07, 0.11},
	} {
		after := affinityMap(t, c.cfg, keys)
		moved := 0
		for _, k := range keys {
			if base[k] == after[k] {
				continue
			}
			moved++
			if (c.onlyFrom != "" && base[k] != c.onlyFrom) || (c.onlyTo != "" && after[k] != c.onlyTo) {
				t.Fatalf("%s: key moved %s → %s", c.name, base[k], after[k])
			}
		}
		if f := float64(moved) / float64(len(keys)); f < c.lo || f > c.hi {
			t.Errorf("%s moved %.3f of keys, want in [%.2f, %.2f]", c.name, f, c.lo, c.hi)
		}
	}
}

func mapsEqual(a, b map[uint64]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPrefixAffinityLoadBound: a hot key stays on its endpoint while that endpoint
// is within factor × mean in-flight, then spills to the key's next choice; when load
// drains it comes back.
func TestPrefixAffinityLoadBound(t *testing.T) {
	cfg := testPool(4, PrefixAffinity) // factor 1.25
	s := NewMemStore()
	b := newTestBalancer(t, s, cfg, 1)
	const hot = 0xfeedface
	home := mustPick(t, b, t0, hot)
	home.Release(t0)

	// Idle pool: the bound is ceil(1.25 × 2 / 4) = 1 for the second request, so a
	// hot key spreads at once.
	l1, l2 := mustPick(t, b, t0, hot), mustPick(t, b, t0, hot)
	if l1.Index != home.Index || l2.Index == home.Index {
		t.Fatalf("idle pool: picks %d, %d; want home %d then a spill", l1.Index, l2.Index, home.Index)
	}
	l1.Release(t0)
	l2.Release(t0)

	// Busy pool: 10 in flight everywhere (other keys). Pick j sees a bound of
	// ceil(1.25 × (40 + j) / 4): the home endpoint takes picks 1-5 (up to 15), the
	// sixth spills.
	busy := newInflight(nil, 4)
	for i := range 4 {
		for range 10 {
			busy.inc(i)
		}
	}
	if err := s.Set(b.keys.inflight, busy, 0); err != nil {
		t.Fatal(err)
	}
	var leases []*Lease
	for j := 1; j <= 6; j++ {
		l := mustPick(t, b, t0, hot)
		leases = append(leases, l)
		if wantHome := j <= 5; (l.Index == home.Index) != wantHome {
			t.Fatalf("busy pool, hot pick %d went to %d (home %d); in-flight %v", j, l.Index, home.Index, inflightOf(b, t0))
		}
	}
	if got := inflightOf(b, t0)[home.Index]; got != 15 {
		t.Fatalf("home in-flight %d, want 15", got)
	}
	for _, l := range leases {
		l.Release(t0)
	}
	if l := mustPick(t, b, t0, hot); l.Index != home.Index {
		t.Fatalf("after load drained the hot key went to %d, want home %d", l.Index, home.Index)
	}
}
