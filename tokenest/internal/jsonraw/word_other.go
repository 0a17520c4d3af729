//go:build !wasm

package jsonraw

import (
	"bytes"
	"encoding/binary"
)

// Word returns the eight bytes at b[i:] as a little-endian integer.
func Word(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// plainBlocks returns i advanced over whole 64-byte blocks of plain string
// bytes (no quote, backslash or control character): the first block that
// holds a stop, or has fewer than 64 bytes left, starts at the result.
// (word_wasm.go has the same loop over a pointer.)
func plainBlocks(b []byte, i int) int {
	if i < 0 {
		return i
	}
	for ; len(b)-i >= 64; i += 64 {
		lo := stopBits(Word(b, i)) | stopBits(Word(b, i+8)) | stopBits(Word(b, i+16)) | stopBits(Word(b, i+24))
		hi := stopBits(Word(b, i+32)) | stopBits(Word(b, i+40)) | stopBits(Word(b, i+48)) | stopBits(Word(b, i+56))
		if (lo|hi)&highs != 0 {
			break
		}
	}
	return i
}

// putWord stores x at b[:8], little-endian.
func putWord(b []byte, x uint64) { binary.LittleEndian.PutUint64(b, x) }

// HasPrefix reports whether s begins with prefix (bytes.HasPrefix).
func HasPrefix(s, prefix []byte) bool { return bytes.HasPrefix(s, prefix) }
