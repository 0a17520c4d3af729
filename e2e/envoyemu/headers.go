package envoyemu

import (
	"slices"
	"strings"
)

// headerMap copies Envoy's HeaderMapImpl semantics that a plugin can observe:
// keys are lower-cased; pseudo-headers (":path") stay in front of the others
// in insertion order; get returns the first value; add appends a duplicate;
// set replaces only the first value (setCopy); remove drops every value.
type headerMap struct {
	pairs [][2]string
}

func newHeaderMap(pairs [][2]string) *headerMap {
	h := &headerMap{pairs: make([][2]string, 0, len(pairs))}
	for _, p := range pairs {
		h.add(p[0], p[1])
	}
	return h
}

// clone returns an independent copy (nil for nil).
func (h *headerMap) clone() *headerMap {
	if h == nil {
		return nil
	}
	return &headerMap{pairs: slices.Clone(h.pairs)}
}

func (h *headerMap) get(key string) (string, bool) {
	key = strings.ToLower(key)
	for _, p := range h.pairs {
		if p[0] == key {
			return p[1], true
		}
	}
	return "", false
}

func (h *headerMap) add(key, value string) {
	key = strings.ToLower(key)
	if strings.HasPrefix(key, ":") {
		end := 0
		for end < len(h.pairs) && strings.HasPrefix(h.pairs[end][0], ":") {
			end++
		}
		h.pairs = slices.Insert(h.pairs, end, [2]string{key, value})
		return
	}
	h.pairs = append(h.pairs, [2]string{key, value})
}

func (h *headerMap) set(key, value string) {
	key = strings.ToLower(key)
	for i, p := range h.pairs {
		if p[0] == key {
			h.pairs[i][1] = value
			return
		}
	}
	h.add(key, value)
}

func (h *headerMap) remove(key string) {
	key = strings.ToLower(key)
	h.pairs = slices.DeleteFunc(h.pairs, func(p [2]string) bool { return p[0] == key })
}

// replaceAll is set_header_map_pairs: every header is removed, then the pairs added.
func (h *headerMap) replaceAll(pairs [][2]string) {
	h.pairs = h.pairs[:0]
	for _, p := range pairs {
		h.add(p[0], p[1])
	}
}

// byteSize is HeaderMap::byteSize(): the sum of key and value lengths, which is
// what Envoy returns for proxy_get_header_map_size.
func (h *headerMap) byteSize() int {
	n := 0
	for _, p := range h.pairs {
		n += len(p[0]) + len(p[1])
	}
	return n
}

func (h *headerMap) len() int {
	if h == nil {
		return 0
	}
	return len(h.pairs)
}

// bodyBuf is a body buffer a plugin may read and modify in place.
type bodyBuf struct {
	b []byte
	// front, when set, is an allocation b started inside of, with room
	// before b to prepend in (see withRoom).
	front []byte
}

// withRoom is an empty bodyBuf for about n bytes, with room to append them
// and to prepend a tenth of them (64 KiB at least) without moving what it
// holds: Envoy's drain and prepend (a decode edit of the body's head) move
// slices, not the body.
func withRoom(n int) *bodyBuf {
	room := max(64<<10, n/10)
	front := make([]byte, room+n)
	return &bodyBuf{b: front[room:room], front: front}
}

// copyFrom is proxy_set_buffer_bytes on an HTTP body (Envoy Buffer::copyFrom):
// start 0 drains size bytes then prepends data (so 0/0 prepends and 0/len
// replaces); start at or past the end appends; anything else is BadArgument.
func (b *bodyBuf) copyFrom(start, size uint32, data []byte) bool {
	switch {
	case start == 0:
		drain := min(int(size), len(b.b))
		rest := b.b[drain:]
		if off := cap(b.front) - cap(rest); b.front != nil && len(rest) > 0 && off >= len(data) &&
			&b.front[off] == &rest[0] { // rest is still inside front
			copy(b.front[off-len(data):], data)
			b.b = b.front[off-len(data) : off+len(rest)]
			return true
		}
		b.front = nil
		out := make([]byte, 0, len(data)+len(rest))
		b.b = append(append(out, data...), rest...)
		return true
	case int(start) >= len(b.b):
		b.b = append(b.b, data...)
		return true
	}
	return false
}
