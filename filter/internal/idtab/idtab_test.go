package idtab

import (
	"math/rand/v2"
	"testing"
)

// The table answers as a map would, over id patterns like the host's:
// increasing ids, most short-lived, some held for long (they take slots
// the later ids map to), and replacements of present ids.
func TestTableAsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab Table[int]
	ref := map[uint32]int{}
	var live []uint32
	next := uint32(1)
	check := func(step int) {
		t.Helper()
		if tab.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", step, tab.Len(), len(ref))
		}
		for id, want := range ref {
			if got, ok := tab.Get(id); !ok || got != want {
				t.Fatalf("step %d: Get(%d) = %d, %v; want %d", step, id, got, ok, want)
			}
		}
		seen := map[uint32]int{}
		tab.Each(func(id uint32, v int) { seen[id] = v })
		if len(seen) != len(ref) {
			t.Fatalf("step %d: Each visited %d ids, want %d", step, len(seen), len(ref))
		}
		for id, v := range seen {
			if ref[id] != v {
				t.Fatalf("step %d: Each gave %d=%d, want %d", step, id, v, ref[id])
			}
		}
	}
	for step := range 20000 {
		switch r := rng.IntN(10); {
		case r < 5 || len(live) == 0: // a new stream
			tab.Put(next, int(next))
			ref[next] = int(next)
			live = append(live, next)
			next += 1 + uint32(rng.IntN(3))
		case r < 9: // one ends: usually a recent one, sometimes an old one
			k := len(live) - 1 - rng.IntN(min(len(live), 8))
			if rng.IntN(20) == 0 {
				k = rng.IntN(len(live))
			}
			id := live[k]
			live = append(live[:k], live[k+1:]...)
			v, ok := tab.Delete(id)
			if !ok || v != ref[id] {
				t.Fatalf("step %d: Delete(%d) = %d, %v; want %d", step, id, v, ok, ref[id])
			}
			delete(ref, id)
			if _, ok := tab.Get(id); ok {
				t.Fatalf("step %d: %d still there after Delete", step, id)
			}
		default: // a replacement
			id := live[rng.IntN(len(live))]
			tab.Put(id, -int(id))
			ref[id] = -int(id)
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
	if _, ok := tab.Delete(next + 1000); ok {
		t.Fatal("Delete of an absent id reported a value")
	}
}

// Ids far apart that share a slot all stay reachable, and the table grows
// rather than letting its overflow list grow long.
func TestTableCollisions(t *testing.T) {
	var tab Table[uint32]
	for i := range uint32(1000) {
		tab.Put(i*minSlots, i) // every id maps to slot 0 of the first size
	}
	for i := range uint32(1000) {
		if v, ok := tab.Get(i * minSlots); !ok || v != i {
			t.Fatalf("Get(%d) = %d, %v", i*minSlots, v, ok)
		}
	}
	if len(tab.extra) > len(tab.slots)/4 {
		t.Fatalf("overflow %d entries over %d slots", len(tab.extra), len(tab.slots))
	}
}

// Each tolerates deletions by fn, as OnTick's walk needs: every entry not
// deleted before its turn is visited.
func TestTableEachWithDeletes(t *testing.T) {
	var tab Table[uint32]
	for i := range uint32(300) {
		tab.Put(i*7, i*7)
	}
	tab.Each(func(id uint32, _ uint32) {
		tab.Delete(id)
		if id%3 == 0 {
			tab.Delete(id + 7) // a neighbour, visited or not
		}
	})
	if tab.Len() != 0 {
		t.Fatalf("%d entries left after deleting each visited one", tab.Len())
	}
}
