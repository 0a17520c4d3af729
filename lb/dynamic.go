package lb

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// MaxSlots bounds the slots of a dynamic pool: MaxEndpoints in service plus as
// many draining. Every shared value of a dynamic pool is at most this wide
// (in-flight 4 KiB, engine stats 20 KiB, the qps window 24 KiB), whatever
// number of endpoints came and went.
const MaxSlots = 2 * MaxEndpoints

// NewDynamic returns the balancer of a pool whose endpoints change at run time
// (discovered endpoints). It starts with cfg.Endpoints, which may be empty;
// [Balancer.SetEndpoints] replaces them.
//
// Endpoints of a dynamic pool are indexed by slot: cfg.Endpoints[i] is slot i,
// and an entry with an empty name is a slot not in service (free, or draining
// an endpoint that left). Shared state is kept per slot under
// "lb/<pool>/dyn/<kind>", so an endpoint that keeps its slot across a change of
// the set keeps its in-flight count, health, engine stats and qps window, and
// the rotation counter is the pool's. Whoever assigns slots (the filter's
// discovery glue, all VMs agreeing through shared data) must not give a slot
// to a new endpoint while requests of the old one may still be on it, and must
// clear it with [Balancer.ResetSlots] when it does.
//
// A Lease of a dynamic pool names its slot (Lease.Index); releasing it after
// the endpoint left gives the count back to that slot, which is what lets the
// assigner see when a departed endpoint has drained.
func NewDynamic(pool string, cfg PoolConfig, store Store, src rand.Source) (*Balancer, error) {
	if pool == "" || strings.Contains(pool, "/") {
		return nil, fmt.Errorf("lb: pool name %q must be non-empty and contain no '/'", pool)
	}
	if store == nil || src == nil {
		return nil, errors.New("lb: store and random source are required")
	}
	eps := cfg.Endpoints
	cfg.Endpoints = nil
	if err := cfg.validateSettings(); err != nil {
		return nil, err
	}
	b := &Balancer{cfg: cfg, store: store, rng: rand.New(src), dynamic: true}
	b.readers(store)
	b.setKeys(fmt.Sprintf("lb/%s/dyn/", pool))
	if err := b.SetEndpoints(eps); err != nil {
		return nil, err
	}
	return b, nil
}

// SetEndpoints replaces a dynamic pool's endpoints, indexed by slot (see
// [NewDynamic]). At most MaxSlots slots and MaxEndpoints named endpoints,
// names unique. Per-slot memory only grows (to the widest set seen, at most
// MaxSlots), so a VM's heap is bounded whatever the churn.
func (b *Balancer) SetEndpoints(eps []Endpoint) error {
	if !b.dynamic {
		return errors.New("lb: SetEndpoints on a pool that is not dynamic")
	}
	if len(eps) > MaxSlots {
		return &FieldError{"endpoints", fmt.Sprintf("at most %d slots, have %d", MaxSlots, len(eps))}
	}
	seen := make(map[string]int, len(eps))
	for i, e := range eps {
		if e.Name == "" {
			continue
		}
		if j, dup := seen[e.Name]; dup {
			return &FieldError{fmt.Sprintf("endpoints[%d].name", i), fmt.Sprintf("%q already names endpoints[%d]", e.Name, j)}
		}
		seen[e.Name] = i
	}
	if len(seen) > MaxEndpoints {
		return &FieldError{"endpoints", fmt.Sprintf("at most %d endpoints in service, have %d", MaxEndpoints, len(seen))}
	}
	n := max(len(eps), b.n())
	b.cfg.Endpoints = append(b.cfg.Endpoints[:0], eps...)
	for len(b.cfg.Endpoints) < n {
		b.cfg.Endpoints = append(b.cfg.Endpoints, Endpoint{})
	}
	b.grow(n)
	b.all = b.all[:0]
	for i, e := range b.cfg.Endpoints {
		b.nameHash[i] = 0
		if e.Name == "" {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(e.Name))
		b.nameHash[i] = Mix64(h.Sum64())
		b.all = append(b.all, i)
	}
	if cap(b.usableBuf) < len(b.all) {
		b.usableBuf = make([]int, 0, len(b.all))
	}
	b.usable = nil
	return nil
}

// Dynamic reports whether the pool was made by NewDynamic.
func (b *Balancer) Dynamic() bool { return b.dynamic }

// n is the width of the pool's per-endpoint state: its endpoints, or for a
// dynamic pool its slots.
func (b *Balancer) n() int { return len(b.cfg.Endpoints) }

// fits reports whether a shared value of width n can be used: the pool's own
// width, or for a dynamic pool any width up to MaxSlots (a narrower one is
// widened; a wider one, written by a VM that already knows more slots, widens
// this VM's state first).
func (b *Balancer) fits(n int) bool {
	if !b.dynamic {
		return n == b.n()
	}
	if n > MaxSlots {
		return false
	}
	if n > b.n() {
		b.grow(n)
	}
	return true
}

// grow widens the per-slot state of a dynamic pool to n slots; the new slots
// are not in service.
func (b *Balancer) grow(n int) {
	for len(b.cfg.Endpoints) < n {
		b.cfg.Endpoints = append(b.cfg.Endpoints, Endpoint{})
	}
	growTo(&b.nameHash, n)
	growTo(&b.health, n)
	growTo(&b.engineLoad, n)
	growTo(&b.debt, n)
}

func growTo[T any](s *[]T, n int) {
	if len(*s) < n {
		*s = append(*s, make([]T, n-len(*s))...)
	}
}

// ResetSlots clears the shared state of the given slots (in-flight count,
// health, engine stats, qps window) before they serve a new endpoint. The
// slot assigner calls it once per reassignment; it returns ErrNotRecorded if
// a value could not be written (contention), and the caller may retry.
func (b *Balancer) ResetSlots(slots []int) error {
	if !b.dynamic || len(slots) == 0 {
		return nil
	}
	for _, s := range slots {
		if s < 0 || s >= MaxSlots {
			return fmt.Errorf("lb: slot %d out of range [0, %d)", s, MaxSlots)
		}
		if s >= b.n() {
			b.grow(s + 1)
		}
	}
	ok := true
	_, c := b.update(b.keys.inflight, func(cur []byte) []byte {
		v, valid := parseInflight(cur)
		if !valid || !b.fits(v.len()) {
			return nil
		}
		if v.len() < b.n() {
			v = b.widenInflight(v)
		}
		for _, s := range slots {
			v.clearSlot(s)
		}
		return v
	})
	ok = ok && c
	_, c = b.update(b.keys.health, func(cur []byte) []byte {
		if cur == nil {
			return nil
		}
		b.decodeHealth(cur)
		for _, s := range slots {
			b.health[s] = healthEntry{}
		}
		b.buf = appendHealth(b.buf[:0], b.health)
		return b.buf
	})
	ok = ok && c
	_, c = b.update(b.keys.stats, func(cur []byte) []byte {
		v, valid := parseStats(cur)
		if !valid || !b.fits(v.len()) {
			return nil
		}
		if v.len() < b.n() {
			b.buf = widenStats(b.buf, v, b.n())
			v = statsView(b.buf)
		}
		for _, s := range slots {
			v.set(s, EngineStats{}, 0)
		}
		return v
	})
	ok = ok && c
	_, c = b.update(b.keys.qps, func(cur []byte) []byte {
		q, valid := parseQPS(cur)
		if !valid || !b.fits(q.len()) {
			return nil
		}
		if q.len() < b.n() {
			q = widenQPS(q, b.n())
		}
		for _, s := range slots {
			le.PutUint32(q[qpsHeader+4*s:], 0)
			for k := int64(0); k < qpsBuckets; k++ {
				le.PutUint16(q[q.slotOffset(k, s):], 0)
			}
		}
		return q
	})
	ok = ok && c
	if !ok {
		return ErrNotRecorded
	}
	return nil
}

// Inflight returns slot i's shared in-flight count (0 when the strategy does
// not count, or the value is absent): the slot assigner's "has it drained".
func (b *Balancer) Inflight(i int) uint32 {
	v, ok := parseInflight(b.read(b.keys.inflight))
	if !ok || i < 0 || i >= v.len() {
		return 0
	}
	return v.get(i)
}
