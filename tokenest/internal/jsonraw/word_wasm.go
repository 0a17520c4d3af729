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

// putWord stores x at b[:8], little-endian (wasm is), with one store as
// Word loads with one load.
func putWord(b []byte, x uint64) {
	_ = b[7]
	*(*uint64)(unsafe.Pointer(&b[0])) = x
}

// HasPrefix reports whether s begins with prefix (bytes.HasPrefix), eight
// bytes at a time: Go's wasm runtime compares byte by byte.
func HasPrefix(s, prefix []byte) bool { return hasPrefixWords(s, prefix) }
