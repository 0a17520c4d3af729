package envoyemu

import (
	"slices"
	"strings"
)

// headerMap copies Envoy's HeaderMapImpl semantics that a plugin can observe:
// keys are lower-cased; pseudo-headers (":path") stay in front of the others
// in insertion order; get returns the first value; add appends a duplicate;
// set drops every value and adds the new one (setCopy: remove, then addCopy,
// in source/common/http/header_map_impl.cc of the Envoy versions emulated;
// only old ones, before envoy.reloadable_features.http_set_copy_replace_all_headers,
// replaced the first value in place); remove drops every value.
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
	h.remove(key)
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
	// before b to prepend in (see withRoom); len(front) == cap(front).
	front []byte
	// spares, when set, lent front: front goes back there once nothing
	// reads it (release, or an edit that outgrows it).
	spares *spares
}

// withRoom is an empty bodyBuf for about n bytes, with room to append them
// and to prepend a tenth of them (64 KiB at least) without moving what it
// holds: Envoy's drain and prepend (a decode edit of the body's head) move
// slices, not the body. Its memory comes from p (not zeroed: nothing reads
// past what was written) and goes back with release.
func withRoom(p *spares, n int) *bodyBuf {
	room := headRoom(n)
	front := p.get(room + n)
	front = front[:cap(front)]
	return &bodyBuf{b: front[room:room], front: front, spares: p}
}

// headRoom is the room withRoom leaves before a body of n bytes.
func headRoom(n int) int { return max(64<<10, n/10) }

// release gives b's memory back to the spares it came from; b is empty
// and must not be used afterwards.
func (b *bodyBuf) release() {
	if b.spares != nil && b.front != nil {
		b.spares.put(b.front)
	}
	*b = bodyBuf{}
}

// copyFrom is proxy_set_buffer_bytes on an HTTP body (Envoy Buffer::copyFrom):
// start 0 drains size bytes then prepends data (so 0/0 prepends and 0/len
// replaces); start at or past the end appends; anything else is BadArgument.
// data never aliases b (it is read from the VM's memory). Each byte of data
// is copied once; the body kept is copied only when its room is too small.
func (b *bodyBuf) copyFrom(start, size uint32, data []byte) bool {
	switch {
	case start == 0:
		drain := min(int(size), len(b.b))
		rest := b.b[drain:]
		if b.front != nil && len(rest) == 0 && len(data) <= len(b.front) {
			// Everything drained: data is the body, in the same room.
			off := min(headRoom(len(data)), len(b.front)-len(data))
			b.b = b.front[off : off+copy(b.front[off:], data)]
			return true
		}
		if off := cap(b.front) - cap(rest); b.front != nil && len(rest) > 0 && off >= len(data) &&
			&b.front[off] == &rest[0] { // rest is still inside front
			copy(b.front[off-len(data):], data)
			b.b = b.front[off-len(data) : off+len(rest)]
			return true
		}
		var out []byte
		if b.spares != nil {
			out = b.spares.get(len(data) + len(rest))
		} else {
			out = make([]byte, 0, len(data)+len(rest))
		}
		out = append(append(out, data...), rest...)
		if b.spares != nil {
			b.spares.put(b.front) // rest, which may live there, is copied
			b.b, b.front = out, out[:cap(out)]
		} else {
			b.b, b.front = out, nil
		}
		return true
	case int(start) >= len(b.b):
		b.b = append(b.b, data...)
		return true
	}
	return false
}
