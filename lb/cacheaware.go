package lb

import (
	"math"
	"time"
)

// Pending prefill work: per endpoint, the prompt this VM sent there that the
// endpoint did not hold, in in-flight equivalents (one per pendingUnit of
// the prompt's unit: rendered bytes from lb/prefix, about 256 tokens),
// decaying with time constant pendingTau. An in-flight count says how many
// requests an endpoint has, not how much prefill they bring: a cold 7k-token
// prompt keeps an engine busy for several times a cached one's step, and
// stalls every sequence decoding there meanwhile. cache_aware adds this
// to the in-flight count where it places a prompt on an endpoint that does
// not hold it (giving way, and a cold prompt in sticky traffic), not among
// the holders of a prefix, not in the sticky bound, not in the rotation of
// cold traffic. Per VM: with several workers each sees its own share, so
// the term is weaker there. Both from the simulator (docs/ROUTING.md,
// "Cache-aware routing").
const (
	pendingUnit = 1024.0
	pendingTau  = 3 * time.Second
)

// decayPending ages the pending work to now, one entry per slot (a
// discovered pool widens as it grows).
func (b *Balancer) decayPending(now time.Time) {
	if n := b.n(); len(b.pending) < n {
		b.pending = append(b.pending, make([]float64, n-len(b.pending))...)
	}
	if b.pendingAt.IsZero() {
		b.pendingAt = now
		return
	}
	dt := now.Sub(b.pendingAt)
	if dt <= 0 {
		return
	}
	b.pendingAt = now
	f := math.Exp(-float64(dt) / float64(pendingTau))
	for i := range b.pending {
		b.pending[i] *= f
	}
}

// Sticky share: how much of a pool's recent traffic (on this VM) had a
// prefix worth keeping somewhere, an exponential average over about
// stickyWindow picks. At stickyCold or more, in-flight counts are skewed by
// where prefixes live rather than by the rotation's spread, and a prompt
// nobody holds goes to the least in-flight endpoint. Both from the
// simulator (docs/ROUTING.md, "Cache-aware routing").
const (
	stickyWindow = 16
	stickyCold   = 0.25
)

// cacheAware is "sticky until saturated". An endpoint is under the load
// bound while its in-flight + 1 ≤ factor × mean + slack (the mean counting
// this request).
//   - If endpoints under the bound hold a prefix of at least cache_min_gain ×
//     the prompt, the least in-flight of those holding within that margin
//     of the longest takes it: a long cached prefix keeps its requests
//     together, spread over the endpoints that hold it.
//   - If the prompt has such a prefix somewhere but every holder is past
//     the bound, the request gives way to load: the least in-flight endpoint
//     (which then holds the prefix too, and shares the next ones).
//   - If nothing worth keeping is cached and at least stickyCold of the
//     pool's recent requests had a cached prefix, the least in-flight
//     endpoint: the loads are the cached prefixes' doing, and a prompt that
//     must be prefilled whole is the largest piece of work there is.
//   - Otherwise (nothing worth keeping cached, in traffic that mostly has
//     nothing cached), the request takes the next turn of the rotation, as
//     under round robin, unless that endpoint is already more than slack
//     above the mean in-flight (the mean counting this request), when the
//     next turn within that goes. Among long unique prompts the rotation's
//     regular spacing of prefills beats any in-flight signal (an engine
//     with one new request prefilling has fewer in flight than one with two
//     decoding, yet is the busier; docs/ROUTING.md, rag).
//   - With no view of the prompt (Pick, or PickCached without a cached
//     slice: the decoder chosen from the headers), round robin's turns.
//
// "Least in-flight" when giving way and for a cold prompt in sticky traffic
// counts the endpoint's pending prefill work too (see pendingUnit): of two
// endpoints with equal counts, the one this VM just sent a cold prompt to is
// the busier.
//
// Turns, and the scan order that breaks ties, follow this VM's rotation.
func (b *Balancer) cacheAware(v inflightView) int {
	k := len(b.usable)
	start := int(b.turn % uint64(k))
	b.turn++
	if b.cached == nil {
		return b.usable[start]
	}
	var total float64
	for _, i := range b.usable {
		total += float64(v.get(i))
	}
	sticky := b.cfg.CacheLoadFactor*(total+1)/float64(k) + b.cfg.CacheLoadSlack
	under := func(i int) bool { return float64(v.get(i))+1 <= sticky }
	gain := max(int(b.cfg.CacheMinGain*float64(b.cachedTotal)), 1)
	most, anywhere := 0, false
	for _, i := range b.usable {
		c := b.cached[i]
		anywhere = anywhere || c >= gain
		if under(i) {
			most = max(most, c)
		}
	}
	if anywhere {
		b.stickyShare += (1 - b.stickyShare) / stickyWindow
	} else {
		b.stickyShare -= b.stickyShare / stickyWindow
	}
	inflight := func(i int) float64 { return float64(v.get(i)) }
	busy := func(i int) float64 { return float64(v.get(i)) + b.pending[i] }
	switch {
	case most >= gain:
		best, least := -1, 0.0
		for j := range k {
			if i := b.usable[(start+j)%k]; under(i) && b.cached[i] > most-gain && (best < 0 || inflight(i) < least) {
				best, least = i, inflight(i)
			}
		}
		return best
	case anywhere || b.stickyShare >= stickyCold:
		return b.argmin(start, busy)
	}
	// In-flight before this request, against the mean with it: an endpoint
	// exactly slack ahead still takes its turn.
	even := (total+1)/float64(k) + b.cfg.CacheLoadSlack
	for j := range k {
		if i := b.usable[(start+j)%k]; inflight(i) <= even {
			return i
		}
	}
	return b.argmin(start, inflight)
}
