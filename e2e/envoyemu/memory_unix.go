//go:build unix

package envoyemu

import (
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// reservedMemory backs a VM's linear memory as V8 does: the largest memory
// the VM may grow to is reserved up front as address space, and growing
// only makes more of it usable. wazero's default grows a Go slice, which
// copies the whole memory each time it outgrows its capacity: a cost
// Envoy does not have, which the emulator would add to every VM's first
// requests.
var reservedMemory experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(
	func(capacity, max uint64) experimental.LinearMemory {
		b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return &sliceMemory{} // wazero's way (it takes no nil)
		}
		return &mmapMemory{b: b}
	})

// sliceMemory is wazero's default way, where no address space is left.
type sliceMemory struct{ b []byte }

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if n := int(size); n > len(m.b) {
		m.b = append(m.b, make([]byte, n-len(m.b))...)
	}
	return m.b[:size]
}

func (m *sliceMemory) Free() { m.b = nil }

type mmapMemory struct {
	b      []byte // the reservation
	usable int    // bytes readable and writable from b's start
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.b)) {
		return nil
	}
	if n := int(size); n > m.usable {
		// whole pages of the host: wasm pages (64 KiB) are multiples
		if err := syscall.Mprotect(m.b[m.usable:n], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return nil
		}
		m.usable = n
	}
	return m.b[:size]
}

func (m *mmapMemory) Free() {
	if m.b != nil {
		_ = syscall.Munmap(m.b)
		m.b, m.usable = nil, 0
	}
}
