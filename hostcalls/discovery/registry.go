package discovery

import (
	"encoding/json"
	"sync"
	"time"
)

// Pools are the pools the filter knows.
var Pools = [2]string{"prefill", "decode"}

// Sets is the answer the filter reads.
type Sets struct {
	Version int64      `json:"version"`
	Prefill []Endpoint `json:"prefill"`
	Decode  []Endpoint `json:"decode"`
}

// Registry holds the current sets. Versions start at the wall clock in
// milliseconds, so a restarted companion never reuses a version the filter
// holds, and grow by one per change.
type Registry struct {
	mu      sync.Mutex
	version int64
	lists   [2][]Endpoint
	seen    [2]bool
	answer  []byte
	changed chan struct{} // closed and replaced on every change
	now     func() time.Time
}

// NewRegistry returns an empty registry (not ready until both pools were set).
func NewRegistry(now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{version: now().UnixMilli(), changed: make(chan struct{}), now: now}
}

// Set replaces pool i's list (0 prefill, 1 decode) with a normalized copy of
// list and returns the problems of the endpoints left out. An endpoint whose
// name the other pool already uses is left out too (names are unique across
// both pools).
func (r *Registry) Set(i int, list []Endpoint) []string {
	clean, problems := normalize(list)
	r.mu.Lock()
	defer r.mu.Unlock()
	other := map[string]bool{}
	for _, e := range r.lists[1-i] {
		other[e.Name] = true
	}
	kept := clean[:0]
	for _, e := range clean {
		if other[e.Name] {
			problems = append(problems, e.Name+": name used by the other pool")
			continue
		}
		kept = append(kept, e)
	}
	if r.seen[i] && sameList(r.lists[i], kept) {
		return problems
	}
	r.lists[i], r.seen[i] = kept, true
	r.version++
	r.answer = nil
	close(r.changed)
	r.changed = make(chan struct{})
	return problems
}

func sameList(a, b []Endpoint) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Ready reports whether every pool's source delivered, and which did not.
func (r *Registry) Ready() (bool, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var missing []string
	for i, s := range r.seen {
		if !s {
			missing = append(missing, Pools[i])
		}
	}
	return len(missing) == 0, missing
}

// Current returns the current sets.
func (r *Registry) Current() Sets {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Sets{Version: r.version, Prefill: nonNil(r.lists[0]), Decode: nonNil(r.lists[1])}
}

func nonNil(l []Endpoint) []Endpoint {
	if l == nil {
		return []Endpoint{}
	}
	return l
}

// snapshot returns the encoded answer, its version and the channel closed at
// the next change.
func (r *Registry) snapshot() ([]byte, int64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answer == nil {
		r.answer, _ = json.Marshal(Sets{Version: r.version, Prefill: nonNil(r.lists[0]), Decode: nonNil(r.lists[1])})
	}
	return r.answer, r.version, r.changed
}
