package lb

import (
	"math"
	"slices"
	"time"
)

// In-flight counts outlive the VM that took them: a VM that traps is never
// called again, so its leases are never released. The in-flight value
// therefore keeps, after the per-endpoint totals, one row per owner (a VM)
// with that owner's counts and the time its row expires. The owner moves the
// expiry forward with every write it makes and with [Balancer.Heartbeat] on
// its tick; a row past its expiry is ignored by every reader and dropped by
// the next writer, and the totals are always recomputed from the live rows.
// A dead VM's counts therefore stop counting at most one TTL after its last
// write or heartbeat, without a per-request shared-data call more than
// before (a pick and a release are still one read and one write each).
//
// Rows with nothing in flight are dropped, so the value holds one row per VM
// with requests in flight, at most maxOwnerRows.

const (
	// DefaultOwnerTTL is the owner TTL the filter uses: a VM that neither
	// picked, released nor ticked for this long is gone. Ticks run every
	// second at most, so a live VM refreshes its rows well within it.
	DefaultOwnerTTL = 10 * time.Second
	// maxOwnerRows bounds the rows of one in-flight value; when full, the
	// row that expires first makes room.
	maxOwnerRows = 256
	ownerRowHead = 16 // owner u64, expires i64 (unix ns)
	neverExpires = math.MaxInt64
)

// SetOwner names the VM this balancer's leases belong to and how long its
// in-flight counts stay valid after its last write or heartbeat. Give every
// balancer of a VM the same id, also across configuration reloads in the
// VM, and a fresh id to a new VM; call [Balancer.Heartbeat] more often than
// ttl/2. ttl 0 (the default, with owner 0) never expires counts: for callers
// whose balancers live as long as their process.
func (b *Balancer) SetOwner(id uint64, ttl time.Duration) {
	if ttl < 0 {
		ttl = 0
	}
	b.owner, b.ownerTTL = id, ttl
}

// Heartbeat keeps this owner's in-flight counts alive and drops the rows of
// owners that stopped (a VM that trapped). Call it from every VM's tick. It
// reads the in-flight value once and writes it only when this owner's row
// was refreshed more than a quarter TTL ago or some row has expired. It
// returns ErrNotRecorded if a needed write could not be made.
func (b *Balancer) Heartbeat(now time.Time) error {
	t := now.UnixNano()
	err := b.renewProbes(t)
	if !b.cfg.Strategy.countsInflight() {
		return err
	}
	cur := b.read(b.keys.inflight)
	if !b.needsBeat(cur, t) {
		return nil
	}
	_, ok := b.update(b.keys.inflight, func(cur []byte) []byte {
		v, own := b.live(cur, t, false)
		b.payDebt(v, own)
		return dropEmpty(v, own)
	})
	b.settleDebt(ok)
	if !ok {
		return ErrNotRecorded
	}
	return err
}

// probeTTL is how long a probe claim holds without renewal: the owner TTL
// when this VM has one (owners renew their claims on Heartbeat), else
// probeExpiry.
func (b *Balancer) probeTTL() int64 {
	if b.ownerTTL > 0 && b.owner != 0 {
		return int64(b.ownerTTL)
	}
	return int64(probeExpiry)
}

// renewProbes moves the claim time of this VM's outstanding probes to t,
// every quarter TTL, so that a live probe (a slow first token) keeps its
// slot while the probe of a VM that died is freed one TTL after its last
// renewal. A claim another VM has taken over is forgotten.
func (b *Balancer) renewProbes(t int64) error {
	if len(b.probes) == 0 || t-b.probeBeat < int64(b.ownerTTL/4) || b.cfg.FailureThreshold == 0 {
		return nil
	}
	var renewed []*Lease
	_, ok := b.update(b.keys.health, func(cur []byte) []byte {
		renewed = renewed[:0]
		b.decodeHealth(cur)
		for _, l := range b.probes {
			if e := &b.health[l.Index]; e.state == healthProbing && e.at == l.probeAt {
				e.at = t
				renewed = append(renewed, l)
			}
		}
		if len(renewed) == 0 {
			return nil
		}
		b.buf = appendHealth(b.buf[:0], b.health)
		return b.buf
	})
	if !ok {
		return ErrNotRecorded
	}
	b.probeBeat = t
	for _, l := range renewed {
		l.probeAt = t
	}
	b.probes = append(b.probes[:0], renewed...)
	return nil
}

// dropProbe forgets lease l as an outstanding probe of this VM.
func (b *Balancer) dropProbe(l *Lease) {
	if l.Decision != ByProbe {
		return
	}
	for i, p := range b.probes {
		if p == l {
			b.probes = slices.Delete(b.probes, i, i+1)
			return
		}
	}
}

// needsBeat reports whether cur has an expired row, a row of this owner due
// for refresh, or totals that do not match its live rows.
func (b *Balancer) needsBeat(cur []byte, t int64) bool {
	v, ok := parseInflight(cur)
	if !ok || !b.fits(v.len()) {
		return b.owed
	}
	if b.owed {
		return true
	}
	fresh := b.expiry(t)
	n := v.len()
	var sum uint64
	for r := range v.rows() {
		row := v.row(r)
		exp := int64(le.Uint64(row[8:]))
		switch {
		case exp < t:
			return true
		case le.Uint64(row) == b.owner && fresh != neverExpires && fresh-exp >= int64(b.ownerTTL/4):
			return true
		}
		for i := range n {
			sum += uint64(le.Uint32(row[ownerRowHead+4*i:]))
		}
	}
	var total uint64
	for i := range n {
		total += uint64(v.get(i))
	}
	return total != sum
}

// expiry is the expiry this owner writes at t.
func (b *Balancer) expiry(t int64) int64 {
	if b.ownerTTL == 0 || t > neverExpires-int64(b.ownerTTL) || b.owner == 0 {
		return neverExpires
	}
	return t + int64(b.ownerTTL)
}

// live rebuilds cur (nil or garbage reads as empty) into this balancer's
// scratch as of t: rows expired at t and rows with nothing in flight are
// dropped, this owner's row is refreshed to expire ttl after t (and created
// if create), and the totals are the sums of the rows kept. It returns the
// value and the index of this owner's row (-1 if none).
func (b *Balancer) live(cur []byte, t int64, create bool) (inflightView, int) {
	src, ok := parseInflight(cur)
	if !ok || !b.fits(src.len()) { // fits may widen a dynamic pool first
		src = nil
	}
	n := b.n()
	size := ownerRowHead + 4*n
	if src != nil && src.len() < n {
		src = b.widenInflight(src)
	}
	m := 0
	if src != nil {
		m = src.rows()
	}
	var legacy []byte
	if src != nil && m == 0 && !zeroCounts(src[inflightHeader:]) {
		// Totals without rows (written before owners existed): an owner-0
		// row that never expires keeps them.
		legacy = grow(b.legacy, size)
		b.legacy = legacy
		clear(legacy)
		le.PutUint64(legacy[8:], neverExpires)
		copy(legacy[ownerRowHead:], src[inflightHeader:])
		m = 1
	}
	dst := grow(b.ibuf, inflightHeader+4*n+2+(m+1)*size)
	b.ibuf = dst
	clear(dst[:inflightHeader+4*n])
	dst[0], dst[1] = valueVersion, kindInflight
	le.PutUint16(dst[2:], uint16(n))
	rows := dst[inflightHeader+4*n+2:]
	kept, own := 0, -1
	for r := range m {
		var row []byte
		if legacy != nil {
			row = legacy
		} else {
			row = src.row(r)
		}
		id, exp := le.Uint64(row), int64(le.Uint64(row[8:]))
		if exp < t {
			continue
		}
		if zeroCounts(row[ownerRowHead:]) && (id != b.owner || !create) {
			continue
		}
		if id == b.owner {
			exp = b.expiry(t)
		}
		out := rows[kept*size : (kept+1)*size]
		copy(out, row)
		le.PutUint64(out[8:], uint64(exp))
		if id == b.owner {
			own = kept
		}
		kept++
	}
	if own < 0 && create {
		if kept == maxOwnerRows {
			kept = dropFirstExpiring(rows, kept, size)
		}
		out := rows[kept*size : (kept+1)*size]
		clear(out)
		le.PutUint64(out, b.owner)
		le.PutUint64(out[8:], uint64(b.expiry(t)))
		own = kept
		kept++
	}
	for r := range kept {
		row := rows[r*size:]
		for i := range n {
			c := uint64(le.Uint32(dst[inflightHeader+4*i:])) + uint64(le.Uint32(row[ownerRowHead+4*i:]))
			le.PutUint32(dst[inflightHeader+4*i:], uint32(min(c, math.MaxUint32)))
		}
	}
	if kept == 0 {
		return inflightView(dst[:inflightHeader+4*n]), -1
	}
	le.PutUint16(dst[inflightHeader+4*n:], uint16(kept))
	return inflightView(dst[:inflightHeader+4*n+2+kept*size]), own
}

// dropEmpty removes row own from v if it holds nothing, so an idle pool's
// value is its totals alone.
func dropEmpty(v inflightView, own int) inflightView {
	if own < 0 || !zeroCounts(v.row(own)[ownerRowHead:]) {
		return v
	}
	n := v.len()
	size := ownerRowHead + 4*n
	m := v.rows()
	rows := v[inflightHeader+4*n+2:]
	copy(rows[own*size:], rows[(own+1)*size:m*size])
	if m == 1 {
		return v[:inflightHeader+4*n]
	}
	le.PutUint16(v[inflightHeader+4*n:], uint16(m-1))
	return v[:len(v)-size]
}

// dropFirstExpiring removes the row that expires first from rows[:k*size]
// and returns k-1.
func dropFirstExpiring(rows []byte, k, size int) int {
	first := 0
	for r := 1; r < k; r++ {
		if le.Uint64(rows[r*size+8:]) < le.Uint64(rows[first*size+8:]) {
			first = r
		}
	}
	copy(rows[first*size:], rows[(first+1)*size:k*size])
	return k - 1
}

func zeroCounts(c []byte) bool {
	for _, x := range c {
		if x != 0 {
			return false
		}
	}
	return true
}

// rows is the number of owner rows (0 for a value without the section).
func (v inflightView) rows() int {
	n := inflightHeader + 4*v.len()
	if len(v) <= n {
		return 0
	}
	return int(le.Uint16(v[n:]))
}

// row returns owner row r: owner, expires, then one count per endpoint.
func (v inflightView) row(r int) []byte {
	size := ownerRowHead + 4*v.len()
	off := inflightHeader + 4*v.len() + 2 + r*size
	return v[off : off+size]
}

// addOwn adds d (±1 or a debt) to endpoint i in row own and in the totals,
// stopping at zero.
func (v inflightView) addOwn(own, i int, d int64) {
	if own < 0 {
		return
	}
	row := v.row(own)
	c := int64(le.Uint32(row[ownerRowHead+4*i:]))
	if c+d < 0 {
		d = -c
	}
	if c+d > math.MaxUint32 {
		d = math.MaxUint32 - c
	}
	le.PutUint32(row[ownerRowHead+4*i:], uint32(c+d))
	total := min(max(int64(v.get(i))+d, 0), math.MaxUint32)
	le.PutUint32(v[inflightHeader+4*i:], uint32(total))
}

// widenInflight copies v, narrower than this dynamic pool (written by a VM
// that knew fewer slots), into b.wbuf at the pool's width: the new slots'
// totals and row counts are zero.
func (b *Balancer) widenInflight(v inflightView) inflightView {
	w, n, rows := v.len(), b.n(), v.rows()
	size := ownerRowHead + 4*n
	dst := grow(b.wbuf, inflightHeader+4*n+2+rows*size)
	b.wbuf = dst
	clear(dst)
	copy(dst, v[:inflightHeader+4*w])
	le.PutUint16(dst[2:], uint16(n))
	if rows == 0 {
		return inflightView(dst[:inflightHeader+4*n])
	}
	le.PutUint16(dst[inflightHeader+4*n:], uint16(rows))
	for r := range rows {
		copy(dst[inflightHeader+4*n+2+r*size:], v.row(r))
	}
	return inflightView(dst)
}

// clearSlot zeroes slot i's total and every owner's count of it.
func (v inflightView) clearSlot(i int) {
	le.PutUint32(v[inflightHeader+4*i:], 0)
	for r := range v.rows() {
		le.PutUint32(v.row(r)[ownerRowHead+4*i:], 0)
	}
}
