package plugin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/discovery"
	"github.com/pdroute/pdroute/lb"
)

// Shared-data keys of discovery (under the plugin's prefix). One VM at a time
// holds the lease and polls the companion; it writes the table, then its
// generation; every VM compares the generation with its own on each tick and
// request start, and reloads the table when they differ.
const (
	discoveryLeaseKey = "discovery/lease"
	discoveryGenKey   = "discovery/gen"
	discoveryTableKey = "discovery/table"
	// discoveryLogEvery rate-limits the warning about a failing companion,
	// per VM.
	discoveryLogEvery = 30 * time.Second
)

// follower makes a root follow the discovery companion (config.Discovery).
type follower struct {
	cfg *config.Discovery
	// base is the configuration as parsed; the root's cfg is base with the
	// pools' endpoints replaced by the table's, one per slot.
	base  *config.Config
	table discovery.Table
	// polling: this VM has a poll in flight; next is when it may start one.
	polling bool
	next    time.Time
	// failing: the last poll of this VM failed; suppressed counts warnings
	// not logged since lastWarn.
	failing    bool
	lastWarn   time.Time
	suppressed int
	m          discoveryMetrics
}

type discoveryMetrics struct {
	updates, errors, dropped abi.MetricCounter
	stale                    abi.MetricGauge
	inService, draining      [2]abi.MetricGauge
}

func newFollower(cfg *config.Config) *follower {
	f := &follower{cfg: cfg.Discovery, base: cfg, table: discovery.Initial(cfg)}
	p := metricPrefix + "discovery."
	f.m = discoveryMetrics{
		updates: abi.DefineCounterMetric(p + "updates"),
		errors:  abi.DefineCounterMetric(p + "errors"),
		dropped: abi.DefineCounterMetric(p + "dropped_endpoints"),
		stale:   abi.DefineGaugeMetric(p + "stale"),
	}
	for i, pool := range []string{"prefill", "decode"} {
		f.m.inService[i] = abi.DefineGaugeMetric(p + "endpoints." + pool)
		f.m.draining[i] = abi.DefineGaugeMetric(p + "draining." + pool)
	}
	return f
}

// setGauge sets a gauge shared by the VMs of a proxy to v.
func setGauge(g abi.MetricGauge, v int64) {
	if d := v - g.Value(); d != 0 {
		g.Add(d)
	}
}

// newDynamicBalancers builds the roots' balancers over the initial table.
func (r *rootContext) newDynamicBalancers(cfg *config.Config) error {
	var err error
	for _, p := range []struct {
		name string
		pool *config.Pool
		dst  **lb.Balancer
	}{{"prefill", &cfg.Prefill, &r.prefill}, {"decode", &cfg.Decode, &r.decode}} {
		if *p.dst, err = lb.NewDynamic(p.name, p.pool.Balancing(), r.store, r.rng); err != nil {
			return err
		}
	}
	return nil
}

// refresh loads the shared table when its generation is not this VM's.
func (f *follower) refresh(r *rootContext) {
	v, _, err := r.store.Get(discoveryGenKey)
	if err != nil || len(v) != 8 || binary.LittleEndian.Uint64(v) == f.table.Gen {
		return
	}
	gen := binary.LittleEndian.Uint64(v)
	data, _, err := r.store.Get(discoveryTableKey)
	if err != nil {
		return
	}
	t, err := discovery.Decode(data)
	if err != nil || t.Gen != gen {
		return // a write in between, or garbage: the next refresh reads again
	}
	f.apply(r, t)
}

// apply makes t the table this VM routes by: the balancers' slots and the
// root's configuration change together, so a pick's slot always indexes the
// endpoint list of the configuration it was picked from. Streams keep the
// endpoint they picked, never the list.
func (f *follower) apply(r *rootContext, t discovery.Table) {
	if err := r.prefill.SetEndpoints(t.Prefill.Balancing()); err != nil {
		abi.LogWarnf("pdroute: discovery: prefill table rejected: %v", err)
		return
	}
	if err := r.decode.SetEndpoints(t.Decode.Balancing()); err != nil {
		_ = r.prefill.SetEndpoints(f.table.Prefill.Balancing())
		abi.LogWarnf("pdroute: discovery: decode table rejected: %v", err)
		return
	}
	cfg := *f.base
	cfg.Prefill.Endpoints = t.Prefill.Endpoints()
	cfg.Decode.Endpoints = t.Decode.Endpoints()
	r.cfg = &cfg
	if r.px != nil {
		r.px.setEndpoints(&cfg)
	}
	f.table = t
}

// tick starts a poll when this VM may (none in flight, the pause after a
// failure passed) and holds the discovery lease, which it renews while
// polling.
func (f *follower) tick(r *rootContext, now time.Time) {
	f.refresh(r)
	if f.polling {
		r.holdLease(discoveryLeaseKey, now, f.leaseTTL())
		return
	}
	if now.Before(f.next) {
		return
	}
	f.poll(r, now)
}

func (f *follower) leaseTTL() time.Duration { return f.cfg.Wait + 3*time.Second }

// poll asks the companion, if this VM holds the lease.
func (f *follower) poll(r *rootContext, now time.Time) {
	if !r.holdLease(discoveryLeaseKey, now, f.leaseTTL()) {
		return
	}
	f.next = now.Add(f.cfg.PollInterval)
	path := f.cfg.Path + "?version=" + strconv.FormatInt(f.table.Version, 10) +
		"&wait_ms=" + strconv.FormatInt(f.cfg.Wait.Milliseconds(), 10)
	headers := [][2]string{{":method", "GET"}, {":path", path}, {":authority", "pdroute-discovery"}}
	timeout := uint32((f.cfg.Wait + 2*time.Second) / time.Millisecond)
	asked, started := f.table.Version, now
	_, err := abi.DispatchHttpCall(f.cfg.Cluster, headers, nil, nil, timeout, func(numHeaders, bodySize, _ int) {
		f.polling = false
		now := time.Now()
		good := f.answer(r, readCallAnswer(numHeaders, bodySize), now)
		// An answer that came back at once with the version asked for is
		// not a long poll (a companion that does not wait): pace it.
		quickSame := f.table.Version == asked && now.Sub(started) < f.cfg.PollInterval
		if !good || f.cfg.Wait == 0 || quickSame {
			f.next = now.Add(f.cfg.PollInterval)
			return
		}
		// A long poll answered: ask again at once (the companion holds the
		// next ask until something changes), so that a change right after
		// this one waits for neither a tick nor the poll interval.
		f.poll(r, now)
	})
	if err != nil {
		f.fail(now, fmt.Sprintf("dispatch to cluster %s: %v", f.cfg.Cluster, err))
		return
	}
	f.polling = true
}

// answer handles the companion's answer: a good one becomes the next table
// (written to shared data if anything changed), anything else keeps the last
// good table. It reports whether the answer was good.
func (f *follower) answer(r *rootContext, a callAnswer, now time.Time) bool {
	switch {
	case a.status == 0:
		f.fail(now, "no answer (reset or timeout)")
		return false
	case a.status != 200:
		f.fail(now, fmt.Sprintf("status %d", a.status))
		return false
	}
	d, err := f.base.ParseDiscovered(a.body)
	if err != nil {
		f.fail(now, "bad answer: "+err.Error())
		return false
	}
	if f.failing {
		abi.LogInfof("pdroute: discovery: companion answers again (version %d)", d.Version)
		f.failing = false
	}
	setGauge(f.m.stale, 0) // another VM may have been the one that failed
	if len(d.Dropped) > 0 {
		f.m.dropped.Increment(uint64(len(d.Dropped)))
		f.warn(now, fmt.Sprintf("%d discovered endpoints left out, first: %s", len(d.Dropped), d.Dropped[0]))
	}
	// Build on the shared table (another VM may have written since this
	// VM's last refresh), and write only over the value read.
	prev, cas := f.table, uint32(0)
	if data, c, err := r.store.Get(discoveryTableKey); err == nil {
		if t, err := discovery.Decode(data); err == nil {
			prev, cas = t, c
		}
	} else if !errors.Is(err, lb.ErrNotFound) {
		return true
	}
	busy := func(pool string, slot int) bool {
		if pool == "prefill" {
			return r.prefill.Inflight(slot) > 0
		}
		return r.decode.Inflight(slot) > 0
	}
	next, reset, changed := discovery.Next(prev, d, busy, now)
	if !changed && next.Version == prev.Version {
		if prev.Gen != f.table.Gen {
			f.apply(r, prev)
		}
		return true
	}
	if err := r.store.Set(discoveryTableKey, next.Encode(), cas); err != nil {
		return true // another VM wrote: its table wins, this VM reads it next tick
	}
	var gen [8]byte
	binary.LittleEndian.PutUint64(gen[:], next.Gen)
	if err := overwrite(r.store, discoveryGenKey, gen[:]); err != nil {
		abi.LogWarnf("pdroute: discovery: write generation: %v", err)
	}
	old := f.table
	f.apply(r, next)
	if err := r.prefill.ResetSlots(reset[0]); err != nil {
		abi.LogDebugf("pdroute: discovery: reset prefill slots: %v", err)
	}
	if err := r.decode.ResetSlots(reset[1]); err != nil {
		abi.LogDebugf("pdroute: discovery: reset decode slots: %v", err)
	}
	f.m.updates.Increment(1)
	for i, p := range []discovery.Pool{next.Prefill, next.Decode} {
		setGauge(f.m.inService[i], int64(p.InService()))
		setGauge(f.m.draining[i], int64(p.Draining()))
	}
	if changed {
		abi.LogInfof("pdroute: discovery: version %d: prefill %s, decode %s", next.Version,
			change(old.Prefill, next.Prefill), change(old.Decode, next.Decode))
	}
	return true
}

// change describes a pool's change for the log: "3 (+1 -0, 1 draining)".
func change(old, next discovery.Pool) string {
	was := map[string]bool{}
	for _, s := range old {
		if s.Endpoint != nil {
			was[s.Endpoint.Name] = true
		}
	}
	added, stayed := 0, 0
	for _, s := range next {
		if s.Endpoint == nil {
			continue
		}
		if was[s.Endpoint.Name] {
			stayed++
		} else {
			added++
		}
	}
	return fmt.Sprintf("%d (+%d -%d, %d draining)", next.InService(), added, len(was)-stayed, next.Draining())
}

// fail counts a failed poll; the filter keeps routing by the last good table.
func (f *follower) fail(now time.Time, why string) {
	f.m.errors.Increment(1)
	if !f.failing {
		setGauge(f.m.stale, 1)
	}
	f.failing = true
	f.warn(now, "companion unavailable, routing by the last good sets (version "+
		strconv.FormatInt(f.table.Version, 10)+"): "+why)
}

// warn logs at most once per discoveryLogEvery per VM.
func (f *follower) warn(now time.Time, msg string) {
	if !f.lastWarn.IsZero() && now.Sub(f.lastWarn) < discoveryLogEvery {
		f.suppressed++
		return
	}
	if f.suppressed > 0 {
		msg += fmt.Sprintf(" (%d similar warnings suppressed)", f.suppressed)
	}
	abi.LogWarnf("pdroute: discovery: %s", msg)
	f.lastWarn, f.suppressed = now, 0
}

// holdLease takes or renews a shared-data lease for this root: value = owner
// instance (8 bytes) + expiry in Unix ns (8 bytes), written with CAS.
func (r *rootContext) holdLease(key string, now time.Time, ttl time.Duration) bool {
	v, cas, err := r.store.Get(key)
	switch {
	case errors.Is(err, lb.ErrNotFound):
		cas = 0
	case err != nil:
		return false
	case len(v) == 16:
		owner, expiry := binary.LittleEndian.Uint64(v), int64(binary.LittleEndian.Uint64(v[8:]))
		if owner != r.instance && now.UnixNano() < expiry {
			return false
		}
	}
	var nv [16]byte
	binary.LittleEndian.PutUint64(nv[:], r.instance)
	binary.LittleEndian.PutUint64(nv[8:], uint64(now.Add(ttl).UnixNano()))
	return r.store.Set(key, nv[:], cas) == nil
}
