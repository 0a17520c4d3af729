package lb

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func newDynamic(tb testing.TB, store Store, s Strategy, seed uint64, names ...string) *Balancer {
	tb.Helper()
	cfg := DefaultPoolConfig()
	cfg.Strategy = s
	for _, n := range names {
		cfg.Endpoints = append(cfg.Endpoints, Endpoint{Name: n})
	}
	b, err := NewDynamic("decode", cfg, store, rand.NewPCG(seed, 1))
	if err != nil {
		tb.Fatalf("NewDynamic: %v", err)
	}
	return b
}

func slots(names ...string) []Endpoint {
	eps := make([]Endpoint, len(names))
	for i, n := range names {
		eps[i] = Endpoint{Name: n}
	}
	return eps
}

// An endpoint that stays in its slot keeps its in-flight count and health
// across a change of the set; a departed one gets no picks and its release
// still lands on its slot.
func TestDynamicKeepsStateAcrossChanges(t *testing.T) {
	store := NewMemStore()
	b := newDynamic(t, store, LeastLoaded, 1, "a", "b")
	la := mustPick(t, b, t0, 0)
	lb := mustPick(t, b, t0, 0)
	if la.Index == lb.Index {
		t.Fatalf("least_loaded picked slot %d twice on an idle pool", la.Index)
	}
	// b leaves, c arrives in a new slot.
	leaving := lb.Index
	set := slots("a", "b")
	set[leaving].Name = ""
	set = append(set, Endpoint{Name: "c"})
	if err := b.SetEndpoints(set); err != nil {
		t.Fatal(err)
	}
	// A second VM that learns the new set later and widens the values.
	other := newDynamic(t, store, LeastLoaded, 2, set[0].Name, set[1].Name, "c")
	for range 20 {
		l := mustPick(t, other, t0, 0)
		if l.Index == leaving {
			t.Fatalf("picked departed slot %d", leaving)
		}
		defer l.Release(t0)
	}
	snap := b.Snapshot(t0)
	if snap[la.Index].Inflight == 0 || snap[leaving].Inflight != 1 {
		t.Fatalf("after the change: %+v, want a's and b's counts kept", snap)
	}
	lb.Release(t0)
	la.Release(t0)
	if got := b.Inflight(leaving); got != 0 {
		t.Fatalf("departed slot in-flight after release = %d", got)
	}
}

// A VM still on a narrower set reads and writes values a wider VM wrote
// without losing the wider slots' counts.
func TestDynamicWidthsMix(t *testing.T) {
	store := NewMemStore()
	narrow := newDynamic(t, store, PrefixAffinity, 1, "a", "b")
	wide := newDynamic(t, store, PrefixAffinity, 2, "", "", "", "d")
	lw := mustPick(t, wide, t0, 42)
	if lw.Index != 3 {
		t.Fatalf("wide picked slot %d", lw.Index)
	}
	ln := mustPick(t, narrow, t0, 42)
	if ln.Index > 1 {
		t.Fatalf("narrow picked slot %d outside its set", ln.Index)
	}
	if got := narrow.Inflight(3); got != 1 {
		t.Fatalf("slot 3 after the narrow VM's write = %d, want 1", got)
	}
	ln.Release(t0)
	lw.Release(t0)
	for i := range 4 {
		if got := wide.Inflight(i); got != 0 {
			t.Fatalf("slot %d = %d after releases", i, got)
		}
	}
}

func TestDynamicEmptyPoolAndReset(t *testing.T) {
	store := NewMemStore()
	b := newDynamic(t, store, RoundRobin, 1)
	if _, err := b.Pick(t0, 0); err != ErrNoEndpoint {
		t.Fatalf("empty dynamic pool: %v, want ErrNoEndpoint", err)
	}
	if err := b.SetEndpoints(slots("x", "y")); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPoolConfig()
	cfg.FailureThreshold = 1
	h, _ := NewDynamic("decode", cfg, store, rand.NewPCG(3, 3))
	_ = h.SetEndpoints(slots("x", "y"))
	l := mustPick(t, h, t0, 0)
	if err := l.Report(t0, Failure); err != nil {
		t.Fatal(err)
	}
	l.Release(t0)
	if st := h.Snapshot(t0)[l.Index].Health; st != CoolingDown {
		t.Fatalf("health %v, want cooling_down", st)
	}
	if err := h.ResetSlots([]int{l.Index}); err != nil {
		t.Fatal(err)
	}
	if st := h.Snapshot(t0)[l.Index].Health; st != Healthy {
		t.Fatalf("after ResetSlots: %v", st)
	}
	if err := b.SetEndpoints(slots("x", "x")); err == nil {
		t.Fatal("duplicate names accepted")
	}
	if _, err := New("decode", testPool(1, RoundRobin), store, rand.NewPCG(1, 1)); err != nil {
		t.Fatal(err)
	}
}

// Every strategy works over a dynamic pool with holes.
func TestDynamicStrategies(t *testing.T) {
	for s := RoundRobin; s <= PrefixAffinity; s++ {
		t.Run(s.String(), func(t *testing.T) {
			store := NewMemStore()
			b := newDynamic(t, store, s, 7, "a", "", "c", "")
			if s == LeastLoaded || s == PowerOfTwo {
				for _, i := range []int{0, 2} {
					if err := b.PutStats(i, EngineStats{Running: float64(i)}, t0); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.PutStats(1, EngineStats{}, t0); err == nil {
					t.Fatal("PutStats on a free slot accepted")
				}
			}
			for k := range 50 {
				l := mustPick(t, b, t0.Add(time.Duration(k)*time.Millisecond), uint64(k))
				if l.Index != 0 && l.Index != 2 {
					t.Fatalf("picked slot %d", l.Index)
				}
				l.Release(t0)
			}
		})
	}
}

// storeBytes is the total size of a MemStore's values.
func storeBytes(m *MemStore) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, e := range m.entries {
		n += len(k) + len(e.value)
	}
	return n
}

// 10 000 endpoints coming and going through reused slots leave shared data and
// the balancer's own state bounded by the widest set.
func TestDynamicChurnBounded(t *testing.T) {
	store := NewMemStore()
	b := newDynamic(t, store, LeastLoaded, 1)
	cfg := DefaultPoolConfig()
	cfg.Strategy = QPS
	q, _ := NewDynamic("prefill", cfg, store, rand.NewPCG(2, 2))
	const live = 64
	set := make([]Endpoint, live)
	for i := range 10_000 {
		s := i % live
		set[s] = Endpoint{Name: fmt.Sprintf("pod-%d", i)}
		for _, x := range []*Balancer{b, q} {
			if err := x.SetEndpoints(set); err != nil {
				t.Fatal(err)
			}
			if err := x.ResetSlots([]int{s}); err != nil {
				t.Fatal(err)
			}
			now := t0.Add(time.Duration(i) * time.Millisecond)
			_ = x.PutStats(s, EngineStats{Running: 1}, now)
			l := mustPick(t, x, now, uint64(i))
			l.Release(now)
		}
	}
	if got := storeBytes(store); got > 10_000 {
		t.Fatalf("shared data after 10000 endpoints: %d bytes", got)
	}
	if b.n() != live || len(b.health) != live || len(b.nameHash) != live {
		t.Fatalf("per-slot state grew to %d", b.n())
	}
}

// Owners' rows follow the pool's width: a VM that knows three slots widens
// the rows a VM that knew two wrote, each owner's counts stay its own, a
// dead owner's counts expire, and ResetSlots clears a slot in every row.
func TestDynamicOwnersWiden(t *testing.T) {
	store := NewMemStore()
	narrow := newDynamic(t, store, LeastLoaded, 1, "a", "b")
	narrow.SetOwner(11, ttl)
	wide := newDynamic(t, store, LeastLoaded, 2, "a", "b", "c")
	wide.SetOwner(22, ttl)
	held := []*Lease{mustPick(t, narrow, t0, 0), mustPick(t, narrow, t0, 0)}
	for range 3 {
		held = append(held, mustPick(t, wide, t0, 0))
	}
	if n := rowsOf(t, store, wide); n != 2 {
		t.Fatalf("%d owner rows, want 2", n)
	}
	counts := func(b *Balancer, now time.Time) []uint32 {
		var c []uint32
		for _, s := range b.Snapshot(now) {
			c = append(c, s.Inflight)
		}
		return c
	}
	if c := counts(wide, t0); len(c) != 3 || total(c) != 5 {
		t.Fatalf("in flight %v, want 5 over 3 slots", c)
	}
	// the narrow VM dies: one TTL later only the wide VM's three count
	later := t0.Add(ttl + time.Second)
	for _, now := range []time.Time{t0.Add(ttl / 2), later} {
		if err := wide.Heartbeat(now); err != nil {
			t.Fatal(err)
		}
	}
	if c := counts(wide, later); total(c) != 3 {
		t.Fatalf("after the narrow owner expired: %v, want 3 in flight", c)
	}
	slot := held[2].Index
	if err := wide.ResetSlots([]int{slot}); err != nil {
		t.Fatal(err)
	}
	v, _, _ := store.Get(wide.keys.inflight)
	iv, _ := parseInflight(v)
	for r := range iv.rows() {
		if got := le.Uint32(iv.row(r)[ownerRowHead+4*slot:]); got != 0 {
			t.Fatalf("row %d still counts %d on reset slot %d", r, got, slot)
		}
	}
	if iv.get(slot) != 0 {
		t.Fatalf("total of reset slot %d is %d", slot, iv.get(slot))
	}
}

// cache_aware on a discovered pool: the prefix view and the pending prefill
// are per slot, so a pool that grows, or keeps a free slot, still routes by
// cache (the filter's cached slice has one entry per slot), and a new slot
// can take a cold prompt without the VM's state being too narrow for it.
func TestDynamicCacheAwareFollowsSlots(t *testing.T) {
	b := newDynamic(t, NewMemStore(), CacheAware, 1, "a", "b")
	now := t0
	for range 4 { // pending prefill on both slots
		l, err := b.PickCached(now, 0, []int{0, 0}, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(now)
	}
	// c arrives in a third slot and holds the prompt: it must get it.
	if err := b.SetEndpoints(slots("a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	l, err := b.PickCached(now, 0, []int{0, 0, 4096}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(now)
	if l.Index != 2 {
		t.Fatalf("grown pool: picked slot %d, want 2 (the holder)", l.Index)
	}
	// b leaves (a free slot): the holder in slot 2 still gets its prompt.
	set := slots("a", "b", "c")
	set[1].Name = ""
	if err := b.SetEndpoints(set); err != nil {
		t.Fatal(err)
	}
	l, err = b.PickCached(now, 0, []int{0, 0, 4096}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(now)
	if l.Index != 2 {
		t.Fatalf("pool with a free slot: picked slot %d, want 2 (the holder)", l.Index)
	}
}
