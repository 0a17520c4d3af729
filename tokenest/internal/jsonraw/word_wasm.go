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

// plainBlocks returns i advanced over whole 64-byte blocks of plain string
// bytes (no quote, backslash or control character): the first block that
// holds a stop, or has fewer than 64 bytes left, starts at the result.
// Only whether a block holds a stop is tested, not where (the caller's
// word loop finds it), so byte order does not matter. In wasm the loads
// go through a pointer, with the one bound the loop's condition gives:
// Go's wasm back end checks every b[k] and wazero every load again, and
// the plain loop over a long prompt is where that shows (SkipString is
// 2.3 times faster on a 46 KB prompt under wazero).
func plainBlocks(b []byte, i int) int {
	if i < 0 || len(b)-i < 64 {
		return i
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	last := uintptr(len(b) - 64)
	u := uintptr(i)
	for ; u <= last; u += 64 {
		q := unsafe.Add(p, u)
		lo := stopBits(*(*uint64)(q)) | stopBits(*(*uint64)(unsafe.Add(q, 8))) |
			stopBits(*(*uint64)(unsafe.Add(q, 16))) | stopBits(*(*uint64)(unsafe.Add(q, 24)))
		hi := stopBits(*(*uint64)(unsafe.Add(q, 32))) | stopBits(*(*uint64)(unsafe.Add(q, 40))) |
			stopBits(*(*uint64)(unsafe.Add(q, 48))) | stopBits(*(*uint64)(unsafe.Add(q, 56)))
		if (lo|hi)&highs != 0 {
			break
		}
	}
	return int(u)
}
