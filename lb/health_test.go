package lb

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// expectHealth checks endpoint i's snapshot at now.
func expectHealth(t *testing.T, b *Balancer, now time.Time, i int, want HealthState, failures int) {
	t.Helper()
	e := b.Snapshot(now)[i]
	if e.Health != want || e.ConsecutiveFailures != failures {
		t.Fatalf("at %v endpoint %d is %v with %d failures; want %v with %d",
			now.Sub(t0), i, e.Health, e.ConsecutiveFailures, want, failures)
	}
}

func expectNoEndpoint(t *testing.T, b *Balancer, now time.Time) {
	t.Helper()
	if l, err := b.Pick(now, 0); !errors.Is(err, ErrNoEndpoint) || l != nil {
		t.Fatalf("at %v Pick = %+v, %v; want ErrNoEndpoint", now.Sub(t0), l, err)
	}
}

// use picks at now, reports o and releases, and returns the lease.
func use(t *testing.T, b *Balancer, now time.Time, o Outcome) *Lease {
	t.Helper()
	l := mustPick(t, b, now, 0)
	if err := l.Report(now, o); err != nil {
		t.Fatal(err)
	}
	l.Release(now)
	return l
}

func TestHealthTransitions(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(1, RoundRobin), 1) // threshold 3, cool-down 10s
	s := time.Second

	use(t, b, at(0), Failure)
	use(t, b, at(1*s), Failure)
	expectHealth(t, b, at(1*s), 0, Healthy, 2)
	use(t, b, at(2*s), Success) // not three in a row: reset
	expectHealth(t, b, at(2*s), 0, Healthy, 0)
	use(t, b, at(3*s), Failure)
	use(t, b, at(4*s), Failure)
	use(t, b, at(5*s), Failure) // third in a row: cool-down until 15s
	expectHealth(t, b, at(5*s), 0, CoolingDown, 3)
	expectNoEndpoint(t, b, at(14900*time.Millisecond))
	expectHealth(t, b, at(15*s), 0, ProbeDue, 3)

	probe := mustPick(t, b, at(15*s), 0)
	if probe.Decision != ByProbe {
		t.Fatalf("first pick after the cool-down: decision %v, want probe", probe.Decision)
	}
	expectHealth(t, b, at(15*s), 0, Probing, 3)
	expectNoEndpoint(t, b, at(15*s)) // one probe at a time
	expectNoEndpoint(t, b, at(60*s))
	if err := probe.Report(at(16*s), Failure); err != nil { // restarts the cool-down
		t.Fatal(err)
	}
	probe.Release(at(16 * s))
	expectHealth(t, b, at(16*s), 0, CoolingDown, 4)
	expectNoEndpoint(t, b, at(25900*time.Millisecond))

	probe = mustPick(t, b, at(26*s), 0)
	if probe.Decision != ByProbe {
		t.Fatalf("second probe: decision %v", probe.Decision)
	}
	if err := probe.Report(at(27*s), Success); err != nil {
		t.Fatal(err)
	}
	expectHealth(t, b, at(27*s), 0, Healthy, 0)
	if l := use(t, b, at(27*s), Success); l.Decision != ByStrategy {
		t.Fatalf("after recovery: decision %v", l.Decision)
	}
	probe.Release(at(28 * s)) // a reported probe's release leaves health alone
	expectHealth(t, b, at(28*s), 0, Healthy, 0)
}

func TestHealthThresholdOne(t *testing.T) {
	cfg := testPool(1, RoundRobin)
	cfg.FailureThreshold = 1
	b := newTestBalancer(t, NewMemStore(), cfg, 1)
	use(t, b, at(0), Failure)
	expectHealth(t, b, at(0), 0, CoolingDown, 1)
}

func TestHealthRoutesAroundAndRecovers(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(3, RoundRobin), 1)
	var onOne []*Lease // three leases on endpoint 1, failed once each
	for len(onOne) < 3 {
		if l := mustPick(t, b, t0, 0); l.Index == 1 {
			onOne = append(onOne, l)
		}
	}
	for _, l := range onOne {
		if err := l.Report(t0, Failure); err != nil {
			t.Fatal(err)
		}
	}
	var leases []*Lease
	for range 10 {
		leases = append(leases, mustPick(t, b, at(time.Second), 0))
	}
	if got := counts(3, leases); !slices.Equal(got, []int{5, 0, 5}) {
		t.Fatalf("picks while endpoint 1 cools down: %v, want [5 0 5]", got)
	}
	probe := mustPick(t, b, at(10*time.Second), 0)
	if probe.Index != 1 || probe.Decision != ByProbe {
		t.Fatalf("pick at cool-down end: endpoint %d %v; want the probe of 1", probe.Index, probe.Decision)
	}
	if l := mustPick(t, b, at(10*time.Second), 0); l.Index == 1 {
		t.Fatal("a second request reached the endpoint under probe")
	}
	if err := probe.Report(at(11*time.Second), Success); err != nil {
		t.Fatal(err)
	}
	leases = leases[:0]
	for range 9 {
		leases = append(leases, mustPick(t, b, at(12*time.Second), 0))
	}
	if got := counts(3, leases); !slices.Equal(got, []int{3, 3, 3}) {
		t.Fatalf("after recovery: %v, want [3 3 3]", got)
	}
}

func TestHealthStaleReports(t *testing.T) {
	b := newTestBalancer(t, NewMemStore(), testPool(1, RoundRobin), 1)
	early := mustPick(t, b, at(0), 0) // dispatched before the endpoint trips
	use(t, b, at(0), Failure)
	use(t, b, at(0), Failure)
	use(t, b, at(0), Failure)
	// A request that was in flight reports while the endpoint is out: only the
	// probe decides, so neither outcome moves the state.
	if err := early.Report(at(1*time.Second), Success); err != nil {
		t.Fatal(err)
	}
	expectHealth(t, b, at(1*time.Second), 0, CoolingDown, 3)

	// A probe released without a report frees the slot: the next pick probes again.
	p1 := mustPick(t, b, at(10*time.Second), 0)
	p1.Release(at(10 * time.Second))
	expectHealth(t, b, at(10*time.Second), 0, ProbeDue, 3)
	p2 := mustPick(t, b, at(11*time.Second), 0)
	if p2.Decision != ByProbe {
		t.Fatalf("after an abandoned probe: %v", p2.Decision)
	}
	// p2's VM dies: no report, no release. After probeExpiry another probe goes.
	expectNoEndpoint(t, b, at(11*time.Second+probeExpiry-time.Millisecond))
	p3 := mustPick(t, b, at(11*time.Second+probeExpiry), 0)
	if p3.Decision != ByProbe {
		t.Fatalf("after probe expiry: %v", p3.Decision)
	}
	// p2 reporting late must not decide for p3.
	if err := p2.Report(at(12*time.Second+probeExpiry), Success); err != nil {
		t.Fatal(err)
	}
	expectHealth(t, b, at(12*time.Second+probeExpiry), 0, Probing, 3)
	if err := p3.Report(at(12*time.Second+probeExpiry), Success); err != nil {
		t.Fatal(err)
	}
	expectHealth(t, b, at(12*time.Second+probeExpiry), 0, Healthy, 0)
}

// TestProbeSingleAcrossVMs: VMs racing at the end of a cool-down send exactly one
// probe between them, round after round. Run with -race.
func TestProbeSingleAcrossVMs(t *testing.T) {
	const vms, rounds = 8, 20
	s := NewMemStore()
	cfg := testPool(1, RoundRobin)
	cfg.FailureThreshold = 1
	var balancers []*Balancer
	for v := range vms {
		balancers = append(balancers, newTestBalancer(t, s, cfg, uint64(v)))
	}
	use(t, balancers[0], at(0), Failure) // cooling down until 10s
	for round := range rounds {
		now := at(time.Duration(round+1) * 10 * time.Second)
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			probes []*Lease
			none   int
		)
		start := make(chan struct{})
		for _, b := range balancers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := b.Pick(now, 0)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, ErrNoEndpoint):
					none++
				case err == nil && l.Decision == ByProbe:
					probes = append(probes, l)
				default:
					t.Errorf("round %d: Pick = %+v, %v", round, l, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(probes) != 1 || none != vms-1 {
			t.Fatalf("round %d: %d probes and %d refusals, want 1 and %d", round, len(probes), none, vms-1)
		}
		if err := probes[0].Report(now, Failure); err != nil { // cool down again
			t.Fatal(err)
		}
		probes[0].Release(now)
	}
}

func TestHealthDisabled(t *testing.T) {
	cfg := testPool(1, RoundRobin)
	cfg.FailureThreshold = 0
	s := NewMemStore()
	b := newTestBalancer(t, s, cfg, 1)
	for range 10 {
		use(t, b, t0, Failure)
	}
	expectHealth(t, b, t0, 0, Healthy, 0)
	if _, _, err := s.Get(b.keys.health); !errors.Is(err, ErrNotFound) {
		t.Fatalf("health key written with health disabled: %v", err)
	}
}

func TestHealthStateStrings(t *testing.T) {
	got := []string{Healthy.String(), CoolingDown.String(), ProbeDue.String(), Probing.String(), HealthState(9).String(),
		ByStrategy.String(), ByProbe.String(), ByRoundRobinFallback.String(), Decision(9).String(),
		Success.String(), Failure.String(), outcomeAbandoned.String()}
	want := []string{"healthy", "cooling_down", "probe_due", "probing", "unknown",
		"strategy", "probe", "round_robin_fallback", "unknown", "success", "failure", "abandoned"}
	if !slices.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
}

// A zero time given to Report and Release is the clock's reading when the
// lease writes (Clock): a failure starts a cool-down from now, not from year
// 1, and a counted release keeps its owner's row alive.
func TestZeroTimeReadsClock(t *testing.T) {
	cfg := testPool(1, RoundRobin)
	cfg.FailureThreshold = 1
	b := newTestBalancer(t, NewMemStore(), cfg, 1)
	l := mustPick(t, b, time.Now(), 0)
	if err := l.Report(time.Time{}, Failure); err != nil {
		t.Fatal(err)
	}
	l.Release(time.Time{})
	expectHealth(t, b, time.Now(), 0, CoolingDown, 1)

	store := NewMemStore()
	b = newTestBalancer(t, store, testPool(2, LeastLoaded), 1)
	b.SetOwner(7, time.Minute)
	other := newTestBalancer(t, store, testPool(2, LeastLoaded), 2)
	other.SetOwner(8, time.Minute)
	kept := mustPick(t, other, time.Now(), 0)
	for range 3 {
		mustPick(t, b, time.Now(), 0).Release(time.Time{})
	}
	if got := b.Inflight(kept.Index); got != 1 {
		t.Fatalf("in flight on %d after zero-time releases: %d, want the other VM's 1", kept.Index, got)
	}
}
