package prefix

import "unsafe"

// word returns the eight bytes at b[i:] as a little-endian integer. Go's
// wasm back end does not merge binary.LittleEndian's byte loads into one
// (amd64's does); wasm is little-endian and allows unaligned loads.
func word(b []byte, i int) uint64 {
	_ = b[i+7]
	return *(*uint64)(unsafe.Pointer(&b[i]))
}
