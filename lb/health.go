package lb

import (
	"math"
	"time"
)

// HealthState is an endpoint's passive-health state at some instant.
type HealthState uint8

const (
	// Healthy endpoints are usable (they may have fewer than failure_threshold
	// consecutive failures recorded).
	Healthy HealthState = iota
	// CoolingDown endpoints failed failure_threshold times in a row and are skipped
	// until their cool-down ends.
	CoolingDown
	// ProbeDue endpoints ended their cool-down; the next pick of any VM claims them
	// as the half-open probe.
	ProbeDue
	// Probing endpoints have one probe request outstanding and are skipped until it
	// reports.
	Probing
)

// String returns the state's metric label, e.g. "cooling_down".
func (h HealthState) String() string {
	switch h {
	case Healthy:
		return "healthy"
	case CoolingDown:
		return "cooling_down"
	case ProbeDue:
		return "probe_due"
	case Probing:
		return "probing"
	}
	return "unknown"
}

// state classifies entry e at time t (unix ns).
func (b *Balancer) state(e healthEntry, t int64) HealthState {
	switch e.state {
	case healthOpen:
		// A cool-down end beyond one cool-down from now cannot have been written by
		// this configuration (garbage, or a shortened cooldown_ms): not trusted.
		if t >= e.at || e.at-t > int64(b.cfg.Cooldown) {
			return ProbeDue
		}
		return CoolingDown
	case healthProbing:
		if exp := b.probeTTL(); t-e.at >= exp || e.at-t > exp {
			return ProbeDue
		}
		return Probing
	}
	return Healthy
}

// decodeHealth loads cur into b.health, all healthy when cur is absent or garbage,
// and reports whether any endpoint has a health entry.
func (b *Balancer) decodeHealth(cur []byte) bool {
	if b.dynamic {
		if hasHeader(cur, kindHealth, healthHeader) {
			if n := int(le.Uint16(cur[2:])); n > b.n() && n <= MaxSlots {
				b.grow(n)
			}
		}
		return parseHealthUpTo(cur, b.health) && len(cur) > healthHeader
	}
	return parseHealth(cur, b.health) && len(cur) > healthHeader
}

// noHealth reports whether a read of the health key (cur, err of store.Get)
// holds no entry: the key was never written, or, for a fixed pool, its value
// has none. Every endpoint is then healthy with no failure counted, as
// decodeHealth would find, and the common pick and report need not decode it
// (every reader of b.health decodes first). A dynamic pool's value may also
// announce more slots (decodeHealth grows the pool): it is always decoded.
func (b *Balancer) noHealth(cur []byte, err error) bool {
	if err != nil {
		return err == ErrNotFound
	}
	return !b.dynamic && len(cur) <= healthHeader
}

// loadHealth sets b.usable to the endpoints usable at now and, if one is ProbeDue,
// claims it as the probe for this pick (one claim wins across VMs: the claim is a
// cas write). It returns the claimed endpoint or -1.
func (b *Balancer) loadHealth(now time.Time, l *Lease) int {
	if b.cfg.FailureThreshold == 0 {
		b.usable = b.all
		return -1
	}
	cur, cas, err := b.kept.Read(b.keys.health)
	if b.noHealth(cur, err) {
		b.usable = b.all // the common case: every endpoint healthy
		return -1
	}
	t := now.UnixNano()
	probe := -1
	r, ok := b.updateFrom(b.keys.health, cur, cas, err, func(cur []byte) []byte {
		probe = -1
		if !b.decodeHealth(cur) {
			b.usable = b.all // the common case: every endpoint healthy
			return nil
		}
		usable := b.usableBuf[:0]
		for _, i := range b.all {
			switch b.state(b.health[i], t) {
			case Healthy:
				usable = append(usable, i)
			case ProbeDue:
				if probe < 0 {
					probe = i
				}
			}
		}
		b.usable, b.usableBuf = usable, usable
		if probe < 0 {
			return nil
		}
		b.health[probe] = healthEntry{failures: b.health[probe].failures, state: healthProbing, at: t}
		b.buf = appendHealth(b.buf[:0], b.health)
		return b.buf
	})
	l.Retries += r
	if !ok {
		return -1 // the claim was not committed: route among the usable ones
	}
	return probe
}

// outcomeAbandoned is what a probe lease released without a report counts as.
const outcomeAbandoned Outcome = math.MaxUint8

// nextHealth returns endpoint state e after lease l's outcome o at t (unix ns), and
// false when the outcome changes nothing.
func (b *Balancer) nextHealth(e healthEntry, l *Lease, o Outcome, t int64) (healthEntry, bool) {
	failed := healthEntry{failures: e.failures, state: healthOpen, at: t + int64(b.cfg.Cooldown)}
	if e.failures < math.MaxUint16 {
		failed.failures++
	}
	if l.Decision == ByProbe {
		if e.state != healthProbing || e.at != l.probeAt {
			return e, false // not this lease's probe any more
		}
		switch o {
		case Success:
			return healthEntry{}, true
		case Failure:
			return failed, true
		}
		return healthEntry{failures: e.failures, state: healthOpen, at: t}, true // probe again
	}
	if e.state != healthCounting {
		return e, false // only the probe decides an endpoint that is out
	}
	switch o {
	case Success:
		return healthEntry{}, e.failures != 0
	case Failure:
		if int(failed.failures) >= b.cfg.FailureThreshold {
			return failed, true
		}
		return healthEntry{failures: failed.failures}, true
	}
	return e, false
}

// recordOutcome applies lease l's outcome to the shared health.
func (b *Balancer) recordOutcome(l *Lease, o Outcome, now time.Time) error {
	if b.cfg.FailureThreshold == 0 {
		return nil
	}
	cur, cas, err := b.kept.Read(b.keys.health)
	if o == Success && l.Decision != ByProbe && b.noHealth(cur, err) {
		return nil // no failure counted anywhere: a success changes nothing
	}
	t := Clock(now).UnixNano()
	_, ok := b.updateFrom(b.keys.health, cur, cas, err, func(cur []byte) []byte {
		b.decodeHealth(cur)
		next, changed := b.nextHealth(b.health[l.Index], l, o, t)
		if !changed {
			return nil
		}
		b.health[l.Index] = next
		b.buf = appendHealth(b.buf[:0], b.health)
		return b.buf
	})
	if !ok {
		return ErrNotRecorded
	}
	return nil
}
