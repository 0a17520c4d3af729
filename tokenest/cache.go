package tokenest

import (
	"bytes"
	"sync"
	"unsafe"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// A Cache remembers the tool definitions it has seen validated, and what
// they cost by the Default method, so that a body that repeats them costs a
// lookup instead of a validating pass (both methods) and a count (Default).
// Agent clients send the same tool definitions with every request, often
// tens of kilobytes of them, and they are the slowest bytes either method
// reads: each is validated, and for Default printed as a chat template
// prints it and scanned (BENCHMARKS.md, agent bodies).
//
// A definition is looked up by its first keyLen bytes and then compared
// whole with the body at its place: a hit is a value whose bytes are those
// of one that was validated before (a complete JSON value ends where its
// own bytes end, whatever follows), so it is valid where it stands, and it
// costs what it cost then (a definition's cost does not depend on what
// comes before it; textmodel.Counter.AddCost). No walk over the body is
// needed to find where a definition ends. Estimate through a Cache returns
// what Estimate returns, for every body and both methods
// (TestCacheMatchesEstimate, FuzzCache). A Cache holds at most its budget
// of bytes (the definitions' bytes and their costs) and is emptied when a
// new definition would not fit. It is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	entries map[uint64][]*cachedDef // by their first keyLen bytes (key)
	held    int                     // bytes of definitions and costs
	budget  int
	hits    uint64
	misses  uint64
}

// cachedDef is a definition the Cache holds: its bytes and, once Default
// has counted it, its cost (textmodel.Counter.Cost).
type cachedDef struct {
	raw    []byte
	cost   int64
	costed bool
}

// keyLen is the length of the prefix definitions are looked up by, folded
// into an integer (key): tool definitions share their first 32 bytes,
// `{"type":"function","function":{"`, and differ by name soon after. A
// definition shorter than that is not kept. (An integer key spares the map
// hashing 64 bytes, which wasm's runtime does without AES instructions.)
const keyLen = 64

// entryCost is what an entry holds besides the definition's bytes: the
// cost, the key and the map's own share, roughly.
const entryCost = int(unsafe.Sizeof(cachedDef{})) + 8 + 64

// NewCache returns a Cache that holds at most budget bytes.
func NewCache(budget int) *Cache {
	return &Cache{entries: map[uint64][]*cachedDef{}, budget: budget}
}

// Estimate is the package's Estimate, with the tool definitions the Cache
// holds (a nil Cache estimates as Estimate does). A definition the Cache
// does not hold yet costs an allocation or two when it is kept; a body
// whose definitions it holds costs none.
func (c *Cache) Estimate(body []byte, path string, m Method) (Result, error) {
	return estimate(body, path, m, c, nil, nil)
}

// Stats returns the lookups that found a definition and those that did
// not (one or the other for every tool definition read through the Cache),
// and the bytes held.
func (c *Cache) Stats() (hits, misses uint64, held int) {
	// no defer: the filter calls this twice per request, and a deferred
	// call is one more function to run (its wrapper)
	c.mu.Lock()
	hits, misses, held = c.hits, c.misses, c.held
	c.mu.Unlock()
	return hits, misses, held
}

// lookup reports whether the Cache holds the tool definition at b[v] (with
// its cost, when cost is set, which it then adds to tools), and returns the
// offset after it. Tool definitions always stand at the same depth
// (elements of an array that is a member of the top-level object), so a
// held one passed the nesting limit there too.
func (c *Cache) lookup(tools *textmodel.Counter, b []byte, v int, cost bool) (end int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(b)-v < keyLen { // too close to the body's end to be a held one
		c.misses++
		return 0, false
	}
	for _, d := range c.entries[key(b[v:])] {
		if jsonraw.HasPrefix(b[v:], d.raw) && (d.costed || !cost) {
			c.hits++
			if cost {
				tools.AddCost(d.cost)
			}
			return v + len(d.raw), true
		}
	}
	c.misses++
	return 0, false
}

// keep keeps the validated tool definition raw if it fits in the budget
// (emptying the Cache first when it does not fit beside what the Cache
// holds); with cost, it first counts the definition into tools, as
// renderJSON does, and keeps its cost too.
func (c *Cache) keep(tools *textmodel.Counter, raw []byte, cost bool) {
	var n int64
	if cost {
		var counts textmodel.Counter
		renderJSON(&counts, raw)
		n = counts.Cost()
		tools.AddCost(n)
	}
	size := len(raw) + entryCost
	if len(raw) < keyLen || size > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(raw)
	for _, e := range c.entries[k] {
		if bytes.Equal(e.raw, raw) {
			// another goroutine's, or twice in one body, or held by
			// Chars4 and now counted
			if cost && !e.costed {
				e.cost, e.costed = n, true
			}
			return
		}
	}
	if c.held+size > c.budget {
		clear(c.entries)
		c.held = 0
	}
	c.entries[k] = append(c.entries[k], &cachedDef{raw: bytes.Clone(raw), cost: n, costed: cost})
	c.held += size
}

// key folds the first keyLen bytes of b into the Cache's map key;
// definitions whose keys collide are told apart by their bytes.
func key(b []byte) uint64 {
	var k uint64
	for i := 0; i < keyLen; i += 8 {
		k = (k ^ jsonraw.Word(b, i)) * 0x9E3779B97F4A7C15
	}
	return k
}
