// Package discovery owns the filter's view of discovered endpoint sets: the
// table every VM of a proxy routes by, and how a new answer of the discovery
// companion turns the current table into the next one.
//
// The table gives every endpoint a slot, the index of its balancing state in
// lb's dynamic pools (lb.NewDynamic). An endpoint that stays keeps its slot,
// and so its in-flight count, health, engine stats and qps window. An
// endpoint that leaves turns its slot into a draining one: no new request
// goes there, the requests on it release their counts to it, and the slot is
// freed once its in-flight count is zero (after DrainMin), or after DrainMax
// whatever it says (a VM that died holding a count). A new endpoint takes the
// lowest free slot, so the table is as wide as the most endpoints that were
// in service or draining at once, never more than lb.MaxSlots.
//
// The table travels between VMs as JSON in shared data, written by the one
// VM that holds the discovery lease; the others decode it when its
// generation changes. Everything here is pure Go for the wasm filter: no
// proxy-wasm imports, goroutines or timers.
package discovery

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb"
)

const (
	// DrainMin is how long a departed endpoint's slot stays reserved even
	// when nothing counts requests on it (round_robin, random and qps do not
	// keep in-flight counts): long enough for its last requests' outcomes to
	// land on its own health entry, not on a newcomer's.
	DrainMin = 30 * time.Second
	// DrainMax frees a departed endpoint's slot whatever its in-flight count
	// says: a count a crashed VM never gave back must not hold a slot
	// forever. Longer than any sane request.
	DrainMax = 10 * time.Minute
)

// Slot is one slot of a pool. Exactly one of Endpoint (in service) and Left
// (draining: the name of the endpoint that left) is set, or neither (free).
type Slot struct {
	Endpoint *config.Endpoint `json:"ep,omitempty"`
	Left     string           `json:"left,omitempty"`
	// Since is when the endpoint left (unix ns), for draining slots.
	Since int64 `json:"since,omitempty"`
}

// Pool is a pool's slots, indexed by slot number.
type Pool []Slot

// Table is the discovered sets as every VM routes by them.
type Table struct {
	// Gen numbers the table's writes; VMs reload when it changes.
	Gen uint64 `json:"gen"`
	// Version is the companion's version the table was built from.
	Version int64 `json:"version"`
	Prefill Pool  `json:"prefill"`
	Decode  Pool  `json:"decode"`
}

// Initial is the table of a configuration before the companion answered: its
// configured endpoints in slots 0..n-1 (with discovery they may be none).
func Initial(c *config.Config) Table {
	t := Table{}
	for _, p := range []struct {
		src []config.Endpoint
		dst *Pool
	}{{c.Prefill.Endpoints, &t.Prefill}, {c.Decode.Endpoints, &t.Decode}} {
		for i := range p.src {
			e := p.src[i]
			*p.dst = append(*p.dst, Slot{Endpoint: &e})
		}
	}
	return t
}

// Busy reports whether a slot of a pool ("prefill" or "decode") still has
// requests in flight.
type Busy func(pool string, slot int) bool

// Next returns the table after answer d at now, and the slots of each pool
// that were given to a new endpoint (their shared state must be reset with
// lb's ResetSlots). changed is false when the table is the same as prev but
// for its version (then there is nothing to write).
func Next(prev Table, d *config.Discovered, busy Busy, now time.Time) (next Table, reset [2][]int, changed bool) {
	next = Table{Gen: prev.Gen + 1, Version: d.Version}
	var c1, c2 bool
	next.Prefill, reset[0], c1 = nextPool(prev.Prefill, d.Prefill, func(s int) bool { return busy("prefill", s) }, now)
	next.Decode, reset[1], c2 = nextPool(prev.Decode, d.Decode, func(s int) bool { return busy("decode", s) }, now)
	return next, reset, c1 || c2
}

func nextPool(prev Pool, eps []config.Endpoint, busy func(int) bool, now time.Time) (Pool, []int, bool) {
	t := now.UnixNano()
	want := make(map[string]int, len(eps)) // name → index in eps
	for i, e := range eps {
		want[e.Name] = i
	}
	next := make(Pool, len(prev))
	placed := make([]bool, len(eps))
	changed := false
	// Endpoints that stay keep their slot; those that left start draining.
	for s, sl := range prev {
		switch {
		case sl.Endpoint != nil:
			if i, ok := want[sl.Endpoint.Name]; ok {
				e := eps[i]
				next[s] = Slot{Endpoint: &e}
				placed[i] = true
				if !sameEndpoint(sl.Endpoint, &e) {
					changed = true
				}
				continue
			}
			next[s] = Slot{Left: sl.Endpoint.Name, Since: t}
			changed = true
		case sl.Left != "":
			if i, ok := want[sl.Left]; ok {
				// Back before its slot was freed: the same endpoint, its
				// state (and the counts of its draining requests) still good.
				e := eps[i]
				next[s] = Slot{Endpoint: &e}
				placed[i] = true
				changed = true
				continue
			}
			age := t - sl.Since
			if age >= int64(DrainMax) || age < 0 || (age >= int64(DrainMin) && !busy(s)) {
				changed = true // freed
				continue
			}
			next[s] = sl
		}
	}
	var reset []int
	for i := range eps {
		if placed[i] {
			continue
		}
		e := eps[i]
		s := freeSlot(next)
		if s < 0 {
			continue // cannot happen: at most MaxEndpoints in service, MaxSlots slots
		}
		if s == len(next) {
			next = append(next, Slot{})
		}
		next[s] = Slot{Endpoint: &e}
		reset = append(reset, s)
		changed = true
	}
	for len(next) > 0 && next[len(next)-1] == (Slot{}) {
		next = next[:len(next)-1]
	}
	return next, reset, changed
}

// freeSlot returns the lowest free slot, a new one past the end, or when the
// pool has lb.MaxSlots the draining slot that left first.
func freeSlot(p Pool) int {
	for s, sl := range p {
		if sl == (Slot{}) {
			return s
		}
	}
	if len(p) < lb.MaxSlots {
		return len(p)
	}
	oldest := -1
	for s, sl := range p {
		if sl.Left != "" && (oldest < 0 || sl.Since < p[oldest].Since) {
			oldest = s
		}
	}
	return oldest
}

func sameEndpoint(a, b *config.Endpoint) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Endpoints returns the pool as the filter's configuration lists it: one
// entry per slot, with an empty name for a slot not in service.
func (p Pool) Endpoints() []config.Endpoint {
	out := make([]config.Endpoint, len(p))
	for s, sl := range p {
		if sl.Endpoint != nil {
			out[s] = *sl.Endpoint
		}
	}
	return out
}

// Balancing returns the pool as lb's dynamic pools take it.
func (p Pool) Balancing() []lb.Endpoint {
	out := make([]lb.Endpoint, len(p))
	for s, sl := range p {
		if sl.Endpoint != nil {
			out[s].Name = sl.Endpoint.Name
		}
	}
	return out
}

// InService counts the pool's endpoints in service.
func (p Pool) InService() int {
	n := 0
	for _, sl := range p {
		if sl.Endpoint != nil {
			n++
		}
	}
	return n
}

// Draining counts the pool's draining slots.
func (p Pool) Draining() int {
	n := 0
	for _, sl := range p {
		if sl.Left != "" {
			n++
		}
	}
	return n
}

// Encode returns the table as stored in shared data.
func (t *Table) Encode() []byte {
	b, _ := json.Marshal(t) // plain structs: cannot fail
	return b
}

// Decode reads a table written by Encode. Shared data is written by this
// plugin's VMs only, but a value of another build or a torn reload must not
// be trusted: a table with more than lb.MaxSlots slots, an endpoint without
// a name or address, or a slot both in service and draining is an error.
func Decode(data []byte) (Table, error) {
	var t Table
	if err := json.Unmarshal(data, &t); err != nil {
		return Table{}, err
	}
	for _, p := range []Pool{t.Prefill, t.Decode} {
		if len(p) > lb.MaxSlots {
			return Table{}, fmt.Errorf("discovery: table of %d slots", len(p))
		}
		names := map[string]bool{}
		for s, sl := range p {
			if sl.Endpoint == nil {
				continue
			}
			if sl.Left != "" || sl.Endpoint.Name == "" || (sl.Endpoint.Address == "" && sl.Endpoint.Cluster == "") || names[sl.Endpoint.Name] {
				return Table{}, fmt.Errorf("discovery: bad slot %d", s)
			}
			names[sl.Endpoint.Name] = true
		}
	}
	return t, nil
}
