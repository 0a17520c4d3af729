package lb

import (
	"fmt"
	"math"
	"time"
)

// PutStats stores endpoint i's engine stats, observed at observed, in the shared
// store, where every VM's least_loaded and power_of_two picks read them until they
// are older than stats_max_age. The filter calls it after scraping /metrics (see
// [ParseMetrics]). It returns ErrNotRecorded if the write could not be committed.
func (b *Balancer) PutStats(i int, s EngineStats, observed time.Time) error {
	if i < 0 || i >= b.n() || b.cfg.Endpoints[i].Name == "" {
		return fmt.Errorf("lb: endpoint index %d out of range [0, %d) or not in the pool", i, b.n())
	}
	for _, x := range [3]float64{s.Running, s.Waiting, s.KVCacheUsage} {
		if !(x >= 0) || math.IsInf(x, 1) {
			return fmt.Errorf("lb: engine stats must be finite and >= 0, got %+v", s)
		}
	}
	t := observed.UnixNano()
	_, ok := b.update(b.keys.stats, func(cur []byte) []byte {
		v, valid := parseStats(cur)
		switch {
		case !valid || !b.fits(v.len()):
			b.buf = newStats(b.buf, b.n())
			v = statsView(b.buf)
		case v.len() < b.n():
			b.buf = widenStats(b.buf, v, b.n())
			v = statsView(b.buf)
		}
		v.set(i, s, t)
		return v
	})
	if !ok {
		return ErrNotRecorded
	}
	return nil
}

// EndpointState is the shared state of one endpoint as a VM reads it, for metrics,
// debugging and the scraper (which can skip endpoints whose stats are still fresh).
type EndpointState struct {
	// Name is the endpoint's configured name.
	Name string
	// Health and ConsecutiveFailures: passive health (Healthy and 0 when disabled).
	Health              HealthState
	ConsecutiveFailures int
	// Inflight: pdroute's in-flight requests (kept by least_loaded, power_of_two and
	// prefix_affinity; 0 for the other strategies).
	Inflight uint32
	// RecentRequests: requests started within the qps window (qps only).
	RecentRequests uint32
	// Stats and StatsObserved: the last stored engine stats and when they were
	// observed (zero time if never); StatsFresh says whether picks at now use them.
	Stats         EngineStats
	StatsObserved time.Time
	StatsFresh    bool
}

// CountsInflight reports whether the pool keeps in-flight counts (its
// strategy reads them: least_loaded, power_of_two, prefix_affinity);
// Snapshot's Inflight is always 0 otherwise.
func (b *Balancer) CountsInflight() bool { return b.cfg.Strategy.countsInflight() }

// CountsRecent reports whether the pool keeps the qps window (qps only);
// Snapshot's RecentRequests is always 0 otherwise.
func (b *Balancer) CountsRecent() bool { return b.cfg.Strategy == QPS }

// Snapshot reads the pool's shared state at now, one entry per endpoint in
// configuration order (a dynamic pool: one per slot, with an empty Name for a
// free or draining slot). Unreadable values read as their zero state.
func (b *Balancer) Snapshot(now time.Time) []EndpointState {
	out := make([]EndpointState, b.n())
	var health []byte
	if b.cfg.FailureThreshold > 0 {
		health = b.read(b.keys.health)
	}
	b.decodeHealth(health)
	t := now.UnixNano()
	var inflight inflightView
	if cur := b.read(b.keys.inflight); cur != nil {
		inflight, _ = b.live(cur, t, false) // expired owners' counts left out
	}
	var window qpsView
	if cur := b.read(b.keys.qps); cur != nil {
		window = b.qpsWindow(cur, b.qpsBucket(now))
	}
	stats := b.loadStats()
	for i := range out {
		e := &out[i]
		e.Name = b.cfg.Endpoints[i].Name
		e.Health = b.state(b.health[i], t)
		e.ConsecutiveFailures = int(b.health[i].failures)
		if inflight != nil && i < inflight.len() && b.fits(inflight.len()) {
			e.Inflight = inflight.get(i)
		}
		if window != nil && i < window.len() {
			e.RecentRequests = window.total(i)
		}
		if stats != nil && i < stats.len() {
			var observed int64
			e.Stats, observed = stats.get(i)
			if observed != 0 {
				e.StatsObserved = time.Unix(0, observed)
			}
			e.StatsFresh = b.fresh(observed, t)
		}
	}
	return out
}
