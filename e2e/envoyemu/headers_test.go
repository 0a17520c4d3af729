package envoyemu

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

func TestHeaderMap(t *testing.T) {
	h := newHeaderMap([][2]string{{"Content-Type", "a"}, {":path", "/"}, {"x-dup", "1"}})
	h.add(":method", "GET")
	h.add("X-Dup", "2")
	want := [][2]string{{":path", "/"}, {":method", "GET"}, {"content-type", "a"}, {"x-dup", "1"}, {"x-dup", "2"}}
	if !slices.Equal(h.pairs, want) {
		t.Fatalf("pairs %v, want pseudo-headers first and keys lower-cased", h.pairs)
	}
	if v, ok := h.get("X-DUP"); !ok || v != "1" {
		t.Errorf("get = %q, want the first value", v)
	}
	h.set("content-type", "b")
	h.set("x-dup", "3")
	if want := [][2]string{{"content-type", "b"}, {"x-dup", "3"}}; !slices.Equal(h.pairs[2:], want) {
		t.Errorf("set left %v, want %v (every old value dropped, the new one last)", h.pairs[2:], want)
	}
	h.set(":path", "/v1")
	if !slices.Equal(h.pairs[:2], [][2]string{{":method", "GET"}, {":path", "/v1"}}) {
		t.Errorf("set of a pseudo-header left %v, want it after the other pseudo-headers", h.pairs)
	}
	h.set("x-new", "n")
	h.remove("x-dup")
	if _, ok := h.get("x-dup"); ok || h.len() != 4 {
		t.Errorf("remove left %v", h.pairs)
	}
	if got := h.byteSize(); got != len(":methodGET:path/v1content-typebx-newn") {
		t.Errorf("byteSize %d", got)
	}
	h.replaceAll([][2]string{{"A", "1"}})
	if !slices.Equal(h.pairs, [][2]string{{"a", "1"}}) {
		t.Errorf("replaceAll %v", h.pairs)
	}
}

func TestBodyCopyFrom(t *testing.T) {
	tests := []struct {
		start, size uint32
		data, want  string
		ok          bool
	}{
		{0, 0, "x", "xabcdef", true},
		{0, 2, "XY", "XYcdef", true},
		{0, 6, "new", "new", true},
		{0, 99, "", "", true},
		{6, 0, "!", "abcdef!", true},
		{7, 3, "!", "abcdef!", true},
		{1, 0, "x", "abcdef", false},
		{5, 1, "x", "abcdef", false},
	}
	for _, tt := range tests {
		b := &bodyBuf{b: []byte("abcdef")}
		if ok := b.copyFrom(tt.start, tt.size, []byte(tt.data)); ok != tt.ok || string(b.b) != tt.want {
			t.Errorf("copyFrom(%d, %d, %q) = %t %q, want %t %q", tt.start, tt.size, tt.data, ok, b.b, tt.ok, tt.want)
		}
	}
}

func TestEnvoyPairsLimits(t *testing.T) {
	big := make([][2]string, 1024)
	for i := range big {
		big[i] = [2]string{"k", "v"}
	}
	tests := []struct {
		name string
		data []byte
		want int
	}{
		{"empty", nil, 0},
		{"count only", []byte{0, 0, 0, 0}, 0},
		{"1024 pairs", abispec.AppendPairs(nil, big), 1024},
		{"1025 pairs", abispec.AppendPairs(nil, append(big, [2]string{"k", "v"})), 0},
		{"missing NUL", []byte{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 'x', 'b', 0}, 0},
		{"over 1 MiB", abispec.AppendPairs(nil, [][2]string{{"k", string(make([]byte, 1<<20))}}), 0},
	}
	for _, tt := range tests {
		if got := len(envoyPairs(tt.data)); got != tt.want {
			t.Errorf("%s: %d pairs, want %d", tt.name, got, tt.want)
		}
	}
}

// FuzzEnvoyPairs: guest-written pairs never panic the host, and what is
// accepted re-serializes to the same bytes.
func FuzzEnvoyPairs(f *testing.F) {
	f.Add(abispec.AppendPairs(nil, [][2]string{{":path", "/"}, {"a", ""}}))
	f.Add([]byte{0})
	f.Add([]byte{255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		pairs := envoyPairs(b)
		if len(pairs) > 0 && string(abispec.AppendPairs(nil, pairs)) != string(b) {
			t.Fatalf("accepted pairs do not round-trip")
		}
	})
}

// TestBodyBufRoom checks drain-and-prepend in a body buffered with room in
// front: the same bytes as without room, in place while the room lasts,
// whether its memory is new or a dirty spare.
func TestBodyBufRoom(t *testing.T) {
	dirty := func() *spares {
		p := &spares{}
		p.put(bytes.Repeat([]byte{0xff}, 200<<10))
		return p
	}
	for _, tc := range []struct {
		drain uint32
		data  string
	}{{0, "ab"}, {3, "x"}, {3, "xyz"}, {2, "0123456789"}, {9, "all"}, {0, ""}, {9, ""}, {1 << 20, strings.Repeat("z", 100<<10)}} {
		for _, p := range []*spares{{}, dirty()} {
			plain := &bodyBuf{b: []byte("abcdefghi")}
			room := withRoom(p, 9)
			room.b = append(room.b, "abcdefghi"...)
			for range 3 { // repeated: the room is used up and then reallocated
				if !plain.copyFrom(0, tc.drain, []byte(tc.data)) || !room.copyFrom(0, tc.drain, []byte(tc.data)) {
					t.Fatal("copyFrom refused a drain and prepend")
				}
				if string(room.b) != string(plain.b) {
					t.Fatalf("drain %d prepend %.20q: %.20q, want %.20q", tc.drain, tc.data, room.b, plain.b)
				}
			}
			room.release()
		}
	}
	b := withRoom(&spares{}, 4)
	b.b = append(b.b, "body"...)
	front := &b.front[0]
	b.copyFrom(0, 1, []byte("head-"))
	if string(b.b) != "head-ody" || &b.front[0] != front {
		t.Fatalf("%q: not prepended in place", b.b)
	}
	b.copyFrom(0, 8, []byte("new body"))
	if string(b.b) != "new body" || &b.front[0] != front {
		t.Fatalf("%q: not replaced in place", b.b)
	}
}

// TestSpares checks that a spare comes back at most once, with room for
// what was asked, and that the list keeps the largest buffers.
func TestSpares(t *testing.T) {
	var p spares
	if b := p.get(10); len(b) != 0 || cap(b) < 10 {
		t.Fatalf("empty list: len %d cap %d", len(b), cap(b))
	}
	for _, n := range []int{100, 50, 400, 200, 300, 10} {
		p.put(make([]byte, n))
	}
	if len(p.bufs) != maxSpares {
		t.Fatalf("%d spares kept, want %d", len(p.bufs), maxSpares)
	}
	if b := p.get(150); cap(b) != 200 { // the smallest that fits
		t.Fatalf("get(150): cap %d, want 200", cap(b))
	}
	if b := p.get(150); cap(b) != 300 {
		t.Fatalf("second get(150): cap %d, want 300", cap(b))
	}
	if b := p.get(500); cap(b) != 500 || len(p.bufs) != 2 {
		t.Fatalf("get(500): cap %d, %d spares left", cap(b), len(p.bufs))
	}
}
