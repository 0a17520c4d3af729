package jsonraw

import "unsafe"

// Word returns the eight bytes at b[i:] as a little-endian integer. Go's
// wasm back end does not merge the byte loads of binary.LittleEndian into
// one (amd64's does), so wasm, which allows unaligned loads, reads the
// word directly.
func Word(b []byte, i int) uint64 {
	_ = b[i+7]
	return *(*uint64)(unsafe.Pointer(&b[i]))
}
