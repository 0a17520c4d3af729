package plugin

import (
	"testing"
	"time"

	"github.com/pdroute/pdroute/lb"
)

func flag(t *testing.T, store lb.Store, id string) []byte {
	t.Helper()
	v, _, err := store.Get(kvFlagPrefix + id)
	if err != nil && err != lb.ErrNotFound {
		t.Fatal(err)
	}
	return v
}

// TestKVLedgerCollectsFlagsOfSilentVMs: the flags a VM leaves behind when it
// stops ticking are cleared by another VM once kvStaleAfter has passed, and
// never while the VM is alive.
func TestKVLedgerCollectsFlagsOfSilentVMs(t *testing.T) {
	store := lb.NewMemStore()
	t0 := time.Unix(1_700_000_000, 0)
	a, b := newKVLedger(store, 0xa), newKVLedger(store, 0xb)
	for _, id := range []string{"x", "y"} {
		if err := overwrite(store, kvFlagPrefix+id, []byte{2, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		a.wrote(id)
	}
	a.tick(t0)
	b.tick(t0)
	if got := decodeBeats(mustGet(t, store, kvRegistryKey)); len(got) != 2 {
		t.Fatalf("registry %v, want both VMs", got)
	}
	// A is alive at +20 s: nothing is collected at +31 s.
	a.tick(t0.Add(20 * time.Second))
	if n := b.tick(t0.Add(31 * time.Second)); n != 0 || len(flag(t, store, "x")) != 4 {
		t.Fatalf("collected %d flags of a live VM", n)
	}
	// A stops; B collects its flags after kvStaleAfter.
	if n := b.tick(t0.Add(20*time.Second + kvStaleAfter + 2*time.Second)); n != 2 {
		t.Fatalf("collected %d flags, want 2", n)
	}
	for _, id := range []string{"x", "y"} {
		if v := flag(t, store, id); len(v) != 0 {
			t.Errorf("flag %s still %v", id, v)
		}
	}
	reg := decodeBeats(mustGet(t, store, kvRegistryKey))
	if len(reg) != 1 || reg[0].instance != 0xb {
		t.Errorf("registry %v, want only B", reg)
	}
	if v := mustGet(t, store, a.ledgerKey(0xa)); len(v) != 0 {
		t.Errorf("A's ledger not cleared: %q", v)
	}
}

// TestKVLedgerClearedFlagsLeaveTheLedger: a flag the VM clears itself is not
// in its ledger any more.
func TestKVLedgerClearedFlagsLeaveTheLedger(t *testing.T) {
	store := lb.NewMemStore()
	l := newKVLedger(store, 7)
	l.wrote("x")
	l.wrote("y")
	l.cleared("x")
	l.tick(time.Unix(1, 0))
	if got := decodeIDs(mustGet(t, store, l.ledgerKey(7))); len(got) != 1 || got[0] != "y" {
		t.Fatalf("ledger %v, want [y]", got)
	}
}

// TestKVLedgerBeforeFirstTick: a VM that writes flags and traps before its
// first tick has registered itself and written its ledger with the flags
// (flush runs before the flags are written), so another VM collects them.
func TestKVLedgerBeforeFirstTick(t *testing.T) {
	store := lb.NewMemStore()
	t0 := time.Unix(1_700_000_000, 0)
	a, b := newKVLedger(store, 0xa), newKVLedger(store, 0xb)
	a.wrote("x")
	a.flush(t0)
	if err := overwrite(store, kvFlagPrefix+"x", []byte{1, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	// A traps here: it never ticks.
	b.tick(t0)
	if n := b.tick(t0.Add(kvStaleAfter + 2*time.Second)); n != 1 || len(flag(t, store, "x")) != 0 {
		t.Fatalf("collected %d flags, flag now %v", n, flag(t, store, "x"))
	}
}

func mustGet(t *testing.T, store lb.Store, key string) []byte {
	t.Helper()
	v, _, err := store.Get(key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return v
}

func FuzzKVDecoders(f *testing.F) {
	f.Add(encodeBeats([]vmBeat{{1, 2}, {3, 4}}))
	f.Add(encodeIDs([]string{"a", "bc"}))
	f.Fuzz(func(t *testing.T, v []byte) {
		for _, b := range decodeBeats(v) {
			_ = b
		}
		ids := decodeIDs(v)
		if again := decodeIDs(encodeIDs(ids)); len(again) != len(ids) {
			t.Fatalf("round trip lost ids: %v vs %v", ids, again)
		}
	})
}
