package kvbridge

import (
	"errors"
	"math"
	"sync"
	"time"
)

var (
	errShuttingDown   = errors.New("kvbridge is shutting down")
	errTooManyWaiters = errors.New("too many waiters")
)

// idCount is a req_id with the number of notifications received for it, as
// the HTTP API reports it.
type idCount struct {
	ReqID string `json:"req_id"`
	Count uint32 `json:"count"`
}

// want is one id a waiter waits for, with the count that makes it ready.
type want struct {
	id   string
	need uint32
}

// waiter is one long-poll request. It is registered under each of its ids
// until the receiver wakes it, it is cancelled, or the store closes.
type waiter struct {
	wants []want
	done  chan struct{} // closed when woken or when the store closes
	// Set under the store lock before done is closed.
	ready    []idCount // every want that was ready at wake time, in want order
	wokeAt   time.Time // real time of the wake, for the latency histogram
	shutdown bool
}

// registration is a waiter's entry under one id.
type registration struct {
	w    *waiter
	need uint32
}

// entry is the state of one req_id.
type entry struct {
	id    string
	first int64 // first-seen time, Unix nanoseconds of the store's clock
	count uint32
}

// store holds per-req_id notification counts and the waiters on them, under
// one mutex. Entries live in a ring in first-seen order; the index maps an id
// to its entry's sequence number. TTL expiry and capacity eviction both
// remove the oldest entry, so both are pops from the ring's head, and a
// repeated notification updates its entry in place without allocating.
type store struct {
	ttl        time.Duration
	maxEntries int
	maxWaiters int

	mu       sync.Mutex
	index    map[string]uint64
	ring     ring
	peak     int // most entries since the index was last rebuilt
	waiters  map[string][]registration
	nWaiters int
	closed   bool
	evicted  uint64
	expired  uint64
}

func newStore(ttl time.Duration, maxEntries, maxWaiters int) *store {
	return &store{
		ttl:        ttl,
		maxEntries: maxEntries,
		maxWaiters: maxWaiters,
		index:      make(map[string]uint64),
		waiters:    make(map[string][]registration),
	}
}

// notify records one notification for id (a slice the caller may reuse) at
// time now, and wakes every waiter it makes ready. It reports how many it
// woke.
func (s *store) notify(id []byte, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	var e *entry
	if seq, ok := s.index[string(id)]; ok {
		e = s.ring.at(seq)
		if e.count < math.MaxUint32 {
			e.count++
		}
	} else {
		if len(s.index) >= s.maxEntries {
			delete(s.index, s.ring.pop().id)
			s.evicted++
		}
		key := string(id)
		seq := s.ring.push(entry{id: key, first: now.UnixNano(), count: 1})
		s.index[key] = seq
		s.peak = max(s.peak, len(s.index))
		e = s.ring.at(seq)
	}

	regs := s.waiters[e.id]
	if len(regs) == 0 {
		return 0
	}
	// Collect first: waking edits s.waiters[e.id].
	var ready []*waiter
	for _, r := range regs {
		if e.count >= r.need {
			ready = append(ready, r.w)
		}
	}
	wokeAt := time.Now()
	for _, w := range ready {
		s.wakeLocked(w, wokeAt)
	}
	return len(ready)
}

// wait looks up wants at time now. If any is ready it returns every ready one
// (in wants order). Otherwise, when register is set, it registers and returns
// a waiter whose done channel closes when one becomes ready; the caller must
// then either receive from done or call cancel.
func (s *store) wait(wants []want, now time.Time, register bool) ([]idCount, *waiter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errShuttingDown
	}
	s.expireLocked(now)
	if ready := s.readyLocked(wants); len(ready) > 0 || !register {
		return ready, nil, nil
	}
	if s.nWaiters >= s.maxWaiters {
		return nil, nil, errTooManyWaiters
	}
	w := &waiter{wants: wants, done: make(chan struct{})}
	for _, wt := range wants {
		s.waiters[wt.id] = append(s.waiters[wt.id], registration{w: w, need: wt.need})
	}
	s.nWaiters++
	return nil, w, nil
}

// cancel unregisters w. It reports false when w was already woken (its done
// channel is closed and its result set), so the caller must use that result.
func (s *store) cancel(w *waiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.done:
		return false
	default:
	}
	s.unregisterLocked(w)
	return true
}

// count returns the number of notifications held for id at time now.
func (s *store) count(id string, now time.Time) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	return s.countLocked(id)
}

// close wakes every waiter with the shutdown flag and makes later waits fail.
func (s *store) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, regs := range s.waiters {
		for _, r := range regs {
			select {
			case <-r.w.done:
				continue // already woken through another of its ids
			default:
			}
			r.w.shutdown = true
			close(r.w.done)
		}
	}
	clear(s.waiters)
	s.nWaiters = 0
}

// sweep expires old entries at time now and gives memory back after a peak:
// Go maps never shrink, so when the live entries fall below a quarter of the
// peak the map is rebuilt at the current size.
func (s *store) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	const minRebuild = 1 << 14
	if s.peak >= minRebuild && len(s.index) < s.peak/4 {
		m := make(map[string]uint64, len(s.index))
		for k, v := range s.index {
			m[k] = v
		}
		s.index = m
		s.peak = len(m)
	}
}

// stats is a consistent snapshot of the store's gauges and counters.
type storeStats struct {
	entries, waiters int
	evicted, expired uint64
}

func (s *store) stats() storeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return storeStats{entries: len(s.index), waiters: s.nWaiters, evicted: s.evicted, expired: s.expired}
}

func (s *store) expireLocked(now time.Time) {
	cutoff := now.Add(-s.ttl).UnixNano()
	for s.ring.len() > 0 && s.ring.front().first <= cutoff {
		delete(s.index, s.ring.pop().id)
		s.expired++
	}
}

func (s *store) countLocked(id string) uint32 {
	seq, ok := s.index[id]
	if !ok {
		return 0
	}
	return s.ring.at(seq).count
}

func (s *store) readyLocked(wants []want) []idCount {
	var ready []idCount
	for _, wt := range wants {
		if c := s.countLocked(wt.id); c >= wt.need {
			ready = append(ready, idCount{ReqID: wt.id, Count: c})
		}
	}
	return ready
}

func (s *store) wakeLocked(w *waiter, wokeAt time.Time) {
	s.unregisterLocked(w)
	w.ready = s.readyLocked(w.wants)
	w.wokeAt = wokeAt
	close(w.done)
}

func (s *store) unregisterLocked(w *waiter) {
	for _, wt := range w.wants {
		regs := s.waiters[wt.id]
		for i, r := range regs {
			if r.w == w {
				regs[i] = regs[len(regs)-1]
				regs[len(regs)-1] = registration{}
				regs = regs[:len(regs)-1]
				break
			}
		}
		if len(regs) == 0 {
			delete(s.waiters, wt.id)
		} else {
			s.waiters[wt.id] = regs
		}
	}
	s.nWaiters--
}

// ring is a growable circular buffer of entries in first-seen order. Each
// entry keeps the sequence number push gave it until it is popped, whatever
// the buffer's resizing.
type ring struct {
	buf     []entry
	head    int    // position of the oldest entry
	n       int    // live entries
	headSeq uint64 // sequence number of the oldest entry
}

func (q *ring) len() int { return q.n }

func (q *ring) at(seq uint64) *entry {
	return &q.buf[(q.head+int(seq-q.headSeq))%len(q.buf)]
}

func (q *ring) front() *entry { return &q.buf[q.head] }

func (q *ring) push(e entry) uint64 {
	if q.n == len(q.buf) {
		q.resize(max(64, 2*len(q.buf)))
	}
	q.buf[(q.head+q.n)%len(q.buf)] = e
	q.n++
	return q.headSeq + uint64(q.n-1)
}

func (q *ring) pop() entry {
	e := q.buf[q.head]
	q.buf[q.head] = entry{} // let the id's bytes go
	q.head = (q.head + 1) % len(q.buf)
	q.headSeq++
	q.n--
	if len(q.buf) > 1024 && q.n < len(q.buf)/4 {
		q.resize(len(q.buf) / 2)
	}
	return e
}

func (q *ring) resize(size int) {
	buf := make([]entry, size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}
