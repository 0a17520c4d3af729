package lb

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// ErrNoEndpoint is returned by [Balancer.Pick] when every endpoint of the pool is
// cooling down or has a probe outstanding. The caller answers 503 or falls back.
var ErrNoEndpoint = errors.New("lb: no usable endpoint")

// ErrNotRecorded is returned when a shared update could not be committed: the key
// kept changing for casAttempts reads in a row, or the store failed.
var ErrNotRecorded = errors.New("lb: shared state not updated (contention or store failure)")

const (
	// casAttempts bounds every read-modify-write: past it the operation gives up
	// (see Lease.Unrecorded) instead of spinning inside a request callback.
	casAttempts = 8
	// probeExpiry frees a half-open probe slot whose lease never reported or
	// released (its VM died): longer than any sane time to first byte.
	probeExpiry = 2 * time.Minute
	// anchorKey holds a value whose cas is used to create keys only if absent.
	anchorKey = "lb/cas-anchor"
)

// Balancer chooses endpoints of one pool for one VM. Its shared state is in the
// Store; see the package documentation for what is shared and how to release.
// A Balancer is not safe for concurrent use.
type Balancer struct {
	cfg   PoolConfig
	store Store
	// kept reads the per-pick keys (the rotation, the health). upd reads
	// the value a read-modify-write starts from (update), into a buffer of
	// its own: mutate may read the health with kept meanwhile. An
	// in-flight strategy updates the in-flight value at every pick and
	// release.
	kept KeptReader
	upd  KeptReader
	// stats reads the engine stats that least_loaded and power_of_two
	// weigh at every pick (10 KB at 512 endpoints), each decoded into
	// engineLoad before the next read.
	stats    KeptReader
	rng      *rand.Rand
	keys     poolKeys
	nameHash []uint64 // per endpoint, for prefix affinity
	all      []int    // 0..n-1: the usable set when no endpoint is out
	anchor   uint32   // cas of an anchorKey write, 0 until known

	// Per-VM scratch reused by every pick. usable is the pick's usable endpoints:
	// all, or usableBuf when some endpoint is out.
	usable      []int
	usableBuf   []int
	health      []healthEntry
	engineLoad  []float64 // per endpoint, filled by engineLoads
	cached      []int     // per endpoint, the current PickCached's (nil otherwise)
	cachedTotal int       // the current PickCached's prompt size
	turn        uint64    // this VM's rotation for cache_aware's ties
	stickyShare float64   // cache_aware's sticky share (cacheaware.go)
	pending     []float64 // cache_aware's pending prefill work (cacheaware.go)
	pendingAt   time.Time // when pending was last aged
	buf         []byte

	// debt[i] is in-flight decrements for endpoint i not yet written because of
	// contention; owed says whether any is non-zero.
	debt []uint32
	owed bool

	// owner and ownerTTL: whose in-flight counts this VM's leases are, and how
	// long they live without a write or heartbeat (see SetOwner); ibuf is the
	// scratch of the in-flight value.
	owner    uint64
	ownerTTL time.Duration
	ibuf     []byte
	legacy   []byte
	// probes are this VM's outstanding probe leases when it has an owner TTL:
	// Heartbeat renews their claims; probeBeat is the last renewal (unix ns).
	probes    []*Lease
	probeBeat int64
	// wbuf is the scratch of an in-flight value widened to this pool's width.
	wbuf []byte
	// dynamic: the endpoints change at run time (see NewDynamic); index i is a
	// slot, cfg.Endpoints has one entry per slot (empty names are free or
	// draining slots), and shared values of another width are widened rather
	// than replaced.
	dynamic bool
}

type poolKeys struct{ rotation, inflight, health, stats, qps string }

// New returns the balancer of pool (e.g. "prefill" or "decode") for one VM. cfg must
// pass [PoolConfig.Validate]; src is this VM's random source (seed it per VM, or
// VMs draw the same sequence).
//
// The shared keys are "lb/<pool>/<fingerprint>/<kind>", where the fingerprint hashes
// the endpoint names in order: every VM with the same endpoint list shares state,
// and a reload that changes the list starts from fresh keys instead of reading
// counts indexed for another list.
func New(pool string, cfg PoolConfig, store Store, src rand.Source) (*Balancer, error) {
	if pool == "" || strings.Contains(pool, "/") {
		return nil, fmt.Errorf("lb: pool name %q must be non-empty and contain no '/'", pool)
	}
	if store == nil || src == nil {
		return nil, errors.New("lb: store and random source are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	n := len(cfg.Endpoints)
	b := &Balancer{
		cfg:        cfg,
		store:      store,
		rng:        rand.New(src),
		nameHash:   make([]uint64, n),
		all:        make([]int, n),
		usableBuf:  make([]int, 0, n),
		health:     make([]healthEntry, n),
		engineLoad: make([]float64, n),
		debt:       make([]uint32, n),
	}
	b.readers(store)
	fp := fnv.New64a()
	for i, e := range cfg.Endpoints {
		fp.Write([]byte(e.Name))
		fp.Write([]byte{0})
		h := fnv.New64a()
		h.Write([]byte(e.Name))
		b.nameHash[i] = Mix64(h.Sum64())
		b.all[i] = i
	}
	b.setKeys(fmt.Sprintf("lb/%s/%016x/", pool, fp.Sum64()))
	return b, nil
}

func (b *Balancer) setKeys(base string) {
	b.keys = poolKeys{
		rotation: base + "rotation",
		inflight: base + "inflight",
		health:   base + "health",
		stats:    base + "stats",
		qps:      base + "qps",
	}
}

// Pick chooses an endpoint at time now. prefixKey is the request's prompt-prefix
// hash (tokenest); only PrefixAffinity reads it.
//
// If an endpoint's cool-down is over, this pick claims it as the single half-open
// probe (shared by all VMs) and returns it with Decision ByProbe. Otherwise the
// pool's strategy chooses among the usable endpoints. The only error is
// ErrNoEndpoint; contention never fails a pick (see Lease.Unrecorded).
func (b *Balancer) Pick(now time.Time, prefixKey uint64) (*Lease, error) {
	return b.PickCached(now, prefixKey, nil, 0)
}

// PickCached is [Balancer.Pick] with what the CacheAware strategy reads:
// cached[i] is how much of the request's prompt endpoint i is known to hold
// and total the prompt's size, in one unit (lb/prefix gives rendered bytes),
// or cached nil when nothing is known. Other strategies ignore them: it is
// Pick(now, prefixKey).
func (b *Balancer) PickCached(now time.Time, prefixKey uint64, cached []int, total int) (*Lease, error) {
	l := new(Lease)
	if err := b.PickInto(l, now, prefixKey, cached, total); err != nil {
		return nil, err
	}
	return l, nil
}

// PickInto is [Balancer.PickCached] writing the lease into *dst rather than
// a new allocation, for a caller that keeps its leases in its own request
// object (the filter's stream: a pick then allocates nothing). *dst must
// not hold a lease still unreleased; on an error it is left as it was. It
// is the one body of every pick, so that a pick runs one function of this
// layer rather than two.
func (b *Balancer) PickInto(dst *Lease, now time.Time, prefixKey uint64, cached []int, total int) error {
	// cached is per slot, free slots of a discovered pool included
	view := len(cached) == b.n() && total > 0 && b.cfg.Strategy == CacheAware
	// b.cached is reset after the pick without a deferred closure (code per
	// request); a panic in the pick leaves it for the next pick to overwrite.
	b.cached = nil
	if view {
		b.cached, b.cachedTotal = cached, total
		b.decayPending(now)
	}
	var l Lease
	if probe := b.loadHealth(now, &l); probe >= 0 {
		l.Index, l.Decision, l.probeAt = probe, ByProbe, now.UnixNano()
		if b.cfg.Strategy.countsInflight() {
			b.countInflight(&l, now, func(inflightView) int { return probe })
		}
	} else if len(b.usable) == 0 {
		b.cached = nil
		return ErrNoEndpoint
	} else if b.cfg.Strategy == RoundRobin {
		l.Index = b.rotate(&l) // the default strategy, without choose's switch
	} else {
		b.choose(now, prefixKey, &l)
	}
	b.cached = nil
	if view {
		// After the pick, not in the strategy: a contended in-flight update
		// runs the strategy again, and the work is sent once.
		b.pending[l.Index] += float64(total-min(max(cached[l.Index], 0), total)) / pendingUnit
	}
	*dst = l
	dst.b = b
	if dst.Decision == ByProbe && b.ownerTTL > 0 {
		b.probes = append(b.probes, dst)
	}
	return nil
}

func (b *Balancer) choose(now time.Time, prefixKey uint64, l *Lease) {
	switch b.cfg.Strategy {
	case RoundRobin:
		l.Index = b.rotate(l)
	case Random:
		l.Index = b.usable[b.rng.IntN(len(b.usable))]
	case QPS:
		b.pickQPS(now, l)
	case LeastLoaded:
		if !b.engineLoads(b.loadStats(), b.usable, now.UnixNano()) {
			l.Decision = ByRoundRobinFallback
			i := b.rotate(l)
			b.countInflight(l, now, func(inflightView) int { return i })
			return
		}
		start := b.rng.IntN(len(b.usable))
		b.countInflight(l, now, func(v inflightView) int {
			return b.argmin(start, func(i int) float64 { return b.load(i, v, true) })
		})
	case PowerOfTwo:
		k := len(b.usable)
		x, y := b.rng.IntN(k), 0
		if k > 1 {
			if y = b.rng.IntN(k - 1); y >= x {
				y++
			}
		}
		pair := [2]int{b.usable[x], b.usable[y]}
		withStats := b.engineLoads(b.loadStats(), pair[:], now.UnixNano())
		b.countInflight(l, now, func(v inflightView) int {
			if b.load(pair[1], v, withStats) < b.load(pair[0], v, withStats) {
				return pair[1]
			}
			return pair[0]
		})
	case PrefixAffinity:
		b.countInflight(l, now, func(v inflightView) int { return b.affinity(v, prefixKey) })
	case CacheAware:
		b.countInflight(l, now, func(v inflightView) int { return b.cacheAware(v) })
	}
}

// update is one bounded optimistic read-modify-write of key. mutate receives the
// current value (nil when absent or unreadable) and returns the value to write, or
// nil to leave the key as it is; it runs again on every cas mismatch. update
// returns the mismatches met and whether the last mutate's result was committed
// (written, or nothing to write).
func (b *Balancer) update(key string, mutate func(cur []byte) []byte) (retries int, committed bool) {
	cur, cas, err := b.upd.Read(key)
	return b.updateFrom(key, cur, cas, err, mutate)
}

// updateFrom is update starting from a read of key the caller made (cur, cas,
// err of store.Get), so a caller that looks at the value first reads it once.
func (b *Balancer) updateFrom(key string, cur []byte, cas uint32, err error, mutate func(cur []byte) []byte) (retries int, committed bool) {
	for {
		switch {
		case err == nil:
		case isErr(err, ErrNotFound):
			cur, cas = nil, b.absentCAS()
		default:
			mutate(nil)
			return retries, false
		}
		next := mutate(cur)
		if next == nil {
			return retries, true
		}
		err = b.store.Set(key, next, cas)
		if err == nil {
			return retries, true
		}
		if !isErr(err, ErrCasMismatch) {
			return retries, false
		}
		if retries++; retries == casAttempts {
			return retries, false
		}
		cur, cas, err = b.upd.Read(key)
	}
}

// isErr is errors.Is(err, target) for a non-nil err, without its code on
// the common path: the stores return the sentinels themselves.
func isErr(err, target error) bool { return err == target || errors.Is(err, target) }

// absentCAS returns the cas to write a key that Get reported absent. A Set on an
// absent key succeeds whatever its cas, but fails with a mismatch if another VM
// created the key meanwhile unless cas happens to be that key's cas. The cas of a
// write to anchorKey belongs to that write only, so no other key can have it (until
// the 32-bit counter wraps): creating with it is "create if absent", and two VMs
// creating the same key cannot overwrite each other. 0 (an unconditional create)
// is the fallback when the anchor cannot be read.
func (b *Balancer) absentCAS() uint32 {
	if b.anchor == 0 {
		if _, _, err := b.store.Get(anchorKey); errors.Is(err, ErrNotFound) {
			_ = b.store.Set(anchorKey, []byte{valueVersion}, 0) // checked by the Get below
		}
		if _, cas, err := b.store.Get(anchorKey); err == nil {
			b.anchor = cas
		}
	}
	return b.anchor
}

// maxKeptRead bounds the room kept keeps: a pool's rotation and health
// values are a few bytes per endpoint.
const maxKeptRead = 4 << 10

// readers sets up the balancer's kept readers of store.
func (b *Balancer) readers(store Store) {
	b.kept = NewKeptReader(store, maxKeptRead)
	b.upd = NewKeptReader(store, maxKeptUpdate)
	b.stats = NewKeptReader(store, maxKeptUpdate)
}

// maxKeptUpdate bounds the room upd and stats keep: an in-flight value at
// 512 endpoints is 2 KB, and 2 KB more per VM with requests in flight; the
// engine stats 10 KB.
const maxKeptUpdate = 64 << 10

// read returns the value of key, or nil when it is absent or the store fails.
func (b *Balancer) read(key string) []byte {
	v, _, err := b.store.Get(key)
	if err != nil {
		return nil
	}
	return v
}

// rotate advances the shared rotation and returns the usable endpoint it names.
// It is update's loop written out, without a closure: the default strategy's
// every pick runs it.
func (b *Balancer) rotate(l *Lease) int {
	var c uint64
	for retries := 0; ; {
		cur, cas, err := b.kept.Read(b.keys.rotation)
		if err != nil {
			if !isErr(err, ErrNotFound) {
				c = 0
				l.note(retries, false)
				break
			}
			cur, cas = nil, b.absentCAS()
		}
		c, _ = parseRotation(cur) // absent or garbage: start at 0
		b.buf = appendRotation(b.buf[:0], c+1)
		err = b.store.Set(b.keys.rotation, b.buf, cas)
		if err == nil || !isErr(err, ErrCasMismatch) {
			l.note(retries, err == nil)
			break
		}
		if retries++; retries == casAttempts {
			l.note(retries, false)
			break
		}
	}
	return b.usable[c%uint64(len(b.usable))]
}

// countInflight runs decide on the shared in-flight counts (the live owners'
// totals) and increments the chosen endpoint in this owner's row in the same
// write, so concurrent VMs see each other's picks. It also pays this VM's
// release debt.
func (b *Balancer) countInflight(l *Lease, now time.Time, decide func(inflightView) int) {
	r, ok := b.update(b.keys.inflight, func(cur []byte) []byte {
		v, own := b.live(cur, now.UnixNano(), true)
		b.payDebt(v, own)
		l.Index = decide(v)
		v.addOwn(own, l.Index, 1)
		return v
	})
	b.settleDebt(ok)
	l.note(r, ok)
	l.counted = ok
}

// payDebt takes this VM's unwritten releases from its row (own): a row that
// expired meanwhile has nothing left to take.
func (b *Balancer) payDebt(v inflightView, own int) {
	if !b.owed {
		return
	}
	for i, d := range b.debt {
		if d > 0 {
			v.addOwn(own, i, -int64(d))
		}
	}
}

func (b *Balancer) settleDebt(committed bool) {
	if committed && b.owed {
		clear(b.debt)
		b.owed = false
	}
}

// release gives back one in-flight count of endpoint i, now or with this VM's next
// in-flight write if the store stays contended.
func (b *Balancer) release(i int, now time.Time) {
	b.debt[i]++
	b.owed = true
	_, ok := b.update(b.keys.inflight, func(cur []byte) []byte {
		v, own := b.live(cur, now.UnixNano(), false)
		b.payDebt(v, own)
		return dropEmpty(v, own)
	})
	b.settleDebt(ok)
}

func (b *Balancer) pickQPS(now time.Time, l *Lease) {
	bucket := b.qpsBucket(now)
	start := b.rng.IntN(len(b.usable))
	r, ok := b.update(b.keys.qps, func(cur []byte) []byte {
		q := b.qpsWindow(cur, bucket)
		l.Index = b.argmin(start, func(i int) float64 { return float64(q.total(i)) })
		q.record(l.Index)
		return q
	})
	l.note(r, ok)
}

// qpsWidth is the width of one qps bucket in nanoseconds.
func (b *Balancer) qpsWidth() int64 { return int64(b.cfg.QPSWindow / qpsBuckets) }

func (b *Balancer) qpsBucket(now time.Time) int64 { return now.UnixNano() / b.qpsWidth() }

// qpsWindow returns cur as this pool's qps window moved to bucket, or a new empty
// window when cur is absent, garbage, for another window width, or more than a
// window in the future (which only garbage can be, as VMs share one clock).
func (b *Balancer) qpsWindow(cur []byte, bucket int64) qpsView {
	q, ok := parseQPS(cur)
	if !ok || !b.fits(q.len()) || q.width() != b.qpsWidth() || q.head() > bucket+qpsBuckets {
		b.buf = newQPS(b.buf, b.n(), b.qpsWidth(), bucket)
		q = qpsView(b.buf)
	} else if q.len() < b.n() {
		b.buf = widenQPS(q, b.n())
		q = qpsView(b.buf)
	}
	q.advance(bucket)
	return q
}

// loadStats returns this pool's engine stats, or nil (all missing).
func (b *Balancer) loadStats() statsView {
	cur, _, err := b.stats.Read(b.keys.stats)
	if err != nil {
		cur = nil
	}
	if v, ok := parseStats(cur); ok && b.fits(v.len()) {
		if v.len() < b.n() {
			return widenStats(nil, v, b.n())
		}
		return v
	}
	return nil
}

// fresh reports whether stats observed at observed (unix ns, 0 = never) are within
// StatsMaxAge of t, on either side: VMs share a clock, so a small negative age is
// ordering between VMs, while a far-future time can only be garbage.
func (b *Balancer) fresh(observed, t int64) bool {
	maxAge := int64(b.cfg.StatsMaxAge)
	return observed != 0 && observed >= t-maxAge && observed <= t+maxAge
}

// engineLoads sets b.engineLoad[i] = running_weight×running + waiting_weight×waiting
// for each endpoint i of idx, and reports whether all of them have fresh stats
// (stopping at the first that has not).
func (b *Balancer) engineLoads(stats statsView, idx []int, t int64) bool {
	if stats == nil {
		return false
	}
	for _, i := range idx {
		observed, running, waiting := stats.queue(i)
		if !b.fresh(observed, t) {
			return false
		}
		b.engineLoad[i] = b.cfg.RunningWeight*running + b.cfg.WaitingWeight*waiting
	}
	return true
}

// load is endpoint i's weighted in-flight, plus its engine load if withStats (set
// by a successful engineLoads for i in this pick).
func (b *Balancer) load(i int, v inflightView, withStats bool) float64 {
	x := b.cfg.InflightWeight * float64(v.get(i))
	if withStats {
		x += b.engineLoad[i]
	}
	return x
}

// argmin returns the usable endpoint with the lowest score, scanning from usable
// position start so that ties are broken at random rather than towards index 0.
func (b *Balancer) argmin(start int, score func(i int) float64) int {
	k := len(b.usable)
	best := b.usable[start]
	bestScore := score(best)
	for j := 1; j < k; j++ {
		i := b.usable[(start+j)%k]
		if s := score(i); s < bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// affinity is rendezvous hashing with bounded loads: the usable endpoint with the
// highest hash of (key, endpoint) among those that can take one more request
// without exceeding ceil(factor × (total in-flight + 1) / usable).
func (b *Balancer) affinity(v inflightView, key uint64) int {
	var total uint64
	for _, i := range b.usable {
		total += uint64(v.get(i))
	}
	k := uint64(len(b.usable))
	limit := uint64(math.Ceil(b.cfg.AffinityLoadFactor * float64(total+1) / float64(k)))
	// ceil((total+1)/k) in integers: the least-loaded endpoint always fits under
	// it, so some endpoint is admissible whatever float rounding did above.
	limit = max(limit, (total+k)/k)
	best, bestScore := -1, uint64(0)
	for _, i := range b.usable {
		if uint64(v.get(i)) >= limit {
			continue
		}
		if s := Mix64(key ^ b.nameHash[i]); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Mix64 is the splitmix64 finalizer: a bijection whose output bits each depend on
// all input bits, so (key ^ endpoint) scores are independent across endpoints.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
