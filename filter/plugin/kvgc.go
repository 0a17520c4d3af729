package plugin

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/pdroute/pdroute/lb"
)

// KV-ready flags live in process-wide shared data, which has no delete and
// no listing, and they outlive a VM that fails (a trap, FAIL_RELOAD). So each
// VM records which flags it holds, and the others collect what a silent VM
// left behind:
//
//   - kvRegistryKey lists the VMs holding flags: instance id and heartbeat;
//   - kvLedgerPrefix+instance lists that VM's flag ids;
//   - every VM refreshes its heartbeat and ledger on its tick, and clears
//     the flags, ledger and registry entry of any VM silent for kvStaleAfter.
const (
	kvRegistryKey  = "kv_vms"
	kvLedgerPrefix = "kv_ledger/"
	// kvStaleAfter: a VM that did not tick for this long is gone (ticks run
	// every 100 ms in lmcache mode).
	kvStaleAfter = 30 * time.Second
	// kvBeatEvery: how often a VM refreshes its heartbeat.
	kvBeatEvery = time.Second
	// maxRegistry bounds the registry; the stalest entries go first.
	maxRegistry = 256
)

// kvLedger is one VM's side of flag collection.
type kvLedger struct {
	store    lb.Store
	instance uint64
	// held are the flag ids this VM wrote and has not cleared.
	held     map[string]bool
	dirty    bool
	lastBeat time.Time
}

func newKVLedger(store lb.Store, instance uint64) *kvLedger {
	return &kvLedger{store: store, instance: instance, held: map[string]bool{}}
}

func (l *kvLedger) wrote(id string)   { l.held[id], l.dirty = true, true }
func (l *kvLedger) cleared(id string) { delete(l.held, id); l.dirty = true }

// tick refreshes this VM's heartbeat and ledger and collects the flags of
// silent VMs. It returns how many flags it collected.
func (l *kvLedger) tick(now time.Time) int {
	l.flush(now)
	if now.Sub(l.lastBeat) < kvBeatEvery {
		return 0
	}
	l.lastBeat = now
	var stale []uint64
	l.updateRegistry(func(reg []vmBeat) []vmBeat {
		stale = stale[:0]
		kept := reg[:0]
		seen := false
		for _, b := range reg {
			switch {
			case b.instance == l.instance:
				b.beat, seen = now.UnixMilli(), true
			case now.Sub(time.UnixMilli(b.beat)) > kvStaleAfter:
				stale = append(stale, b.instance)
				continue
			}
			kept = append(kept, b)
		}
		if !seen {
			kept = append(kept, vmBeat{l.instance, now.UnixMilli()})
		}
		if len(kept) > maxRegistry { // drop the stalest
			slices.SortFunc(kept, func(a, b vmBeat) int { return cmp.Compare(b.beat, a.beat) })
			kept = kept[:maxRegistry]
		}
		return kept
	})
	collected := 0
	for _, inst := range stale {
		v, _, err := l.store.Get(l.ledgerKey(inst))
		if err != nil {
			continue
		}
		for _, id := range decodeIDs(v) {
			if overwrite(l.store, kvFlagPrefix+id, nil) == nil {
				collected++
			}
		}
		_ = overwrite(l.store, l.ledgerKey(inst), nil)
	}
	return collected
}

// flush writes this VM's ledger if it changed, after registering the VM if
// it never beat. Flags are written only after the ledger that names them, so
// a VM that traps between the two, even before its first tick, leaves nothing
// another VM cannot collect.
func (l *kvLedger) flush(now time.Time) {
	if !l.dirty {
		return
	}
	if l.lastBeat.IsZero() {
		l.updateRegistry(func(reg []vmBeat) []vmBeat {
			for i := range reg {
				if reg[i].instance == l.instance {
					reg[i].beat = now.UnixMilli()
					return reg
				}
			}
			return append(reg, vmBeat{l.instance, now.UnixMilli()})
		})
	}
	ids := make([]string, 0, len(l.held))
	for id := range l.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if overwrite(l.store, l.ledgerKey(l.instance), encodeIDs(ids)) == nil {
		l.dirty = false
	}
}

func (l *kvLedger) ledgerKey(instance uint64) string {
	return kvLedgerPrefix + strconv.FormatUint(instance, 16)
}

// vmBeat is one registry entry.
type vmBeat struct {
	instance uint64
	beat     int64 // Unix ms
}

// updateRegistry applies edit to the registry with CAS, a few tries.
func (l *kvLedger) updateRegistry(edit func([]vmBeat) []vmBeat) {
	for range 4 {
		v, cas, err := l.store.Get(kvRegistryKey)
		if err != nil && !errors.Is(err, lb.ErrNotFound) {
			return
		}
		next := encodeBeats(edit(decodeBeats(v)))
		if err := l.store.Set(kvRegistryKey, next, cas); !errors.Is(err, lb.ErrCasMismatch) {
			return
		}
	}
}

// encodeBeats: 16 bytes per entry (instance, beat), little endian.
func encodeBeats(bs []vmBeat) []byte {
	out := make([]byte, 0, 16*len(bs))
	for _, b := range bs {
		out = binary.LittleEndian.AppendUint64(out, b.instance)
		out = binary.LittleEndian.AppendUint64(out, uint64(b.beat))
	}
	return out
}

// decodeBeats reads encodeBeats' format; garbage reads as empty.
func decodeBeats(v []byte) []vmBeat {
	if len(v)%16 != 0 {
		return nil
	}
	out := make([]vmBeat, 0, len(v)/16)
	for i := 0; i < len(v); i += 16 {
		out = append(out, vmBeat{binary.LittleEndian.Uint64(v[i:]), int64(binary.LittleEndian.Uint64(v[i+8:]))})
	}
	return out
}

// encodeIDs: each id as a one-byte length then its bytes (ids are ≤ 64 bytes).
func encodeIDs(ids []string) []byte {
	var out []byte
	for _, id := range ids {
		if len(id) > 255 {
			continue
		}
		out = append(append(out, byte(len(id))), id...)
	}
	return out
}

// decodeIDs reads encodeIDs' format; a truncated tail is ignored.
func decodeIDs(v []byte) []string {
	var out []string
	for len(v) > 0 {
		n := int(v[0])
		if 1+n > len(v) {
			break
		}
		out = append(out, string(v[1:1+n]))
		v = v[1+n:]
	}
	return out
}
