package lb

import "time"

// Decision says how a pick chose its endpoint (a metric label).
type Decision uint8

const (
	// ByStrategy: the pool's configured strategy chose.
	ByStrategy Decision = iota
	// ByProbe: the endpoint's cool-down was over and this request is its single
	// half-open probe; its Report decides whether the endpoint comes back.
	ByProbe
	// ByRoundRobinFallback: least_loaded rotated because some usable endpoint had
	// no fresh engine stats.
	ByRoundRobinFallback
)

// String returns the decision's metric label, e.g. "probe".
func (d Decision) String() string {
	switch d {
	case ByStrategy:
		return "strategy"
	case ByProbe:
		return "probe"
	case ByRoundRobinFallback:
		return "round_robin_fallback"
	}
	return "unknown"
}

// Outcome is what a request did to an endpoint, for passive health.
type Outcome uint8

const (
	// Success: the endpoint answered (any status the caller does not count as the
	// endpoint's fault, e.g. 2xx or 4xx).
	Success Outcome = iota
	// Failure: 5xx, reset, connect failure or timeout.
	Failure
)

// String returns the outcome's metric label, e.g. "failure".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	}
	return "abandoned"
}

// Lease is one pick: which endpoint, how it was chosen, and the load it holds until
// released. Its exported fields are read-only; keep the *Lease in one place (the
// request's context) and call Report and Release on it.
type Lease struct {
	// Index is the chosen endpoint's position in PoolConfig.Endpoints.
	Index int
	// Decision says how it was chosen.
	Decision Decision
	// Retries counts the cas mismatches this pick met (contention from other VMs).
	Retries int
	// Unrecorded is true when a shared update of this pick could not be committed
	// within the retry bound (or the store failed): the endpoint was chosen from
	// the last value read, but the rotation, qps window or in-flight count does
	// not include this pick. Release then has nothing to give back.
	Unrecorded bool

	b        *Balancer
	counted  bool  // the in-flight increment was committed
	probeAt  int64 // claim time of a ByProbe lease (unix ns)
	reported bool
	released bool
}

// note accounts for one shared update of this pick.
func (l *Lease) note(retries int, committed bool) {
	l.Retries += retries
	if !committed {
		l.Unrecorded = true
	}
}

// Endpoint returns the chosen endpoint's configuration (read-only).
func (l *Lease) Endpoint() *Endpoint { return &l.b.cfg.Endpoints[l.Index] }

// Report records the request's outcome for passive health, once: later calls, and
// calls on a nil lease, do nothing. Call it as soon as the outcome is known; for a
// probe it is what restores the endpoint (Success) or restarts its cool-down
// (Failure). It returns ErrNotRecorded if the shared update could not be made.
// A zero now reads the clock only if a shared write needs it (see Clock).
func (l *Lease) Report(now time.Time, o Outcome) error {
	if l == nil || l.reported || o > Failure {
		return nil
	}
	l.reported = true
	l.b.dropProbe(l)
	return l.b.recordOutcome(l, o, now)
}

// Release gives back the load the lease holds, once: later calls, and calls on a nil
// lease, do nothing. Release prefill leases when the prefill answers and decode
// leases when the stream ends. A probe released without a Report frees the probe
// slot so that the next pick probes again. If the in-flight count cannot be written
// now (contention), this VM writes it with its next in-flight update. A zero
// now reads the clock only if a shared write needs it (see Clock).
func (l *Lease) Release(now time.Time) {
	if l == nil || l.released {
		return
	}
	l.released = true
	l.b.dropProbe(l)
	if l.counted {
		l.b.release(l.Index, Clock(now))
	}
	if l.Decision == ByProbe && !l.reported {
		_ = l.b.recordOutcome(l, outcomeAbandoned, now) // if lost, probeExpiry frees the slot
	}
}

// Clock is now, or the clock's reading when now is zero. Report and Release
// take a zero time from a caller that has not read the clock: the common
// release (round_robin, nothing counted in flight) and the common report (a
// success with no failure counted anywhere) write nothing and need no time,
// and in a wasm VM a reading is two host calls and their glue.
func Clock(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}
