package lb

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestMemStoreSemantics(t *testing.T) {
	type op struct {
		set     bool
		key     string
		value   string
		cas     uint32 // for set
		wantVal string // for get
		wantCas uint32
		wantErr error
	}
	steps := []op{
		{key: "a", wantErr: ErrNotFound},
		{set: true, key: "a", value: "1", cas: 77}, // absent: any cas creates (cas 1)
		{key: "a", wantVal: "1", wantCas: 1},       //
		{set: true, key: "b", value: "x", cas: 0},  // cas 2: the counter is global
		{set: true, key: "a", value: "2", cas: 5, wantErr: ErrCasMismatch},
		{key: "a", wantVal: "1", wantCas: 1},      // a failed set changes nothing
		{set: true, key: "a", value: "2", cas: 1}, // matching cas: stored, cas 3
		{set: true, key: "a", value: "3", cas: 1, wantErr: ErrCasMismatch},
		{set: true, key: "a", value: "4", cas: 0}, // cas 0 always sets: cas 4
		{key: "a", wantVal: "4", wantCas: 4},      //
		{key: "b", wantVal: "x", wantCas: 2},      //
		{set: true, key: "a", value: "", cas: 4},  // "delete": empty value, cas 5
		{key: "a", wantVal: "", wantCas: 5},       // still found: empty means absent to callers
		{set: true, key: "a", value: "5", cas: 2, wantErr: ErrCasMismatch},
	}
	s := NewMemStore()
	for i, st := range steps {
		if st.set {
			if err := s.Set(st.key, []byte(st.value), st.cas); !errors.Is(err, st.wantErr) {
				t.Fatalf("step %d: Set(%q, cas %d) = %v, want %v", i, st.key, st.cas, err, st.wantErr)
			}
			continue
		}
		v, cas, err := s.Get(st.key)
		if !errors.Is(err, st.wantErr) || string(v) != st.wantVal || cas != st.wantCas {
			t.Fatalf("step %d: Get(%q) = %q, %d, %v; want %q, %d, %v", i, st.key, v, cas, err, st.wantVal, st.wantCas, st.wantErr)
		}
	}
}

func TestMemStoreCasSkipsZero(t *testing.T) {
	s := NewMemStore()
	s.lastCas = math.MaxUint32 - 1
	for _, want := range []uint32{math.MaxUint32, 1, 2} {
		if err := s.Set("k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		if _, cas, _ := s.Get("k"); cas != want {
			t.Fatalf("cas = %d, want %d", cas, want)
		}
	}
}

func TestMemStoreCopiesValues(t *testing.T) {
	var s MemStore // the zero value is ready
	in := []byte("abc")
	if err := s.Set("k", in, 0); err != nil {
		t.Fatal(err)
	}
	in[0] = 'X'
	out, _, _ := s.Get("k")
	out[1] = 'Y'
	again, _, _ := s.Get("k")
	if string(again) != "abc" {
		t.Fatalf("stored value aliased a caller's slice: %q", again)
	}
}

// TestMemStoreConcurrentCAS: unbounded CAS increments from many goroutines lose
// nothing (run with -race). The key exists before they start: creating it is
// a write with cas 0, which, as in Envoy, is unconditional, so two goroutines
// that both found it missing would both succeed (the balancer creates its keys
// through an anchor cas instead; see RATIONALE.md).
func TestMemStoreConcurrentCAS(t *testing.T) {
	s := NewMemStore()
	if err := s.Set("n", []byte{0}, 0); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					v, cas, err := s.Get("n")
					if err != nil {
						t.Error(err)
						return
					}
					if s.Set("n", []byte{v[0] + 1}, cas) == nil {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	v, _, _ := s.Get("n")
	if got := int(v[0]); got != workers*each%256 {
		t.Fatalf("counter = %d, want %d", got, workers*each%256)
	}
}

func TestWithPrefix(t *testing.T) {
	base := NewMemStore()
	a, b := WithPrefix(base, "pdroute"), WithPrefix(base, "other")
	if err := a.Set("lb/k", []byte("A"), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Set("lb/k", []byte("B"), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    Store
		key  string
		want string
	}{{a, "lb/k", "A"}, {b, "lb/k", "B"}, {base, "pdroute/lb/k", "A"}, {base, "other/lb/k", "B"}} {
		if v, _, err := c.s.Get(c.key); err != nil || string(v) != c.want {
			t.Errorf("Get(%q) = %q, %v; want %q", c.key, v, err, c.want)
		}
	}
	if _, _, err := base.Get("lb/k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unprefixed key exists: %v", err)
	}
	_, cas, _ := a.Get("lb/k")
	if err := a.Set("lb/k", []byte("A2"), cas+100); !errors.Is(err, ErrCasMismatch) {
		t.Errorf("prefixed Set with stale cas = %v, want ErrCasMismatch", err)
	}
	if WithPrefix(base, "") != Store(base) {
		t.Error("empty prefix must return the store itself")
	}
}

// setCounter is a MemStore (reads into a buffer, as the filter's store
// does) that counts its writes.
type setCounter struct {
	*MemStore
	sets int
}

func (s *setCounter) Set(key string, value []byte, cas uint32) error {
	s.sets++
	return s.MemStore.Set(key, value, cas)
}

// TestPickAllocatesOnlyTheStoresCopies: with a store that reads into a
// buffer, a pick, its report and its release allocate nothing of their
// own, whatever the strategy: every allocation left is the MemStore's copy
// of a value set (in the filter, Envoy's). The in-flight strategies update
// the in-flight value at the pick and at the release, and least_loaded and
// power_of_two read the engine stats at the pick; those reads used to
// allocate.
func TestPickAllocatesOnlyTheStoresCopies(t *testing.T) {
	for _, s := range append(slices.Clone(allStrategies), CacheAware) {
		t.Run(s.String(), func(t *testing.T) {
			store := &setCounter{MemStore: NewMemStore()}
			b := newTestBalancer(t, store, testPool(8, s), 1)
			b.SetOwner(7, time.Minute)
			for i := range 8 { // least_loaded and power_of_two read them at every pick
				if err := b.PutStats(i, EngineStats{Running: float64(i % 3), Waiting: 1}, t0); err != nil {
					t.Fatal(err)
				}
			}
			var l Lease
			cached := make([]int, 8)
			now := t0
			cycle := func() {
				now = now.Add(time.Millisecond)
				if err := b.PickInto(&l, now, uint64(now.UnixNano()), cached, 100); err != nil {
					t.Fatal(err)
				}
				_ = l.Report(now, Success)
				l.Release(now)
			}
			cycle() // grows the buffers
			store.sets = 0
			const runs = 50
			allocs := testing.AllocsPerRun(runs, cycle)
			// AllocsPerRun runs the cycle once more before it counts
			if sets := float64(store.sets) / (runs + 1); allocs > sets {
				t.Errorf("%.1f allocations per pick, release and report; the store's copies are %.1f", allocs, sets)
			}
		})
	}
}
