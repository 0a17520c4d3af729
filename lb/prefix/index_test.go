package prefix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/tokenest"
)

var t0 = time.Unix(1_700_000_000, 0)

func chatBody(model, salt, system, user string) []byte {
	s := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]`, model, system, user)
	if salt != "" {
		s += fmt.Sprintf(`,"cache_salt":%q`, salt)
	}
	return []byte(s + "}")
}

func render(t testing.TB, r *Renderer, body string, path string) Prompt {
	t.Helper()
	var p Prompt
	if !r.Render([]byte(body), path, &p) {
		t.Fatalf("render %s: false", path)
	}
	p.Hashes = append([]uint64(nil), p.Hashes...)
	return p
}

func common(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestRenderSharesPrefixesOnlyWithinModelAndSalt(t *testing.T) {
	r := NewRenderer(64)
	shared := strings.Repeat("You are a careful assistant. ", 40) // ~1.2 KB
	a := render(t, r, string(chatBody("m1", "", shared, "question one "+strings.Repeat("x", 500))), "/v1/chat/completions")
	b := render(t, r, string(chatBody("m1", "", shared, "question two "+strings.Repeat("y", 500))), "/v1/chat/completions")
	if n := common(a.Hashes, b.Hashes); n < len(shared)/64-1 || n == len(a.Hashes) {
		t.Errorf("same model, same system prompt: %d common blocks of %d, want about %d", n, len(a.Hashes), len(shared)/64)
	}
	for _, other := range []string{string(chatBody("m2", "", shared, "question one "+strings.Repeat("x", 500))),
		string(chatBody("m1", "tenant-7", shared, "question one "+strings.Repeat("x", 500)))} {
		c := render(t, r, other, "/v1/chat/completions")
		if n := common(a.Hashes, c.Hashes); n != 0 {
			t.Errorf("another model or salt shares %d blocks", n)
		}
	}
	// Tools come first: a change of tools changes every block.
	withTools := func(tool string) Prompt {
		return render(t, r, `{"model":"m1","tools":[{"type":"function","function":{"name":"`+tool+`"}}],"messages":[{"role":"system","content":"`+shared+`"}]}`, "/v1/chat/completions")
	}
	if n := common(withTools("search").Hashes, withTools("fetch").Hashes); n != 0 {
		t.Errorf("different tools share %d blocks", n)
	}
	// Roles are rendered: the same text as another role is another prompt.
	u := render(t, r, `{"model":"m1","messages":[{"role":"user","content":"`+shared+`"}]}`, "/v1/chat/completions")
	s := render(t, r, `{"model":"m1","messages":[{"role":"system","content":"`+shared+`"}]}`, "/v1/chat/completions")
	if common(u.Hashes, s.Hashes) != 0 {
		t.Error("roles are not part of the rendering")
	}
	// Completions and responses render too; a body without a prompt does not.
	render(t, r, `{"model":"m1","prompt":"`+shared+`"}`, "/v1/completions?x=1")
	render(t, r, `{"model":"m1","instructions":"be brief","input":"`+shared+`"}`, "/v1/responses")
	var p Prompt
	for _, bad := range [][2]string{{`{"model":"m1"}`, "/v1/chat/completions"}, {`{"prompt":"x"}`, "/v1/embeddings"}, {``, "/v1/completions"}} {
		if r.Render([]byte(bad[0]), bad[1], &p) {
			t.Errorf("Render(%s, %s) = true", bad[0], bad[1])
		}
	}
	// Invalid JSON is the caller's to reject; Render must just not fail.
	for _, junk := range []string{`{"messages":[`, `{"messages"`, `[1,2`, `"`, `{"prompt":"\`} {
		r.Render([]byte(junk), "/v1/chat/completions", &p)
		r.Render([]byte(junk), "/v1/completions", &p)
	}
}

func TestSamplePoints(t *testing.T) {
	x, _ := New(lb.NewMemStore(), DefaultParams())
	for n, want := range map[int]string{0: "[]", 1: "[1]", 2: "[1 2]", 5: "[1 2 3 4 5]", 13: "[1 2 3 4 6 8 12 13]", 16: "[1 2 3 4 6 8 12 16]"} {
		if got := fmt.Sprint(x.samplePoints(n)); got != want {
			t.Errorf("samplePoints(%d) = %s, want %s", n, got, want)
		}
	}
	if got := len(x.samplePoints(430)); got != 18 {
		t.Errorf("points of a 55k-token prompt = %d, want 18", got)
	}
}

func prompt(rng *rand.Rand, shared []uint64, extra int) Prompt {
	p := Prompt{Hashes: append([]uint64(nil), shared...)}
	h := uint64(0)
	if len(shared) > 0 {
		h = shared[len(shared)-1]
	}
	for range extra {
		h = lb.Mix64(h ^ rng.Uint64())
		p.Hashes = append(p.Hashes, h)
	}
	p.Bytes = len(p.Hashes)*512 + 100
	return p
}

func TestLookupFindsLongestPrefixPerEndpoint(t *testing.T) {
	store := lb.NewMemStore()
	x, err := New(store, DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	system := prompt(rng, nil, 4)          // 4 blocks everyone shares
	ctx := prompt(rng, system.Hashes, 40)  // 44 blocks: a tenant's context
	reqA := prompt(rng, ctx.Hashes, 10)    // served by A
	reqB := prompt(rng, system.Hashes, 20) // another tenant, served by B
	query := prompt(rng, ctx.Hashes, 9)    // same tenant, new question
	A, B, C := EndpointID("a"), EndpointID("b"), EndpointID("c")
	if _, err := x.Record(&reqA, t0, A); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Record(&reqB, t0, B); err != nil {
		t.Fatal(err)
	}
	var m Match
	x.Lookup(&query, t0.Add(time.Second), &m)
	if got := m.CachedBytes(A) / 512; got < 32 || got > 44 {
		t.Errorf("A holds %d blocks of the query, want the sampled part of 44 (32..44)", got)
	}
	if got := m.CachedBytes(C); got != 0 {
		t.Errorf("C holds %d bytes, want 0", got)
	}
	if m.Reads > 5 {
		t.Errorf("lookup made %d reads, want at most 5", m.Reads)
	}
	// The whole of a repeated prompt is found (its last block is a point).
	x.Lookup(&reqA, t0.Add(time.Second), &m)
	if got := m.CachedBytes(A); got != len(reqA.Hashes)*512 {
		t.Errorf("repeat: A holds %d bytes, want all %d full blocks", got, len(reqA.Hashes))
	}
	// After the TTL nothing is held.
	x.Lookup(&reqA, t0.Add(DefaultParams().TTL+2*time.Second), &m)
	if len(m.Hits) != 0 {
		t.Errorf("after the TTL: hits %v", m.Hits)
	}
	// Another model's prompt (another chain) shares nothing.
	r := NewRenderer(512)
	var p1, p2 Prompt
	r.HashText("m1", "", []byte(strings.Repeat("a", 4096)), &p1)
	r.HashText("m2", "", []byte(strings.Repeat("a", 4096)), &p2)
	_, _ = x.Record(&p1, t0, A)
	x.Lookup(&p2, t0, &m)
	if len(m.Hits) != 0 {
		t.Errorf("another model: hits %v", m.Hits)
	}
}

func TestRecordSkipsWhatIsFresh(t *testing.T) {
	x, _ := New(lb.NewMemStore(), DefaultParams())
	rng := rand.New(rand.NewPCG(3, 4))
	p := prompt(rng, nil, 100)
	c1, _ := x.Record(&p, t0, 7)
	c2, _ := x.Record(&p, t0, 7)
	if pts := len(x.samplePoints(100)); c2 != pts {
		t.Errorf("second record in the same second: %d calls, want %d reads and no write (first: %d)", c2, pts, c1)
	}
}

// TestSlotReadsAllocateNothing: a lookup and a record allocate nothing of
// their own (the slot keys share a buffer, the values are read into
// another): every allocation left is the MemStore's copy of a value set,
// one per point written (in the filter, Envoy's). And the keys a store
// keeps are copies: an index of its own, on the same store, finds what the
// first recorded after the first went on to build other keys in that
// buffer.
func TestSlotReadsAllocateNothing(t *testing.T) {
	store := lb.NewMemStore()
	x, _ := New(store, DefaultParams())
	rng := rand.New(rand.NewPCG(5, 6))
	a, b := prompt(rng, nil, 60), prompt(rng, nil, 60)
	A, B := EndpointID("a"), EndpointID("b")
	if _, err := x.Record(&a, t0, A); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Record(&b, t0, B); err != nil {
		t.Fatal(err)
	}
	var m Match
	x.Lookup(&a, t0, &m) // grows m.Hits and the buffers once
	now := t0
	allocs := testing.AllocsPerRun(20, func() {
		now = now.Add(time.Second) // every point of b written again
		x.Lookup(&a, now, &m)
		_, _ = x.Record(&b, now, B)
	})
	if sets := len(x.samplePoints(len(b.Hashes))); allocs > float64(sets) {
		t.Errorf("a lookup and a record: %.1f allocations, the store's copies of %d values set", allocs, sets)
	}
	y, _ := New(store, DefaultParams())
	y.Lookup(&a, t0, &m)
	if got := m.CachedBytes(A); got != len(a.Hashes)*512 {
		t.Errorf("another index finds %d bytes of a on A, want %d: a key kept was not a copy", got, len(a.Hashes)*512)
	}
}

// TestRecordStartsFromTheLookup: a Record in the second of the Lookup
// before it does not read again the slots that Lookup read, yet loses no
// write made between the two (its writes pass the cas the Lookup read), and
// a Record in a later second reads every point.
func TestRecordStartsFromTheLookup(t *testing.T) {
	store := lb.NewMemStore()
	x, _ := New(store, DefaultParams())
	y, _ := New(store, DefaultParams())
	rng := rand.New(rand.NewPCG(7, 8))
	p := prompt(rng, nil, 100)
	pts := len(x.samplePoints(len(p.Hashes)))
	A, B := EndpointID("a"), EndpointID("b")
	if _, err := x.Record(&p, t0, A); err != nil {
		t.Fatal(err)
	}
	var m Match
	x.Lookup(&p, t0, &m)
	if c, err := x.Record(&p, t0, A); err != nil || c != pts-m.Reads {
		t.Errorf("record after a lookup, all fresh: %d calls (%v), want the %d points less the lookup's %d reads", c, err, pts, m.Reads)
	}
	// Another VM records B on every point between x's Lookup and Record.
	x.Lookup(&p, t0.Add(time.Second), &m)
	if _, err := y.Record(&p, t0.Add(time.Second), B); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Record(&p, t0.Add(time.Second), A); err != nil {
		t.Fatal(err)
	}
	y.Lookup(&p, t0.Add(time.Second), &m)
	for _, id := range []uint32{A, B} {
		if got := m.CachedBytes(id); got != len(p.Hashes)*512 {
			t.Errorf("after both records, %d holds %d bytes, want %d", id, got, len(p.Hashes)*512)
		}
	}
	// A lookup of another second is not reused.
	x.Lookup(&p, t0.Add(time.Second), &m)
	if c, _ := x.Record(&p, t0.Add(2*time.Second), A); c < 2*pts {
		t.Errorf("record a second after the lookup: %d calls, want every point read and written (%d)", c, 2*pts)
	}
}

// countingStore is a MemStore that tracks every key's current size.
type countingStore struct {
	lb.MemStore
	sizes map[string]int
}

func (c *countingStore) Set(k string, v []byte, cas uint32) error {
	if err := c.MemStore.Set(k, v, cas); err != nil {
		return err
	}
	c.sizes[strings.Clone(k)] = len(v) // a store keeps no key it is passed
	return nil
}

// TestBoundUnderAMillionUniquePrompts: the index's keys and bytes stay
// within Params.Slots and Params.MaxBytes while a million prompts that share
// nothing are recorded, and a prefix in steady use survives them.
func TestBoundUnderAMillionUniquePrompts(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 50_000 // the race detector makes each store call ~10× slower
	}
	store := &countingStore{sizes: map[string]int{}}
	p := DefaultParams()
	p.Slots = 1024
	x, _ := New(store, p)
	rng := rand.New(rand.NewPCG(5, 6))
	hot := prompt(rng, nil, 8)
	var m Match
	var q Prompt
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Millisecond) // 1000 prompts/s
		q = prompt(rng, nil, 1+i%3)
		if _, err := x.Record(&q, now, uint32(i%16+1)); err != nil {
			t.Fatal(err)
		}
		if i%200 == 0 { // the hot prefix is served five times a second
			_, _ = x.Record(&hot, now, 99)
		}
	}
	bytes := 0
	for _, s := range store.sizes {
		bytes += s
	}
	if len(store.sizes) > p.Slots+1 || bytes > p.MaxBytes() {
		t.Errorf("after %d unique prompts: %d keys, %d bytes; bound %d keys, %d bytes", n, len(store.sizes), bytes, p.Slots+1, p.MaxBytes())
	}
	t.Logf("%d unique prompts: %d keys, %d bytes (bound %d)", n, len(store.sizes), bytes, p.MaxBytes())
	x.Lookup(&hot, t0.Add(time.Duration(n)*time.Millisecond), &m)
	if m.CachedBytes(99) != len(hot.Hashes)*p.BlockBytes {
		t.Errorf("the hot prefix was evicted by unique traffic: %v", m.Hits)
	}
}

// TestConcurrentWritersLoseNothing: VMs (goroutines with their own Index)
// recording different endpoints for the same prompts at once; every write
// that reported success is in the index afterwards (CAS, no lost update).
func TestConcurrentWritersLoseNothing(t *testing.T) {
	store := lb.NewMemStore()
	p := DefaultParams() // 4096 slots: no prefix replaces another here
	rng := rand.New(rand.NewPCG(7, 8))
	prompts := make([]Prompt, 20)
	for i := range prompts {
		prompts[i] = prompt(rng, nil, 12)
	}
	const vms = PerEntry
	ok := make([][]bool, vms)
	var wg sync.WaitGroup
	for v := range vms {
		ok[v] = make([]bool, len(prompts))
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, _ := New(store, p)
			for i := range prompts {
				_, err := x.Record(&prompts[i], t0, uint32(v+1))
				ok[v][i] = err == nil
				if err != nil && !errors.Is(err, ErrNotRecorded) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	x, _ := New(store, p)
	var m Match
	lost := 0
	for i := range prompts {
		x.Lookup(&prompts[i], t0, &m)
		for v := range vms {
			if ok[v][i] && m.CachedBytes(uint32(v+1)) != len(prompts[i].Hashes)*p.BlockBytes {
				lost++
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d successful records not found", lost)
	}
}

func FuzzRender(f *testing.F) {
	f.Add([]byte(`{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"prompt":"abc","cache_salt":"s"}`))
	f.Add([]byte(`{"messages":[`))
	r := NewRenderer(64)
	f.Fuzz(func(t *testing.T, body []byte) {
		var p Prompt
		for _, path := range renderPaths {
			if r.Render(body, path, &p) && len(p.Hashes) != p.Bytes/64 {
				t.Fatalf("%d hashes for %d bytes", len(p.Hashes), p.Bytes)
			}
			renderBoth(t, r, body, path)
		}
	})
}

func FuzzRecord(f *testing.F) {
	var r record
	r.n = 2
	r.entries[0] = entry{hash: 42, n: 2, eps: [PerEntry]endpointAt{{1, 100}, {2, 99}}}
	r.entries[1] = entry{hash: 7, n: 1, eps: [PerEntry]endpointAt{{3, 5}}}
	f.Add(r.append(nil))
	f.Add([]byte{1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		var r record
		if !r.parse(v) {
			if r.n != 0 {
				t.Fatal("rejected record left entries")
			}
			return
		}
		if got := r.append(nil); string(got) != string(v) {
			t.Fatalf("round trip: %x != %x", got, v)
		}
		if len(v) > MaxRecordBytes {
			t.Fatalf("accepted %d bytes > MaxRecordBytes", len(v))
		}
		r.touch(99, 5, 1000, 0)
		if out := r.append(nil); len(out) > MaxRecordBytes {
			t.Fatalf("touch grew the record to %d bytes", len(out))
		}
	})
}

// renderBoth renders body with Render and, when tokenest finds its
// members (a valid JSON object), with RenderMembers, and fails if they
// differ.
func renderBoth(t *testing.T, r *Renderer, body []byte, path string) {
	t.Helper()
	var want, got Prompt
	okWant := r.Render(body, path, &want)
	wantHashes := append([]uint64(nil), want.Hashes...)
	var x tokenest.Index
	if !x.Read(body) {
		return
	}
	members := make([]Member, len(x.Members))
	for i, m := range x.Members {
		members[i] = Member(m)
	}
	okGot := r.RenderMembers(body, members, path, &got)
	if okGot != okWant || got.Bytes != want.Bytes || !slices.Equal(got.Hashes, wantHashes) {
		t.Fatalf("%s %q: RenderMembers %t %d %x, Render %t %d %x", path, body, okGot, got.Bytes, got.Hashes, okWant, want.Bytes, wantHashes)
	}
}

var renderPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate", "/v1/embeddings"}

func TestRenderMembersIsRender(t *testing.T) {
	r := NewRenderer(64)
	long := strings.Repeat("the cat sat on the mat ", 40)
	for _, body := range []string{
		string(chatBody("m", "", long, "hi")),
		string(chatBody("m", "salt", long, "hi")),
		`{"model":"m","model":"n","prompt":"` + long + `"}`,     // the last key counts
		`{"model":7,"cache_salt":null,"prompt":"` + long + `"}`, // not strings: ""
		`{"model":"x","prompt":"` + long + `"}`,                 // an escaped key
		`{"tools":[{"type":"function"}],"instructions":"be brief","input":"` + long + `"}`,
		`{"input_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26]}`,
		`{"text":"` + long + `","input_ids":[1,2]}`,
		`{"messages":[]}`,
		`{}`,
	} {
		for _, path := range renderPaths {
			renderBoth(t, r, []byte(body), path)
		}
	}
}

// The chain in one loop is blockHash's, block after block, with blocks of
// whole words and with a rest of bytes.
func TestHashIsBlockHashChain(t *testing.T) {
	text := []byte(strings.Repeat("0123456789abcdefghij", 50)) // 1000 bytes
	for _, bb := range []int{64, 60} {
		r := NewRenderer(bb)
		var p Prompt
		r.HashText("m", "s", text, &p)
		if len(p.Hashes) != len(text)/bb || p.Bytes != len(text) {
			t.Fatalf("blocks of %d: %d hashes for %d bytes", bb, len(p.Hashes), p.Bytes)
		}
		h := seed("m", "s")
		for i := range p.Hashes {
			h = blockHash(h, text[i*bb:(i+1)*bb])
			if p.Hashes[i] != h {
				t.Fatalf("blocks of %d, block %d: %x, blockHash chain %x", bb, i, p.Hashes[i], h)
			}
		}
	}
}

// blockHash is the chain's definition for one block, written plainly (the
// renderer hashes every block in one loop, with word loads in wasm).
func blockHash(prev uint64, block []byte) uint64 {
	h := prev
	for len(block) >= 8 {
		h = bits.RotateLeft64((h^binary.LittleEndian.Uint64(block))*0x9e3779b97f4a7c15, 27) * 0xc2b2ae3d27d4eb4f
		block = block[8:]
	}
	for _, c := range block {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	h = lb.Mix64(h ^ prev>>1)
	if h == 0 {
		h = 1
	}
	return h
}

func TestAppendDecimal(t *testing.T) {
	for _, v := range []uint32{0, 1, 9, 10, 99, 100, 4095, 65535, 1 << 20, 1<<32 - 1} {
		if got, want := string(appendDecimal([]byte("px/"), v)), "px/"+strconv.FormatUint(uint64(v), 10); got != want {
			t.Errorf("appendDecimal(%d) = %q, want %q", v, got, want)
		}
	}
}
