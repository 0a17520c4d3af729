package kvbridge

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func wants(kv ...any) []want {
	var w []want
	for i := 0; i < len(kv); i += 2 {
		w = append(w, want{id: kv[i].(string), need: uint32(kv[i+1].(int))})
	}
	return w
}

func isDone(w *waiter) bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func TestStoreNotifyThenWait(t *testing.T) {
	s := newStore(time.Minute, 10, 10)
	s.notify([]byte("a"), t0)
	s.notify([]byte("a"), t0) // duplicates count
	ready, w, err := s.wait(wants("a", 2), t0, true)
	if err != nil || w != nil {
		t.Fatalf("wait = %v, %v, %v; want ready at once", ready, w, err)
	}
	if want := []idCount{{"a", 2}}; !reflect.DeepEqual(ready, want) {
		t.Fatalf("ready = %v, want %v", ready, want)
	}
}

func TestStoreWaitThenNotify(t *testing.T) {
	s := newStore(time.Minute, 10, 10)
	ready, w, err := s.wait(wants("a", 3), t0, true)
	if err != nil || ready != nil || w == nil {
		t.Fatalf("wait = %v, %v, %v; want a registered waiter", ready, w, err)
	}
	for i := 1; i <= 2; i++ { // N-1 of N: still waiting
		if woken := s.notify([]byte("a"), t0); woken != 0 || isDone(w) {
			t.Fatalf("notification %d of 3 woke the waiter", i)
		}
	}
	if woken := s.notify([]byte("a"), t0); woken != 1 || !isDone(w) {
		t.Fatalf("third notification woke %d waiters, done=%v", woken, isDone(w))
	}
	if want := []idCount{{"a", 3}}; !reflect.DeepEqual(w.ready, want) || w.shutdown {
		t.Fatalf("ready = %v shutdown=%v, want %v", w.ready, w.shutdown, want)
	}
	if st := s.stats(); st.waiters != 0 || len(s.waiters) != 0 {
		t.Fatalf("waiter still registered: %+v %v", st, s.waiters)
	}
	if s.cancel(w) {
		t.Fatal("cancel after wake reported the waiter as still waiting")
	}
}

func TestStoreMultiIDWait(t *testing.T) {
	s := newStore(time.Minute, 10, 10)
	s.notify([]byte("c"), t0)
	s.notify([]byte("a"), t0)
	s.notify([]byte("b"), t0) // b needs 2: not ready
	// Several ready at once: all returned, in request order.
	ready, w, _ := s.wait(wants("a", 1, "b", 2, "c", 1), t0, true)
	if want := []idCount{{"a", 1}, {"c", 1}}; w != nil || !reflect.DeepEqual(ready, want) {
		t.Fatalf("ready = %v (waiter %v), want %v", ready, w, want)
	}

	// None ready: the first to become ready wakes the waiter, once.
	_, w, _ = s.wait(wants("x", 1, "b", 2, "y", 1), t0, true)
	if w == nil {
		t.Fatal("want a registered waiter")
	}
	if got := len(s.waiters); got != 3 {
		t.Fatalf("registered under %d ids, want 3", got)
	}
	s.notify([]byte("b"), t0)
	if want := []idCount{{"b", 2}}; !isDone(w) || !reflect.DeepEqual(w.ready, want) {
		t.Fatalf("ready = %v, want %v", w.ready, want)
	}
	if len(s.waiters) != 0 || s.stats().waiters != 0 {
		t.Fatalf("waiter left registered: %v", s.waiters)
	}
	if woken := s.notify([]byte("y"), t0); woken != 0 {
		t.Fatalf("a woken waiter was woken again (%d)", woken)
	}
}

func TestStoreCancel(t *testing.T) {
	s := newStore(time.Minute, 10, 10)
	_, w1, _ := s.wait(wants("a", 1, "b", 1), t0, true)
	_, w2, _ := s.wait(wants("a", 1), t0, true)
	if !s.cancel(w1) {
		t.Fatal("cancel of a waiting waiter reported false")
	}
	if st := s.stats(); st.waiters != 1 {
		t.Fatalf("waiters = %d, want 1", st.waiters)
	}
	if woken := s.notify([]byte("a"), t0); woken != 1 || isDone(w1) || !isDone(w2) {
		t.Fatalf("woken = %d, w1 done %v, w2 done %v", woken, isDone(w1), isDone(w2))
	}
	if _, ok := s.waiters["b"]; ok {
		t.Fatal("cancelled waiter still registered under b")
	}
}

func TestStoreWaitWithoutRegistering(t *testing.T) {
	s := newStore(time.Minute, 10, 10)
	ready, w, err := s.wait(wants("a", 1), t0, false)
	if ready != nil || w != nil || err != nil || s.stats().waiters != 0 {
		t.Fatalf("wait(register=false) = %v, %v, %v", ready, w, err)
	}
}

func TestStoreTTL(t *testing.T) {
	ttl := 10 * time.Second
	s := newStore(ttl, 10, 10)
	s.notify([]byte("a"), t0)
	s.notify([]byte("b"), t0.Add(time.Second))
	s.notify([]byte("a"), t0.Add(5*time.Second)) // a second notification does not extend a's life
	if got := s.count("a", t0.Add(ttl-time.Nanosecond)); got != 2 {
		t.Fatalf("count(a) just before TTL = %d, want 2", got)
	}
	if got := s.count("a", t0.Add(ttl)); got != 0 {
		t.Fatalf("count(a) at TTL = %d, want 0 (expired)", got)
	}
	if got := s.count("b", t0.Add(ttl)); got != 1 {
		t.Fatalf("count(b) = %d, want 1", got)
	}
	if st := s.stats(); st.entries != 1 || st.expired != 1 {
		t.Fatalf("stats = %+v, want 1 entry, 1 expired", st)
	}
	// An expired id starts again from one.
	s.notify([]byte("a"), t0.Add(ttl))
	if got := s.count("a", t0.Add(ttl)); got != 1 {
		t.Fatalf("count(a) after re-notify = %d, want 1", got)
	}
	s.sweep(t0.Add(time.Hour))
	if st := s.stats(); st.entries != 0 || st.expired != 3 {
		t.Fatalf("after sweep: %+v, want 0 entries, 3 expired", st)
	}
}

func TestStoreEvictsOldestFirst(t *testing.T) {
	s := newStore(time.Hour, 3, 10)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	for i, id := range []string{"a", "b", "c"} {
		s.notify([]byte(id), at(i))
	}
	s.notify([]byte("a"), at(3)) // repeat: a keeps its first-seen place
	s.notify([]byte("d"), at(4)) // evicts a
	s.notify([]byte("e"), at(5)) // evicts b
	got := map[string]uint32{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		got[id] = s.count(id, at(5))
	}
	if want := map[string]uint32{"a": 0, "b": 0, "c": 1, "d": 1, "e": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("counts = %v, want %v", got, want)
	}
	if st := s.stats(); st.evicted != 2 || st.entries != 3 {
		t.Fatalf("stats = %+v, want 2 evicted, 3 entries", st)
	}
}

func TestStoreClose(t *testing.T) {
	s := newStore(time.Minute, 10, 10)
	_, w1, _ := s.wait(wants("a", 1, "b", 1), t0, true)
	_, w2, _ := s.wait(wants("b", 1), t0, true)
	s.close()
	for i, w := range []*waiter{w1, w2} {
		if !isDone(w) || !w.shutdown {
			t.Fatalf("waiter %d not answered with shutdown", i)
		}
	}
	if _, _, err := s.wait(wants("a", 1), t0, true); err != errShuttingDown {
		t.Fatalf("wait after close: %v, want errShuttingDown", err)
	}
	if s.stats().waiters != 0 {
		t.Fatal("waiters left after close")
	}
}

func TestStoreMaxWaiters(t *testing.T) {
	s := newStore(time.Minute, 10, 2)
	for i := 0; i < 2; i++ {
		if _, _, err := s.wait(wants(fmt.Sprint(i), 1), t0, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.wait(wants("x", 1), t0, true); err != errTooManyWaiters {
		t.Fatalf("third waiter: %v, want errTooManyWaiters", err)
	}
	// An id that is already ready is answered even at the limit.
	s.notify([]byte("r"), t0)
	if ready, _, err := s.wait(wants("r", 1), t0, true); err != nil || len(ready) != 1 {
		t.Fatalf("ready id at the waiter limit: %v, %v", ready, err)
	}
}

// TestStoreMatchesModel drives the store and a plain reference model with
// the same random notifications, clock steps and sweeps, across ring growth,
// wrap-around and shrinking, and compares every count and counter.
func TestStoreMatchesModel(t *testing.T) {
	const ttl, maxEntries = 50 * time.Millisecond, 300
	rng := rand.New(rand.NewPCG(1, 2))
	s := newStore(ttl, maxEntries, 10)
	type rec struct {
		first time.Time
		count uint32
	}
	model := map[string]*rec{}
	var order []string // first-seen order
	var evicted, expired uint64
	expire := func(now time.Time) {
		for len(order) > 0 && now.Sub(model[order[0]].first) >= ttl {
			delete(model, order[0])
			order = order[1:]
			expired++
		}
	}
	now := t0
	for step := 0; step < 20_000; step++ {
		// Bursts of many new ids fill the store to its cap; quiet phases
		// repeat a few ids while time runs on, so entries expire.
		space, dt := 50, 2000
		if step/2000%2 == 1 {
			space, dt = 5000, 20
		}
		now = now.Add(time.Duration(rng.IntN(dt)) * time.Microsecond)
		id := fmt.Sprintf("id-%d", rng.IntN(space)+step/10*space)
		switch rng.IntN(200) {
		case 0:
			s.sweep(now)
			expire(now)
		case 1:
			now = now.Add(ttl / 2)
		default:
			s.notify([]byte(id), now)
			expire(now)
			if r, ok := model[id]; ok {
				r.count++
			} else {
				if len(model) >= maxEntries {
					delete(model, order[0])
					order = order[1:]
					evicted++
				}
				model[id] = &rec{first: now, count: 1}
				order = append(order, id)
			}
		}
		probe := fmt.Sprintf("id-%d", rng.IntN(space)+step/10*space)
		var want uint32
		if r, ok := model[probe]; ok && now.Sub(r.first) < ttl {
			want = r.count
		}
		if got := s.count(probe, now); got != want {
			t.Fatalf("step %d: count(%s) = %d, model %d", step, probe, got, want)
		}
		expire(now)
		if st := s.stats(); st.entries != len(model) || st.evicted != evicted || st.expired != expired {
			t.Fatalf("step %d: stats %+v, model entries %d evicted %d expired %d", step, st, len(model), evicted, expired)
		}
	}
	t.Logf("evicted %d, expired %d, ring %d slots", evicted, expired, len(s.ring.buf))
	if evicted == 0 || expired == 0 {
		t.Fatalf("the run exercised too little: evicted %d expired %d", evicted, expired)
	}
}

func BenchmarkStoreNotify(b *testing.B) {
	ids := make([][]byte, 1<<16)
	for i := range ids {
		ids[i] = []byte(fmt.Sprintf("cmpl-%032x", i))
	}
	b.Run("new-ids-at-cap", func(b *testing.B) {
		s := newStore(time.Hour, 1<<12, 10)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.notify(ids[i%len(ids)], t0)
			i++
		}
	})
	b.Run("repeat-id", func(b *testing.B) {
		s := newStore(time.Hour, 1<<12, 10)
		b.ReportAllocs()
		for b.Loop() {
			s.notify(ids[0], t0)
		}
	})
}

// After a peak the index is rebuilt at the live size; entries survive it.
func TestStoreSweepRebuildsIndexAfterPeak(t *testing.T) {
	const n = 1 << 15
	s := newStore(time.Minute, n, 10)
	for i := 0; i < n; i++ {
		s.notify([]byte(fmt.Sprint(i)), t0)
	}
	late := t0.Add(30 * time.Second)
	s.notify([]byte("late"), late)
	s.notify([]byte("late"), late)
	s.sweep(t0.Add(time.Minute)) // all but "late" expire
	if s.peak != 1 || len(s.index) != 1 {
		t.Fatalf("peak = %d, index = %d entries; want the index rebuilt at 1", s.peak, len(s.index))
	}
	if got := s.count("late", t0.Add(time.Minute)); got != 2 {
		t.Fatalf("count(late) = %d after rebuild, want 2", got)
	}
	if len(s.ring.buf) > 2048 {
		t.Fatalf("ring kept %d slots for 1 entry", len(s.ring.buf))
	}
}

// BenchmarkStoreMemory reports the live heap of 1,000,000 pending 36-byte
// ids (the length of pdroute's UUIDs), after a GC.
func BenchmarkStoreMemory(b *testing.B) {
	const n = 1_000_000
	ids := make([][]byte, n)
	for i := range ids {
		ids[i] = []byte(fmt.Sprintf("00000000-0000-4000-8000-%012x", i))
	}
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := newStore(time.Hour, n, 10)
		for _, id := range ids {
			s.notify(id, t0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "live-B/id")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "live-MiB")
}

// Issue 31: three documents gave three figures for the memory per pending
// id. One figure, BytesPerPendingID, is in every document, and the live
// heap per id (a part of the resident figure) stays under it.
func TestBytesPerPendingID(t *testing.T) {
	const n = 200_000
	ids := make([][]byte, n)
	for i := range ids {
		ids[i] = []byte(fmt.Sprintf("00000000-0000-4000-8000-%012x", i))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newStore(time.Hour, n, 10)
	for _, id := range ids {
		s.notify(id, t0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	if perID := float64(after.HeapAlloc-before.HeapAlloc) / n; perID > BytesPerPendingID {
		t.Errorf("live heap %.0f B per pending id; the documents say about %d B resident", perID, BytesPerPendingID)
	}
	want := fmt.Sprintf("about %d B per pending id", BytesPerPendingID)
	for _, doc := range []string{"../../docs/OPERATIONS.md", "../README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		if !strings.Contains(strings.ToLower(text), strings.ToLower(want)) {
			t.Errorf("%s does not say %q", doc, want)
		}
		for _, stale := range []string{"100 bytes per id", "137 B live heap per id", "209 B/id"} {
			if strings.Contains(text, stale) {
				t.Errorf("%s still says %q", doc, stale)
			}
		}
	}
}
