package sim

import (
	"fmt"
	"strings"
	"sync"

	"github.com/pdroute/pdroute/e2e/engine"
)

// MissReport, when set, receives each aggregated run's breakdown of the
// prompt tokens its engines did not find in their prefix caches, by cause
// (pdroute-sim -misses). It is called from the runs' goroutines, one at a
// time. Diagnosis only: nothing else reads it.
var MissReport func(setup, workload string, rate float64, m *Misses)

var missMu sync.Mutex

// contextBlocks is how a prompt's context is told apart: by the hash of its
// contextBlocks-th KV block (1 600 tokens with 16-token blocks), which on
// the tenants workload is the tenant's 6k-token context. A request "holds"
// its context on an engine when the engine's cache has at least that many
// of its leading blocks.
const contextBlocks = 100

// Miss causes, in the order a request is classified at routing time.
const (
	// MissFirst: no request with this context was routed before.
	MissFirst = "first visit"
	// MissGiveWay: the index knew endpoints holding a prefix worth keeping
	// (cache_min_gain), and the request went to another.
	MissGiveWay = "give-way"
	// MissElsewhere: the context was routed before, to other engines, and
	// the index knew no holder (strategies without the index, the decoder
	// chosen from the headers, or an index entry replaced).
	MissElsewhere = "elsewhere"
	// MissEvicted: the chosen engine had computed the context before and no
	// longer held it at routing time, or lost it while the request queued.
	MissEvicted = "evicted"
	// MissPending: the chosen endpoint was routed the context before but had
	// not computed it yet when this request was admitted (a duplicate of a
	// prefill in flight: a miss on any engine).
	MissPending = "pending prefill"
	// MissRest: everything else, the part after the cached context (the
	// unique query on tenants).
	MissRest = "rest of a hit"
)

var missOrder = []string{MissFirst, MissGiveWay, MissElsewhere, MissEvicted, MissPending, MissRest}

// Misses is one run's breakdown.
type Misses struct {
	Prompt, Cached int64            // prompt tokens prefilled, of which cached
	Tokens         map[string]int64 // missed prompt tokens per cause
	Requests       map[string]int   // requests per cause
}

// String is one line: the hit rate, then each cause's share of the prompt
// tokens (and request count).
func (m *Misses) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hits %.1f %%", 100*float64(m.Cached)/float64(max(m.Prompt, 1)))
	for _, c := range missOrder {
		if n := m.Requests[c]; n > 0 {
			fmt.Fprintf(&b, "; %s %.1f %% (%d)", c, 100*float64(m.Tokens[c])/float64(max(m.Prompt, 1)), n)
		}
	}
	return b.String()
}

// missTracker classifies an aggregated run's requests.
type missTracker struct {
	m        Misses
	seen     map[uint64]bool
	computed []map[uint64]bool // per engine: contexts it finished a request of
	cause    map[*flight]routedAs
}

type routedAs struct {
	cause string
	// computed: the chosen engine had finished a request with this
	// context before this one was routed.
	computed bool
}

func newMissTracker(engines int) *missTracker {
	t := &missTracker{seen: map[uint64]bool{}, cause: map[*flight]routedAs{}}
	t.m.Tokens, t.m.Requests = map[string]int64{}, map[string]int{}
	for range engines {
		t.computed = append(t.computed, map[uint64]bool{})
	}
	return t
}

func contextKey(r *PreparedRequest) (uint64, bool) {
	if len(r.Hashes) < contextBlocks {
		return 0, false
	}
	return r.Hashes[contextBlocks-1], true
}

// routed classifies f, just sent to engine e, from the index's view of the
// decode pool (cached per endpoint, gain the least worth keeping).
func (t *missTracker) routed(f *flight, e *engine.Engine, cached []int, gain int) {
	k, ok := contextKey(f.req)
	if !ok {
		return
	}
	held, heldHere := false, false
	for i, c := range cached {
		held = held || c >= gain
		heldHere = heldHere || (i == f.dec && c >= gain)
	}
	var c string
	switch {
	case !t.seen[k]:
		c = MissFirst
	case heldHere:
		c = MissPending // until admission shows otherwise
		if e.Cached(f.req.Hashes) < contextBlocks && t.computed[f.dec][k] {
			c = MissEvicted
		}
	case held:
		c = MissGiveWay
	default:
		c = MissElsewhere
	}
	t.seen[k] = true
	t.cause[f] = routedAs{c, t.computed[f.dec][k]}
}

// done counts f's prompt, now finished (admitted with r.CachedTokens).
func (t *missTracker) done(f *flight, r *engine.Request, blockSize int) {
	t.m.Prompt += int64(r.PromptTokens)
	t.m.Cached += int64(r.CachedTokens)
	as, ok := t.cause[f]
	delete(t.cause, f)
	k, _ := contextKey(f.req)
	c := as.cause
	switch {
	case !ok:
		c = MissRest
	case r.CachedTokens >= contextBlocks*blockSize:
		// It found its context: what it missed is the rest.
		c = MissRest
	case c == MissPending && as.computed:
		c = MissEvicted // computed there, lost while this request queued
	}
	if ok {
		t.computed[f.dec][k] = true
	}
	t.m.Tokens[c] += int64(r.PromptTokens - r.CachedTokens)
	t.m.Requests[c]++
}

func (t *missTracker) report(s *Setup, p *Prepared) {
	missMu.Lock()
	defer missMu.Unlock()
	MissReport(s.Name, p.Name, p.Rate(), &t.m)
}
