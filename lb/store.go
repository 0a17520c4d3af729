package lb

import (
	"errors"
	"strings"
	"sync"
)

// ErrNotFound is returned by [Store.Get] for a key that was never set
// (proxy-wasm status NotFound).
var ErrNotFound = errors.New("lb: shared data key not found")

// ErrCasMismatch is returned by [Store.Set] when the key changed since the cas the
// caller passed (proxy-wasm status CasMismatch).
var ErrCasMismatch = errors.New("lb: shared data cas mismatch")

// Store is a key/value store with the semantics of proxy-wasm shared data, shared by
// every VM of one Envoy process.
//
//   - Get returns the value and its cas, or ErrNotFound for a key never set. The
//     returned slice belongs to the caller, who may modify it.
//   - Set with cas 0 always stores. With a non-zero cas it stores only if the key is
//     absent or its current cas equals cas, and otherwise returns ErrCasMismatch.
//     Set must not keep value after it returns.
//   - Neither keeps key after it returns (lb/prefix passes keys that share a
//     buffer it reuses): a store that holds keys holds copies.
//   - Every successful Set gives the key a new cas from one counter shared by all
//     keys (Envoy: starts at 1, skips 0).
//   - There is no delete: an empty value means absent.
//
// The filter implements it over proxy_get_shared_data / proxy_set_shared_data;
// [MemStore] implements it in memory for tests.
type Store interface {
	Get(key string) (value []byte, cas uint32, err error)
	Set(key string, value []byte, cas uint32) error
}

// An IntoStore is a [Store] that can also read a value into the caller's
// buffer: GetInto returns the value in dst's room when it fits (the value
// then aliases dst and is the caller's until its next use of dst), else in a
// new allocation, as Get. A Balancer reads its per-pick keys so (the
// rotation, the health, the in-flight value it updates) and the prefix
// index its slots, decoding each value before the next read into the same
// buffer: a pick and a lookup then allocate nothing for them.
type IntoStore interface {
	Store
	GetInto(dst []byte, key string) (value []byte, cas uint32, err error)
}

// A KeptReader reads values of a Store into a buffer it keeps, when the
// store is an [IntoStore] (else each read is Get's allocation): a value is
// valid until the next Read, so the caller decodes it first. The buffer
// keeps the room of values of up to its bound. The balancers read the
// in-flight value they update so, and lb/prefix the index's slots: in the
// VM each would otherwise be an allocation.
type KeptReader struct {
	store Store
	into  IntoStore
	buf   []byte
	bound int
}

// NewKeptReader returns a reader of store that keeps room for values of up
// to bound bytes.
func NewKeptReader(store Store, bound int) KeptReader {
	r := KeptReader{store: store, bound: bound}
	r.into, _ = store.(IntoStore)
	return r
}

// Read is store.Get of key, into the kept buffer when the store allows it.
func (r *KeptReader) Read(key string) ([]byte, uint32, error) {
	if r.into == nil {
		return r.store.Get(key)
	}
	v, cas, err := r.into.GetInto(r.buf, key)
	if cap(v) > cap(r.buf) && cap(v) <= r.bound {
		r.buf = v[:0]
	}
	return v, cas, err
}

// MemStore is an in-memory [Store] that copies Envoy's shared-data behaviour, for
// tests and benchmarks. It is safe for concurrent use. The zero value is ready.
type MemStore struct {
	mu      sync.Mutex
	entries map[string]*memEntry // pointers: an update does not store its key again
	lastCas uint32
}

type memEntry struct {
	value []byte
	cas   uint32
}

// NewMemStore returns an empty MemStore whose first Set gets cas 1.
func NewMemStore() *MemStore { return &MemStore{} }

// Get implements [Store].
func (m *MemStore) Get(key string) ([]byte, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return append([]byte(nil), e.value...), e.cas, nil
}

// GetInto implements [IntoStore]: the value is copied into dst's room.
func (m *MemStore) GetInto(dst []byte, key string) ([]byte, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return append(dst[:0], e.value...), e.cas, nil
}

// Set implements [Store].
func (m *MemStore) Set(key string, value []byte, cas uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if ok && cas != 0 && cas != e.cas {
		return ErrCasMismatch
	}
	if m.entries == nil {
		m.entries = make(map[string]*memEntry)
	}
	m.lastCas++
	if m.lastCas == 0 {
		m.lastCas = 1
	}
	if !ok {
		// a map assignment stores its key, even over an equal one: only
		// a new key is assigned, as a copy (the caller may reuse its bytes)
		e = new(memEntry)
		m.entries[strings.Clone(key)] = e
	}
	e.value, e.cas = append(e.value[:0:0], value...), m.lastCas
	return nil
}

// WithPrefix returns a Store that stores key k of s as prefix + "/" + k, so that
// plugins sharing one shared-data namespace do not collide (Istio leaves vm_id empty,
// which puts every WasmPlugin of a proxy in the same namespace). An empty prefix
// returns s unchanged.
func WithPrefix(s Store, prefix string) Store {
	if prefix == "" {
		return s
	}
	return prefixStore{s: s, prefix: prefix + "/"}
}

type prefixStore struct {
	s      Store
	prefix string
}

func (p prefixStore) Get(key string) ([]byte, uint32, error) { return p.s.Get(p.prefix + key) }

func (p prefixStore) Set(key string, value []byte, cas uint32) error {
	return p.s.Set(p.prefix+key, value, cas)
}
