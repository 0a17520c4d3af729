// Package prefix owns pdroute's prefix index: which endpoints recently
// served which prompt prefixes, shared by every VM of an Envoy process
// through an [lb.Store] (proxy-wasm shared data in the filter, lb.MemStore in
// tests and the simulator).
//
// A prompt is rendered (render.go) and cut into fixed-size blocks whose
// hashes are chained: the hash of block i stands for the whole prefix up to
// it. The index does not store every block. It stores sample points, two per
// octave of the prompt's length in blocks (1, 2, 3, 4, 6, 8, 12, 16, …, and
// the prompt's last full block), each in one of a fixed number of slots
// (shared-data keys) chosen by the point's hash. A slot is a small record of
// at most [Ways] prefixes, each with at most [PerEntry] endpoints and the
// second each last served it. A new prefix replaces the slot's least recently
// served one, so the index holds at most Slots keys of at most
// [MaxRecordBytes] bytes, whatever the traffic.
//
// Because a prefix's points are written together, "some endpoint holds point
// j" is (up to replacements) monotone in j, and a lookup binary-searches the
// points: about log2(2 log2(blocks)) reads, 5 for a 55k-token prompt. A
// record writes every point with a bounded compare-and-swap, skipping points
// the endpoints already refreshed in the same second.
//
// Nothing here imports proxy-wasm, starts goroutines or reads the clock:
// now is passed in. An Index is one VM's handle (scratch buffers); it is not
// safe for concurrent use, while any number of Indexes may share a Store.
package prefix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"time"
	"unsafe"

	"github.com/pdroute/pdroute/lb"
)

const (
	// Ways is how many prefixes one slot holds.
	Ways = 4
	// PerEntry is how many endpoints one prefix remembers (the most recent).
	PerEntry = 8
	// recordVersion is a record's first byte.
	recordVersion = 1
	// MaxRecordBytes is the largest record: version, count, Ways entries of
	// hash, count and PerEntry (id, second) pairs.
	MaxRecordBytes = 2 + Ways*(8+1+PerEntry*8)
	// casAttempts bounds a slot's read-modify-write.
	casAttempts = 8
	anchorKey   = "px/anchor"
)

// Params sizes the index. Start from [DefaultParams].
type Params struct {
	// BlockBytes is the rendered prompt bytes per block (about a quarter as
	// many tokens). Default 512: 128 tokens, 8 vLLM blocks.
	BlockBytes int
	// Slots is the number of shared-data keys. Default 4096: with Ways 4,
	// room for 16k prefixes (points), about 1.2 MB at most.
	Slots int
	// TTL: an endpoint that has not served a prefix for this long is taken
	// not to hold it any more. Default 10 min.
	TTL time.Duration
}

// DefaultParams returns the defaults above.
func DefaultParams() Params {
	return Params{BlockBytes: 512, Slots: 4096, TTL: 10 * time.Minute}
}

// Validate checks the parameters' ranges.
func (p Params) Validate() error {
	switch {
	case p.BlockBytes < 64 || p.BlockBytes > 1<<20:
		return errors.New("block_bytes must be in [64, 1048576]")
	case p.Slots < 1 || p.Slots > 1<<20:
		return errors.New("slots must be in [1, 1048576]")
	case p.TTL < time.Second:
		return errors.New("ttl must be >= 1 s")
	}
	return nil
}

// MaxBytes bounds the shared data the index can ever hold: every slot at
// its largest record, plus the anchor key.
func (p Params) MaxBytes() int { return p.Slots*MaxRecordBytes + 1 }

// EndpointID is an endpoint's identity in the index: a hash of its name, so
// entries survive reloads that reorder pools, and both pools share one index
// (names are unique across pools).
func EndpointID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	if v := h.Sum32(); v != 0 {
		return v
	}
	return 1
}

// Index is one VM's handle on the shared index.
type Index struct {
	store lb.Store
	// slots reads the slots into a kept buffer: a lookup and a record read
	// one per sample point, each parsed (record.parse copies what it
	// keeps) before the next.
	slots  lb.KeptReader
	p      Params
	anchor uint32
	rec    record
	buf    []byte
	key    []byte
	points []int
	// seen are the slots the last Lookup read, and seenAt its second: a
	// Record in that second starts from these reads rather than reading
	// the slots again (the filter, the native proxy and the simulator
	// record the endpoints they chose for the prompt they just looked up).
	// Its writes pass the cas read, so a slot changed since is read again.
	// sbuf holds their values.
	seen   []seenSlot
	seenAt uint32
	sbuf   []byte
}

// seenSlot is a slot read by Lookup: the point's hash (the slot is
// x.slot(h)), its cas and its value (sbuf[off:end]; absent when the key
// was not found).
type seenSlot struct {
	h             uint64
	cas           uint32
	off, end      int
	absent, spent bool
}

// New returns a handle on the index kept in store.
func New(store lb.Store, p Params) (*Index, error) {
	if store == nil {
		return nil, errors.New("prefix: store is required")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("prefix: %v", err)
	}
	return &Index{store: store, slots: lb.NewKeptReader(store, MaxRecordBytes), p: p}, nil
}

// Params returns the index's parameters.
func (x *Index) Params() Params { return x.p }

// Hit is one endpoint's longest cached prefix found by a lookup.
type Hit struct {
	ID     uint32
	Blocks int
}

// Match is a lookup's result.
type Match struct {
	// Blocks and Bytes are the prompt's full blocks and rendered length.
	Blocks, Bytes int
	// BlockBytes is the index's block size.
	BlockBytes int
	// Hits are the endpoints found, with their longest prefix in blocks.
	Hits []Hit
	// Reads is how many shared-data reads the lookup made.
	Reads int
}

// CachedBytes is the rendered bytes of the prompt endpoint id is known to
// hold (0 if none).
func (m *Match) CachedBytes(id uint32) int {
	for _, h := range m.Hits {
		if h.ID == id {
			return min(h.Blocks*m.BlockBytes, m.Bytes)
		}
	}
	return 0
}

// CachedShare is the fraction of the rendered prompt endpoint id holds.
func (m *Match) CachedShare(id uint32) float64 {
	if m.Bytes == 0 {
		return 0
	}
	return float64(m.CachedBytes(id)) / float64(m.Bytes)
}

// PerEndpoint fills dst[i] with the cached bytes of ids[i] and returns it.
func (m *Match) PerEndpoint(ids []uint32, dst []int) []int {
	dst = dst[:0]
	for _, id := range ids {
		dst = append(dst, m.CachedBytes(id))
	}
	return dst
}

// samplePoints returns the block counts sampled for a prompt of n full
// blocks, ascending: 1, 2, 3, 4, 6, 8, 12, … below n, and n.
func (x *Index) samplePoints(n int) []int {
	pts := x.points[:0]
	for a := 1; a < n; a *= 2 {
		pts = append(pts, a)
		if b := a + a/2; a >= 2 && b < n {
			pts = append(pts, b)
		}
	}
	if n > 0 {
		pts = append(pts, n)
	}
	x.points = pts
	return pts
}

// Lookup finds, for p, the endpoints that recently served its longest
// sampled prefixes, with a binary search over the sample points.
func (x *Index) Lookup(p *Prompt, now time.Time, m *Match) {
	m.Blocks, m.Bytes, m.BlockBytes, m.Hits, m.Reads = len(p.Hashes), p.Bytes, x.p.BlockBytes, m.Hits[:0], 0
	pts := x.samplePoints(len(p.Hashes))
	oldest := stamp(now.Add(-x.p.TTL))
	lo, hi := -1, len(pts) // pts[lo] known held by someone, pts[hi] known not
	x.seen, x.sbuf, x.seenAt = x.seen[:0], x.sbuf[:0], stamp(now)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		blocks := pts[mid]
		h := p.Hashes[blocks-1]
		v, cas, err := x.slots.Read(x.slotKey(h))
		m.Reads++
		x.keep(h, v, cas, err)
		found := false
		if err == nil && x.rec.parse(v) {
			if e := x.rec.find(h); e >= 0 {
				for _, ep := range x.rec.entries[e].eps[:x.rec.entries[e].n] {
					if ep.at < oldest {
						continue
					}
					found = true
					m.add(ep.id, blocks)
				}
			}
		}
		if found {
			lo = mid
		} else {
			hi = mid
		}
	}
}

// keep notes a Lookup's read of h's slot for the Record that may follow.
func (x *Index) keep(h uint64, v []byte, cas uint32, err error) {
	if err != nil && !errors.Is(err, lb.ErrNotFound) {
		return
	}
	off := len(x.sbuf)
	x.sbuf = append(x.sbuf, v...)
	x.seen = append(x.seen, seenSlot{h: h, cas: cas, off: off, end: len(x.sbuf), absent: err != nil})
}

// seenRead is the unspent read of h's slot that the last Lookup made in
// second s, if any.
func (x *Index) seenRead(h uint64, s uint32) *seenSlot {
	if s != x.seenAt {
		return nil
	}
	for i := range x.seen {
		if r := &x.seen[i]; r.h == h && !r.spent {
			return r
		}
	}
	return nil
}

// spend marks every kept read of slot as used: once a Record has read or
// written that slot, the kept value of another point in it is out of date.
func (x *Index) spend(slot uint32) {
	for i := range x.seen {
		if x.slot(x.seen[i].h) == slot {
			x.seen[i].spent = true
		}
	}
}

func (m *Match) add(id uint32, blocks int) {
	for i := range m.Hits {
		if m.Hits[i].ID == id {
			m.Hits[i].Blocks = max(m.Hits[i].Blocks, blocks)
			return
		}
	}
	m.Hits = append(m.Hits, Hit{ID: id, Blocks: blocks})
}

// ErrNotRecorded: a slot kept changing for casAttempts reads in a row, or
// the store failed. The index stays consistent; it just misses this update.
var ErrNotRecorded = errors.New("prefix: slot not updated (contention or store failure)")

// Record notes that the endpoints ids serve p from now (the decoder, and
// the prefiller of a disaggregated request): every sample point of p gets
// them as its most recent endpoints, in one read-modify-write per point. It
// returns the shared-data calls made (reads and writes) and ErrNotRecorded
// if some point was not written.
func (x *Index) Record(p *Prompt, now time.Time, ids ...uint32) (calls int, err error) {
	s := stamp(now)
	oldest := stamp(now.Add(-x.p.TTL))
	for _, blocks := range x.samplePoints(len(p.Hashes)) {
		h := p.Hashes[blocks-1]
		c, ok := x.recordPoint(h, ids, s, oldest)
		calls += c
		if !ok {
			err = ErrNotRecorded
		}
	}
	x.seen = x.seen[:0]
	return calls, err
}

func (x *Index) recordPoint(h uint64, ids []uint32, s, oldest uint32) (calls int, ok bool) {
	key := x.slotKey(h)
	seen := x.seenRead(h, s)
	x.spend(x.slot(h)) // read or written below: no other point's kept read of it holds
	for range casAttempts {
		var v []byte
		var cas uint32
		var err error
		if seen != nil {
			// the Lookup's read, as if made now
			v, cas = x.sbuf[seen.off:seen.end], seen.cas
			if seen.absent {
				err = lb.ErrNotFound
			}
			seen = nil
		} else {
			v, cas, err = x.slots.Read(key)
			calls++
		}
		switch {
		case errors.Is(err, lb.ErrNotFound):
			v, cas = nil, x.absentCAS(&calls)
		case err != nil:
			return calls, false
		}
		if !x.rec.parse(v) {
			x.rec.n = 0 // absent or garbage: start empty
		}
		changed := false
		for _, id := range ids {
			changed = x.rec.touch(h, id, s, oldest) || changed
		}
		if !changed {
			return calls, true // all already fresh this second
		}
		x.buf = x.rec.append(x.buf[:0])
		err = x.store.Set(key, x.buf, cas)
		calls++
		if err == nil {
			return calls, true
		}
		if !errors.Is(err, lb.ErrCasMismatch) {
			return calls, false
		}
	}
	return calls, false
}

// absentCAS is the cas that creates a key only if it is still absent: the
// cas of this VM's own write of the anchor key, which no other key has (as
// lb does for its keys).
func (x *Index) absentCAS(calls *int) uint32 {
	if x.anchor == 0 {
		if _, _, err := x.store.Get(anchorKey); errors.Is(err, lb.ErrNotFound) {
			_ = x.store.Set(anchorKey, []byte{recordVersion}, 0)
			*calls++
		}
		if _, cas, err := x.store.Get(anchorKey); err == nil {
			x.anchor = cas
		}
		*calls += 2
	}
	return x.anchor
}

// slotKey builds the key of h's slot in x.key and returns it as a string
// that shares x.key's bytes, valid until the next slotKey (a store keeps no
// key it is passed: lb.Store). Each sample point of a lookup or a record
// reads a slot, so a copy per key would be an allocation per read.
func (x *Index) slotKey(h uint64) string {
	x.key = appendDecimal(append(x.key[:0], "px/"...), x.slot(h))
	return unsafe.String(unsafe.SliceData(x.key), len(x.key))
}

// slot is the number of h's slot.
func (x *Index) slot(h uint64) uint32 { return uint32((h >> 17) % uint64(x.p.Slots)) }

// appendDecimal appends v in decimal, as strconv.AppendUint does. In wasm
// strconv's general code (any base, 64-bit halving) is most of the cost of
// a slot's key: its instructions are fetched afresh for every read of a
// lookup or a record.
func appendDecimal(b []byte, v uint32) []byte {
	var d [10]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// stamp is a time in whole seconds (uint32 lasts until 2106).
func stamp(t time.Time) uint32 {
	s := t.Unix()
	if s < 0 {
		return 0
	}
	return uint32(s)
}

// ---- the slot record ----
//
// version u8, n u8 (≤ Ways), then n entries: hash u64, m u8 (≤ PerEntry),
// m × (endpoint id u32, second u32), most recent endpoint first. Anything
// else (another version, a count out of range, a length that does not add
// up) is treated as an empty slot and replaced on the next write.

type endpointAt struct{ id, at uint32 }

type entry struct {
	hash uint64
	n    int
	eps  [PerEntry]endpointAt
}

// newest is the entry's most recent second.
func (e *entry) newest() uint32 {
	var t uint32
	for _, ep := range e.eps[:e.n] {
		t = max(t, ep.at)
	}
	return t
}

type record struct {
	n       int
	entries [Ways]entry
}

var le = binary.LittleEndian

// parse decodes v into r; false (r empty) when v is not a valid record.
func (r *record) parse(v []byte) bool {
	r.n = 0
	if len(v) < 2 || v[0] != recordVersion || int(v[1]) > Ways {
		return false
	}
	n, i := int(v[1]), 2
	for k := range n {
		if len(v) < i+9 {
			r.n = 0
			return false
		}
		e := &r.entries[k]
		e.hash, e.n = le.Uint64(v[i:]), int(v[i+8])
		i += 9
		if e.n > PerEntry || len(v) < i+8*e.n {
			r.n = 0
			return false
		}
		for j := range e.n {
			e.eps[j] = endpointAt{le.Uint32(v[i:]), le.Uint32(v[i+4:])}
			i += 8
		}
	}
	if i != len(v) {
		return false
	}
	r.n = n
	return true
}

func (r *record) append(dst []byte) []byte {
	dst = append(dst, recordVersion, byte(r.n))
	for _, e := range r.entries[:r.n] {
		dst = le.AppendUint64(dst, e.hash)
		dst = append(dst, byte(e.n))
		for _, ep := range e.eps[:e.n] {
			dst = le.AppendUint32(dst, ep.id)
			dst = le.AppendUint32(dst, ep.at)
		}
	}
	return dst
}

func (r *record) find(h uint64) int {
	for k := range r.entries[:r.n] {
		if r.entries[k].hash == h {
			return k
		}
	}
	return -1
}

// touch makes id the most recent endpoint of prefix h at second s, adding
// the prefix in place of the least recently served one (or of one whose
// endpoints all expired) when the slot is full. It reports false when there
// is nothing to write: id already served h this second.
func (r *record) touch(h uint64, id, s, oldest uint32) bool {
	k := r.find(h)
	if k < 0 {
		if r.n < Ways {
			k = r.n
			r.n++
		} else {
			k = 0
			for j := 1; j < r.n; j++ {
				if r.entries[j].newest() < r.entries[k].newest() {
					k = j
				}
			}
		}
		r.entries[k] = entry{hash: h}
	}
	e := &r.entries[k]
	for _, ep := range e.eps[:e.n] {
		if ep.id == id && ep.at >= s {
			return false // its order among this second's endpoints does not matter
		}
	}
	// Rebuild: id first, then the others still within the TTL, in order.
	out := [PerEntry]endpointAt{{id, s}}
	n := 1
	for _, ep := range e.eps[:e.n] {
		if ep.id != id && ep.at >= oldest && n < PerEntry {
			out[n] = ep
			n++
		}
	}
	e.eps, e.n = out, n
	return true
}
