package lb

import (
	"encoding/binary"
	"math"
)

// Shared values are compact little-endian binary. Every value starts with a version
// byte and a kind byte; a value with another version, another kind, a length that does
// not match its header, or contents out of range is treated as absent (and replaced on
// the next write), never trusted and never a panic. The layouts are listed in
// RATIONALE.md (load balancing) and pinned by golden files in testdata/values.

const valueVersion = 1

const (
	kindRotation = 'r'
	kindInflight = 'i'
	kindHealth   = 'h'
	kindStats    = 's'
	kindQPS      = 'q'
)

var le = binary.LittleEndian

func hasHeader(v []byte, kind byte, min int) bool {
	return len(v) >= min && v[0] == valueVersion && v[1] == kind
}

// grow returns dst[:n], reallocating only when dst is too small.
func grow(dst []byte, n int) []byte {
	if cap(dst) < n {
		return make([]byte, n)
	}
	return dst[:n]
}

// ---- rotation: version, kind, counter u64 ----

const rotationSize = 2 + 8

func parseRotation(v []byte) (uint64, bool) {
	if len(v) != rotationSize || !hasHeader(v, kindRotation, rotationSize) {
		return 0, false
	}
	return le.Uint64(v[2:]), true
}

func appendRotation(dst []byte, counter uint64) []byte {
	dst = append(dst, valueVersion, kindRotation)
	return le.AppendUint64(dst, counter)
}

// ---- in-flight: version, kind, n u16, n × count u32 ----

const inflightHeader = 4

// inflightView is a validated in-flight value, read and modified in place.
type inflightView []byte

// parseInflight accepts the totals alone or followed by the owner rows (m u16,
// then m × (owner u64, expires i64, n × u32); see owner.go).
func parseInflight(v []byte) (inflightView, bool) {
	if !hasHeader(v, kindInflight, inflightHeader) {
		return nil, false
	}
	n := int(le.Uint16(v[2:]))
	totals := inflightHeader + 4*n
	switch {
	case len(v) == totals:
	case len(v) >= totals+2 && len(v) == totals+2+int(le.Uint16(v[totals:]))*(ownerRowHead+4*n):
	default:
		return nil, false
	}
	return inflightView(v), true
}

// newInflight builds an all-zero value for n endpoints in dst's storage.
func newInflight(dst []byte, n int) inflightView {
	v := grow(dst, inflightHeader+4*n)
	clear(v)
	v[0], v[1] = valueVersion, kindInflight
	le.PutUint16(v[2:], uint16(n))
	return inflightView(v)
}

func (v inflightView) len() int         { return int(le.Uint16(v[2:])) }
func (v inflightView) get(i int) uint32 { return le.Uint32(v[inflightHeader+4*i:]) }

func (v inflightView) inc(i int) {
	if c := v.get(i); c < math.MaxUint32 {
		le.PutUint32(v[inflightHeader+4*i:], c+1)
	}
}

// sub decrements endpoint i by d, stopping at zero.
func (v inflightView) sub(i int, d uint32) {
	c := v.get(i)
	if d > c {
		d = c
	}
	le.PutUint32(v[inflightHeader+4*i:], c-d)
}

// ---- health: version, kind, n u16, m u16, m × entry ----
// entry: index u16, failures u16, state u8, at i64 (unix ns); sorted by index, and
// only endpoints that are not plain healthy are listed, so the common value is 6 bytes.

const (
	healthHeader    = 6
	healthEntrySize = 13
)

type healthState uint8

const (
	// healthCounting: usable; failures counts consecutive failures (0 = healthy).
	healthCounting healthState = iota
	// healthOpen: skipped until at (unix ns); then one probe may be claimed.
	healthOpen
	// healthProbing: one probe was claimed at at (unix ns) and has not reported.
	healthProbing
)

type healthEntry struct {
	failures uint16
	state    healthState
	at       int64
}

// parseHealth decodes v into dense, one entry per endpoint, and reports whether v
// is a well-formed health value for len(dense) endpoints. On false dense is left all
// healthy. It never allocates: a foreign value cannot make it grow memory.
func parseHealth(v []byte, dense []healthEntry) bool {
	clear(dense)
	if !hasHeader(v, kindHealth, healthHeader) || int(le.Uint16(v[2:])) != len(dense) {
		return false
	}
	m := int(le.Uint16(v[4:]))
	if m > len(dense) || len(v) != healthHeader+healthEntrySize*m {
		return false
	}
	prev := -1
	for k := 0; k < m; k++ {
		b := v[healthHeader+healthEntrySize*k:]
		idx := int(le.Uint16(b))
		e := healthEntry{failures: le.Uint16(b[2:]), state: healthState(b[4]), at: int64(le.Uint64(b[5:]))}
		if idx <= prev || idx >= len(dense) || e.state > healthProbing || e == (healthEntry{}) ||
			(e.state == healthCounting && e.at != 0) {
			clear(dense)
			return false
		}
		dense[idx] = e
		prev = idx
	}
	return true
}

// parseHealthUpTo is parseHealth for a dynamic pool: a value written for fewer
// slots than len(dense) is accepted (the slots it lacks are healthy).
func parseHealthUpTo(v []byte, dense []healthEntry) bool {
	if !hasHeader(v, kindHealth, healthHeader) {
		clear(dense)
		return false
	}
	n := int(le.Uint16(v[2:]))
	if n > len(dense) {
		clear(dense)
		return false
	}
	clear(dense[n:])
	return parseHealth(v, dense[:n])
}

func appendHealth(dst []byte, dense []healthEntry) []byte {
	m := 0
	for _, e := range dense {
		if e != (healthEntry{}) {
			m++
		}
	}
	dst = append(dst, valueVersion, kindHealth)
	dst = le.AppendUint16(dst, uint16(len(dense)))
	dst = le.AppendUint16(dst, uint16(m))
	for i, e := range dense {
		if e == (healthEntry{}) {
			continue
		}
		dst = le.AppendUint16(dst, uint16(i))
		dst = le.AppendUint16(dst, e.failures)
		dst = append(dst, byte(e.state))
		dst = le.AppendUint64(dst, uint64(e.at))
	}
	return dst
}

// ---- engine stats: version, kind, n u16, n × entry ----
// entry: observed i64 (unix ns, 0 = never), running f32, waiting f32, kv usage f32.

const (
	statsHeader    = 4
	statsEntrySize = 20
)

// statsView is a validated stats value, read and modified in place.
type statsView []byte

func parseStats(v []byte) (statsView, bool) {
	if !hasHeader(v, kindStats, statsHeader) || len(v) != statsHeader+statsEntrySize*int(le.Uint16(v[2:])) {
		return nil, false
	}
	for off := statsHeader; off < len(v); off += statsEntrySize {
		for f := off + 8; f < off+statsEntrySize; f += 4 {
			// Finite and >= 0 as bits: +0 up to the largest float32, or -0.
			if u := le.Uint32(v[f:]); u >= 0x7f800000 && u != 0x80000000 {
				return nil, false
			}
		}
	}
	return statsView(v), true
}

func newStats(dst []byte, n int) statsView {
	v := grow(dst, statsHeader+statsEntrySize*n)
	clear(v)
	v[0], v[1] = valueVersion, kindStats
	le.PutUint16(v[2:], uint16(n))
	return statsView(v)
}

func (v statsView) len() int { return int(le.Uint16(v[2:])) }

// widenStats returns v with n >= v.len() entries, the new ones never observed.
func widenStats(dst []byte, v statsView, n int) statsView {
	w := newStats(dst, n)
	copy(w[statsHeader:], v[statsHeader:])
	return w
}

// get returns endpoint i's stats and observation time (unix ns, 0 = never stored).
func (v statsView) get(i int) (EngineStats, int64) {
	b := v[statsHeader+statsEntrySize*i:]
	return EngineStats{
		Running:      float64(math.Float32frombits(le.Uint32(b[8:]))),
		Waiting:      float64(math.Float32frombits(le.Uint32(b[12:]))),
		KVCacheUsage: float64(math.Float32frombits(le.Uint32(b[16:]))),
	}, int64(le.Uint64(b))
}

// queue returns endpoint i's observation time, running and waiting requests.
func (v statsView) queue(i int) (observed int64, running, waiting float64) {
	b := v[statsHeader+statsEntrySize*i:]
	return int64(le.Uint64(b)), float64(math.Float32frombits(le.Uint32(b[8:]))),
		float64(math.Float32frombits(le.Uint32(b[12:])))
}

// set stores s for endpoint i; values must be finite and >= 0 (see PutStats), and
// are saturated to the float32 range.
func (v statsView) set(i int, s EngineStats, observed int64) {
	b := v[statsHeader+statsEntrySize*i:]
	le.PutUint64(b, uint64(observed))
	for k, x := range [3]float64{s.Running, s.Waiting, s.KVCacheUsage} {
		le.PutUint32(b[8+4*k:], math.Float32bits(float32(min(x, math.MaxFloat32))))
	}
}

// ---- qps window: version, kind, n u16, buckets u8, width i64 (ns), head i64,
// n × total u32, buckets × n × count u16 ----
// head is the bucket number (unix ns / width) of the newest bucket; bucket number e
// lives in slot e mod buckets; totals are the per-endpoint sums of all slots.

const (
	qpsBuckets = 10
	qpsHeader  = 2 + 2 + 1 + 8 + 8
)

type qpsView []byte

func qpsSize(n int) int { return qpsHeader + 4*n + 2*qpsBuckets*n }

func parseQPS(v []byte) (qpsView, bool) {
	if !hasHeader(v, kindQPS, qpsHeader) || v[4] != qpsBuckets || len(v) != qpsSize(int(le.Uint16(v[2:]))) {
		return nil, false
	}
	q := qpsView(v)
	if q.width() <= 0 {
		return nil, false
	}
	return q, true
}

func newQPS(dst []byte, n int, width, head int64) qpsView {
	v := grow(dst, qpsSize(n))
	clear(v)
	v[0], v[1] = valueVersion, kindQPS
	le.PutUint16(v[2:], uint16(n))
	v[4] = qpsBuckets
	le.PutUint64(v[5:], uint64(width))
	le.PutUint64(v[13:], uint64(head))
	return qpsView(v)
}

func (q qpsView) len() int { return int(le.Uint16(q[2:])) }

// widenQPS returns q with n >= q.len() endpoints (same width and head), the new
// ones with no requests.
func widenQPS(q qpsView, n int) []byte {
	w := newQPS(nil, n, q.width(), q.head())
	m := q.len()
	copy(w[qpsHeader:], q[qpsHeader:qpsHeader+4*m])
	for b := int64(0); b < qpsBuckets; b++ {
		copy(w[w.slotOffset(b, 0):], q[q.slotOffset(b, 0):q.slotOffset(b, 0)+2*m])
	}
	return w
}
func (q qpsView) width() int64       { return int64(le.Uint64(q[5:])) }
func (q qpsView) head() int64        { return int64(le.Uint64(q[13:])) }
func (q qpsView) total(i int) uint32 { return le.Uint32(q[qpsHeader+4*i:]) }

func (q qpsView) slotOffset(bucket int64, i int) int {
	slot := int(uint64(bucket) % qpsBuckets)
	return qpsHeader + 4*q.len() + 2*(slot*q.len()+i)
}

// advance moves the window so that bucket is the newest, emptying the buckets that
// fall out, and recomputes the totals from the buckets (which also repairs totals
// that do not match, e.g. after a foreign write).
func (q qpsView) advance(bucket int64) {
	head := q.head()
	if bucket <= head {
		return
	}
	steps := min(bucket-head, qpsBuckets)
	n := q.len()
	for s := int64(1); s <= steps; s++ {
		off := q.slotOffset(head+s, 0)
		clear(q[off : off+2*n])
	}
	le.PutUint64(q[13:], uint64(bucket))
	for i := 0; i < n; i++ {
		var sum uint32
		for b := int64(0); b < qpsBuckets; b++ {
			sum += uint32(le.Uint16(q[q.slotOffset(b, i):]))
		}
		le.PutUint32(q[qpsHeader+4*i:], sum)
	}
}

// record counts one request for endpoint i in the newest bucket (saturating).
func (q qpsView) record(i int) {
	off := q.slotOffset(q.head(), i)
	if c := le.Uint16(q[off:]); c < math.MaxUint16 {
		le.PutUint16(q[off:], c+1)
		if t := q.total(i); t < math.MaxUint32 {
			le.PutUint32(q[qpsHeader+4*i:], t+1)
		}
	}
}
