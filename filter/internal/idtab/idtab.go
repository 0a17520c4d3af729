// Package idtab owns Table, the filter's lookup of per-VM objects by a
// uint32 id that the host hands out in increasing order: proxy-wasm context
// ids and http-call tokens. Every callback of a request looks its stream up,
// so the lookup is O(1) and small: a direct-mapped array indexed by the id's
// low bits, with a short overflow list for the ids whose slot a long-lived
// neighbour still holds. It runs far less code per request than the
// runtime's map functions do (a distinct function costs a fetch of its code
// in wasm), and, unlike a scanned slice, stays O(1) with thousands of live
// streams.
package idtab

// Table holds values by id. The zero value is empty and ready; it is not
// safe for concurrent use (a VM is single-threaded).
type Table[T any] struct {
	// slots[id & (len-1)] holds id's entry unless another id holds it.
	slots []entry[T]
	// extra holds the entries whose slot was taken, in no order.
	extra []entry[T]
	n     int
}

type entry[T any] struct {
	id   uint32
	used bool
	v    T
}

// minSlots is the first size of a table; it doubles when the overflow list
// grows past a quarter of it, so it stays within about 8× the most entries
// held at once (wasm memory never shrinks).
const minSlots = 64

// Len returns how many entries the table holds.
func (t *Table[T]) Len() int { return t.n }

// Get returns id's value and whether id is in the table.
func (t *Table[T]) Get(id uint32) (T, bool) {
	if len(t.slots) > 0 {
		if e := &t.slots[id&uint32(len(t.slots)-1)]; e.used && e.id == id {
			return e.v, true
		}
	}
	for i := range t.extra {
		if t.extra[i].id == id {
			return t.extra[i].v, true
		}
	}
	var zero T
	return zero, false
}

// Put sets id's value, replacing any it had.
func (t *Table[T]) Put(id uint32, v T) {
	if len(t.slots) == 0 {
		t.slots = make([]entry[T], minSlots)
	}
	e := &t.slots[id&uint32(len(t.slots)-1)]
	switch {
	case e.used && e.id == id:
		e.v = v
		return
	case !e.used:
		if i := t.inExtra(id); i >= 0 {
			t.extra[i].v = v
			return
		}
		*e = entry[T]{id: id, used: true, v: v}
		t.n++
		return
	}
	if i := t.inExtra(id); i >= 0 {
		t.extra[i].v = v
		return
	}
	t.extra = append(t.extra, entry[T]{id: id, used: true, v: v})
	t.n++
	if len(t.extra) > len(t.slots)/4 {
		t.grow()
	}
}

// Delete removes id and returns the value it had, if any.
func (t *Table[T]) Delete(id uint32) (T, bool) {
	var zero T
	if len(t.slots) > 0 {
		if e := &t.slots[id&uint32(len(t.slots)-1)]; e.used && e.id == id {
			v := e.v
			*e = entry[T]{}
			t.n--
			return v, true
		}
	}
	if i := t.inExtra(id); i >= 0 {
		v := t.extra[i].v
		last := len(t.extra) - 1
		t.extra[i] = t.extra[last]
		t.extra[last] = entry[T]{}
		t.extra = t.extra[:last]
		t.n--
		return v, true
	}
	return zero, false
}

// Each calls fn with every entry. fn may delete entries (its own or
// others'): an entry deleted before its turn is not visited, and one entry
// may then be visited twice.
func (t *Table[T]) Each(fn func(id uint32, v T)) {
	for i := range t.slots {
		if e := t.slots[i]; e.used {
			fn(e.id, e.v)
		}
	}
	for i := len(t.extra) - 1; i >= 0; i-- {
		if i < len(t.extra) {
			e := t.extra[i]
			fn(e.id, e.v)
		}
	}
}

func (t *Table[T]) inExtra(id uint32) int {
	for i := range t.extra {
		if t.extra[i].id == id {
			return i
		}
	}
	return -1
}

// grow doubles the slots and places every entry again.
func (t *Table[T]) grow() {
	old, extra := t.slots, t.extra
	t.slots, t.extra, t.n = make([]entry[T], 2*len(old)), nil, 0
	for _, e := range old {
		if e.used {
			t.Put(e.id, e.v)
		}
	}
	for _, e := range extra {
		t.Put(e.id, e.v)
	}
}
