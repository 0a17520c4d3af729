package lb

import "time"

// PickCached is [Balancer.Pick] with what the CacheAware strategy reads:
// cached[i] is how much of the request's prompt endpoint i is known to hold
// (any unit, larger is longer; lb/prefix gives rendered bytes), or nil when
// nothing is known. Other strategies ignore cached: it is Pick(now,
// prefixKey).
func (b *Balancer) PickCached(now time.Time, prefixKey uint64, cached []int) (*Lease, error) {
	if len(cached) == len(b.all) {
		b.cached = cached
	}
	defer func() { b.cached = nil }()
	return b.Pick(now, prefixKey)
}

// cacheAware is "sticky until saturated": among the usable endpoints under
// the load bound (in-flight + 1 ≤ factor × mean + slack, the mean counting
// this request), the one holding the longest cached prefix; ties, and a
// request nobody holds, go to the least in-flight, scanning from start so
// that ties between equals are broken at random.
func (b *Balancer) cacheAware(v inflightView, start int) int {
	var total float64
	for _, i := range b.usable {
		total += float64(v.get(i))
	}
	k := len(b.usable)
	limit := b.cfg.CacheLoadFactor*(total+1)/float64(k) + b.cfg.CacheLoadSlack
	best, bestCached, bestLoad := -1, 0, uint32(0)
	for j := range k {
		i := b.usable[(start+j)%k]
		load := v.get(i)
		c := 0
		if b.cached != nil {
			c = b.cached[i]
		}
		if float64(load)+1 > limit {
			continue
		}
		if best < 0 || c > bestCached || c == bestCached && load < bestLoad {
			best, bestCached, bestLoad = i, c, load
		}
	}
	if best >= 0 {
		return best
	}
	// Every endpoint is over the bound (only possible with factor 1 and no
	// slack and float rounding): the least in-flight.
	return b.argmin(start, func(i int) float64 { return float64(v.get(i)) })
}
