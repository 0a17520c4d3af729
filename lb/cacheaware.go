package lb

import "time"

// PickCached is [Balancer.Pick] with what the CacheAware strategy reads:
// cached[i] is how much of the request's prompt endpoint i is known to hold
// and total the prompt's size, in one unit (lb/prefix gives rendered bytes),
// or cached nil when nothing is known. Other strategies ignore them: it is
// Pick(now, prefixKey).
func (b *Balancer) PickCached(now time.Time, prefixKey uint64, cached []int, total int) (*Lease, error) {
	if len(cached) == len(b.all) && total > 0 {
		b.cached, b.cachedTotal = cached, total
	}
	defer func() { b.cached = nil }()
	return b.Pick(now, prefixKey)
}

// cacheAware is "sticky until saturated". An endpoint is under the load
// bound while its in-flight + 1 ≤ factor × mean + slack (the mean counting
// this request).
//   - If endpoints under the bound hold a prefix of at least cache_min_gain ×
//     the prompt, those holding within that margin of the longest take
//     turns: a long cached prefix keeps its requests together.
//   - If the prompt has such a prefix somewhere but every holder is past
//     the bound, the request gives way to load: the least in-flight endpoint
//     (which then holds the prefix too, and shares the next ones).
//   - If nothing worth keeping is cached, the request takes the next turn of
//     the rotation, as under round robin, unless that endpoint is already
//     more than slack above the mean in-flight (the mean counting this
//     request), when the next turn within that goes. Within the slack,
//     loads differ by the rotation's own spread, and among long unique
//     prompts its regular spacing of prefills beats any load signal (an
//     engine with one new request prefilling has fewer in flight than one
//     with two decoding, yet is the busier; docs/ROUTING.md, rag); past it,
//     the skew is other requests' cached prefixes, and those endpoints are
//     left to them.
//   - With no view of the prompt (Pick, or PickCached without a cached
//     slice: the decoder chosen from the headers), round robin's turns.
//
// Turns follow this VM's rotation.
func (b *Balancer) cacheAware(v inflightView) int {
	var total float64
	for _, i := range b.usable {
		total += float64(v.get(i))
	}
	k := len(b.usable)
	sticky := b.cfg.CacheLoadFactor*(total+1)/float64(k) + b.cfg.CacheLoadSlack
	under := func(i int) bool { return float64(v.get(i))+1 <= sticky }
	cached := func(i int) int {
		if b.cached == nil {
			return 0
		}
		return b.cached[i]
	}
	gain := max(int(b.cfg.CacheMinGain*float64(b.cachedTotal)), 1)
	most, anywhere := 0, false
	for _, i := range b.usable {
		c := cached(i)
		anywhere = anywhere || c >= gain
		if under(i) {
			most = max(most, c)
		}
	}
	start := int(b.turn % uint64(k))
	b.turn++
	if most >= gain {
		for j := range k {
			if i := b.usable[(start+j)%k]; under(i) && cached(i) > most-gain {
				return i
			}
		}
	}
	if b.cached == nil {
		return b.usable[start] // no view of the prompt: round robin's turns
	}
	if !anywhere {
		// In-flight before this request, against the mean with it: an
		// endpoint exactly slack ahead still takes its turn.
		even := (total+1)/float64(k) + b.cfg.CacheLoadSlack
		for j := range k {
			if i := b.usable[(start+j)%k]; float64(v.get(i)) <= even {
				return i
			}
		}
	}
	return b.argmin(start, func(i int) float64 { return float64(v.get(i)) })
}
