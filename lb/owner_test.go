package lb

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const ttl = 10 * time.Second

func ownedBalancer(tb testing.TB, s Store, owner uint64) *Balancer {
	tb.Helper()
	b := newTestBalancer(tb, s, testPool(2, LeastLoaded), owner)
	b.SetOwner(owner, ttl)
	return b
}

func rowsOf(tb testing.TB, s Store, b *Balancer) int {
	tb.Helper()
	v, _, err := s.Get(b.keys.inflight)
	if err != nil {
		return 0
	}
	iv, ok := parseInflight(v)
	if !ok {
		tb.Fatalf("in-flight value unreadable: % x", v)
	}
	return iv.rows()
}

func total(c []uint32) uint32 {
	var n uint32
	for _, x := range c {
		n += x
	}
	return n
}

// TestOwnerExpiry: the counts of an owner that stopped writing and beating (a
// VM that trapped) stop counting one TTL after its last write; the live
// owner's stay, and its releases bring the pool back to zero.
func TestOwnerExpiry(t *testing.T) {
	for _, tt := range []struct {
		name        string
		deadAt      time.Duration // the dead VM's last write
		beats       []time.Duration
		readAt      time.Duration
		wantTotal   uint32 // what a reader sees at readAt
		wantRows    int    // rows in the value after the beats
		lateRelease bool   // the dead VM releases after all (it was only slow)
	}{
		{"before the TTL both count", 0, nil, 9 * time.Second, 5, 2, false},
		{"one TTL after its last write the dead VM's counts are gone", 0, nil, 10*time.Second + 1, 2, 2, false},
		{"a heartbeat drops the dead row", 0, []time.Duration{11 * time.Second}, 11 * time.Second, 2, 1, false},
		{"the live VM's beats keep its counts for long requests", 0,
			[]time.Duration{7500 * time.Millisecond, 10 * time.Second, 12500 * time.Millisecond, 15 * time.Second,
				17500 * time.Millisecond, 20 * time.Second, 22500 * time.Millisecond, 25 * time.Second}, 26 * time.Second, 2, 1, false},
		{"a late release of an expired row changes nothing", 0, []time.Duration{11 * time.Second}, 11 * time.Second, 2, 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore()
			dead, live := ownedBalancer(t, s, 1), ownedBalancer(t, s, 2)
			var deadLeases []*Lease
			for range 3 {
				deadLeases = append(deadLeases, mustPick(t, dead, at(tt.deadAt), 0))
			}
			var liveLeases []*Lease
			for range 2 {
				liveLeases = append(liveLeases, mustPick(t, live, at(5*time.Second), 0))
			}
			for _, d := range tt.beats {
				if err := live.Heartbeat(at(d)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.lateRelease {
				for _, l := range deadLeases {
					l.Release(at(tt.readAt))
				}
			}
			if got := total(inflightOf(live, at(tt.readAt))); got != tt.wantTotal {
				t.Errorf("in flight at %v: %d, want %d", tt.readAt, got, tt.wantTotal)
			}
			if got := rowsOf(t, s, live); got != tt.wantRows {
				t.Errorf("%d rows, want %d", got, tt.wantRows)
			}
			for _, l := range liveLeases {
				l.Release(at(tt.readAt))
			}
			if got := inflightOf(live, at(tt.readAt)); total(got) != 0 && tt.readAt > ttl {
				t.Errorf("after the live VM released: %v", got)
			}
			if got := rowsOf(t, s, live); got != 0 && tt.readAt > ttl {
				t.Errorf("after the live VM released: %d rows", got)
			}
		})
	}
}

// TestLeastLoadedIgnoresDeadOwner: once the dead VM's row expired, picks see
// the pool as the live VMs hold it.
func TestLeastLoadedIgnoresDeadOwner(t *testing.T) {
	s := NewMemStore()
	dead, live := ownedBalancer(t, s, 1), ownedBalancer(t, s, 2)
	for range 4 {
		l := mustPick(t, dead, t0, 0)
		_ = l
	}
	// The dead VM loaded both endpoints (2 each); the live one adds 1 on e0.
	if got := inflightOf(live, t0); !slices.Equal(got, []uint32{2, 2}) {
		t.Fatalf("before: %v", got)
	}
	later := at(ttl + time.Second)
	l := mustPick(t, live, later, 0)
	if got := inflightOf(live, later); total(got) != 1 || got[l.Index] != 1 {
		t.Errorf("after expiry: %v (picked %d)", got, l.Index)
	}
	l.Release(later)
	if got := inflightOf(live, later); !slices.Equal(got, []uint32{0, 0}) || rowsOf(t, s, live) != 0 {
		t.Errorf("idle: %v, %d rows", got, rowsOf(t, s, live))
	}
}

// TestHeartbeatWritesRarely: a heartbeat reads once and writes only when its
// row was refreshed more than a quarter TTL ago or a row expired.
func TestHeartbeatWritesRarely(t *testing.T) {
	cs := &countingStore{Store: NewMemStore()}
	b := ownedBalancer(t, cs, 7)
	l := mustPick(t, b, t0, 0)
	for _, tt := range []struct {
		at         time.Duration
		gets, sets int64
	}{
		{time.Second, 1, 0},
		{2 * time.Second, 1, 0},
		{3 * time.Second, 2, 1}, // > ttl/4 since the pick: refresh (read, then cas write)
		{4 * time.Second, 1, 0},
	} {
		g, s := cs.gets.Load(), cs.sets.Load()
		if err := b.Heartbeat(at(tt.at)); err != nil {
			t.Fatal(err)
		}
		if dg, ds := cs.gets.Load()-g, cs.sets.Load()-s; dg != tt.gets || ds != tt.sets {
			t.Errorf("beat at %v: %d gets %d sets, want %d, %d", tt.at, dg, ds, tt.gets, tt.sets)
		}
	}
	l.Release(at(5 * time.Second))
	// Strategies that keep no counts have nothing to beat.
	rr := newTestBalancer(t, cs, testPool(2, RoundRobin), 1)
	rr.SetOwner(7, ttl)
	g := cs.gets.Load()
	if err := rr.Heartbeat(t0); err != nil || cs.gets.Load() != g {
		t.Errorf("round robin heartbeat: %v, %d gets", err, cs.gets.Load()-g)
	}
}

// TestOwnerRowsBounded: however many VMs come and go, the value keeps at most
// maxOwnerRows rows.
func TestOwnerRowsBounded(t *testing.T) {
	s := NewMemStore()
	var last *Balancer
	for owner := uint64(1); owner <= maxOwnerRows+50; owner++ {
		last = ownedBalancer(t, s, owner)
		mustPick(t, last, at(time.Duration(owner)*time.Millisecond), 0)
	}
	if got := rowsOf(t, s, last); got != maxOwnerRows {
		t.Errorf("%d rows, want %d", got, maxOwnerRows)
	}
	if got := total(inflightOf(last, at(time.Second))); got != maxOwnerRows {
		t.Errorf("in flight %d, want %d (the oldest owners made room)", got, maxOwnerRows)
	}
}

// TestLegacyTotalsKept: a value with totals and no rows (written before owners
// existed, or by a caller without one) keeps counting and is released normally.
func TestLegacyTotalsKept(t *testing.T) {
	s := NewMemStore()
	b := ownedBalancer(t, s, 3)
	old := newInflight(nil, 2)
	old.inc(0)
	if err := s.Set(b.keys.inflight, old, 0); err != nil {
		t.Fatal(err)
	}
	l := mustPick(t, b, at(time.Hour), 0)
	if got := inflightOf(b, at(2*time.Hour)); total(got) != 1 || got[0] != 1 {
		t.Errorf("legacy count lost or pick not expired: %v (picked %d)", got, l.Index)
	}
}

// TestOwnersConcurrent: VMs pick and release concurrently on one store while
// some of them die holding leases; the survivors' heartbeats clear the dead
// ones' counts and, once every survivor released, the pool is back to zero.
func TestOwnersConcurrent(t *testing.T) {
	s := NewMemStore()
	var clock atomic.Int64 // ns since t0, advanced by the test
	now := func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	const vms, rounds = 8, 200
	var wg sync.WaitGroup
	var held atomic.Int64
	for vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := newTestBalancer(t, s, testPool(3, PowerOfTwo), uint64(vm+1))
			b.SetOwner(uint64(vm+1), ttl)
			rng := rand.New(rand.NewPCG(uint64(vm), 1))
			var leases []*Lease
			for range rounds {
				if l, err := b.Pick(now(), 0); err == nil {
					leases = append(leases, l)
				}
				if len(leases) > 0 && rng.IntN(2) == 0 {
					leases[0].Release(now())
					leases = leases[1:]
				}
				_ = b.Heartbeat(now())
			}
			if vm%2 == 0 { // dies holding its leases
				for _, l := range leases {
					if l.counted { // a pick whose write lost every CAS round counts nowhere
						held.Add(1)
					}
				}
				return
			}
			for _, l := range leases {
				l.Release(now())
			}
			// A release whose write lost every CAS round is this VM's
			// debt until its next in-flight write; a survivor that stops
			// here writes it now (bounded: the other VMs finish).
			for tries := 0; b.owed && tries < 1000; tries++ {
				_, ok := b.update(b.keys.inflight, func(cur []byte) []byte {
					v, own := b.live(cur, now().UnixNano(), false)
					b.payDebt(v, own)
					return dropEmpty(v, own)
				})
				b.settleDebt(ok)
			}
			if b.owed {
				t.Errorf("VM %d could not write its releases", vm+1)
			}
		}()
	}
	wg.Wait()
	survivor := newTestBalancer(t, s, testPool(3, PowerOfTwo), 2)
	survivor.SetOwner(2, ttl)
	if got := int64(total(inflightOf(survivor, now()))); got != held.Load() {
		t.Errorf("before expiry: %d in flight, the dead VMs hold %d", got, held.Load())
	}
	clock.Add(int64(ttl + time.Second))
	if err := survivor.Heartbeat(now()); err != nil {
		t.Fatal(err)
	}
	if got := inflightOf(survivor, now()); total(got) != 0 || rowsOf(t, s, survivor) != 0 {
		t.Errorf("after expiry: %v, %d rows", got, rowsOf(t, s, survivor))
	}
}

// TestProbeClaims: with owners, a probe claim lives one owner TTL past its
// last renewal. The probe of a VM that died frees the endpoint's probe slot
// after the TTL (not probeExpiry); a live VM's heartbeats keep a slow probe's
// claim, and its report still decides the endpoint.
func TestProbeClaims(t *testing.T) {
	trip := func(t *testing.T, b *Balancer) {
		for range 3 {
			use(t, b, t0, Failure)
		}
	}
	cooled := 10 * time.Second // the default cool-down
	for _, tt := range []struct {
		name    string
		beats   bool // the prober's VM lives and beats every TTL/4
		at      time.Duration
		want    HealthState
		reclaim bool // another VM's pick at `at` claims a new probe
	}{
		{"dead prober, before the TTL", false, cooled + ttl - time.Millisecond, Probing, false},
		{"dead prober, one TTL after the claim", false, cooled + ttl, ProbeDue, true},
		{"live prober keeps its claim past probeExpiry", true, cooled + probeExpiry + time.Second, Probing, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore()
			prober, other := newTestBalancer(t, s, testPool(1, RoundRobin), 1), newTestBalancer(t, s, testPool(1, RoundRobin), 2)
			prober.SetOwner(1, ttl)
			other.SetOwner(2, ttl)
			trip(t, other)
			probe := mustPick(t, prober, at(cooled), 0)
			if probe.Decision != ByProbe {
				t.Fatalf("first pick after the cool-down: %v", probe.Decision)
			}
			if tt.beats {
				for d := cooled; d <= tt.at; d += ttl / 4 {
					if err := prober.Heartbeat(at(d)); err != nil {
						t.Fatal(err)
					}
				}
			}
			expectHealth(t, other, at(tt.at), 0, tt.want, 3)
			l, err := other.Pick(at(tt.at), 0)
			if got := err == nil && l.Decision == ByProbe; got != tt.reclaim {
				t.Fatalf("other VM's pick: %+v, %v; want a new probe %t", l, err, tt.reclaim)
			}
			if tt.beats {
				if err := probe.Report(at(tt.at), Success); err != nil {
					t.Fatal(err)
				}
				expectHealth(t, other, at(tt.at), 0, Healthy, 0)
				if len(prober.probes) != 0 {
					t.Errorf("%d probes still tracked after the report", len(prober.probes))
				}
			}
		})
	}
}
