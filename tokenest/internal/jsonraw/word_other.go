//go:build !wasm

package jsonraw

import (
	"bytes"
	"encoding/binary"
)

// Word returns the eight bytes at b[i:] as a little-endian integer.
func Word(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// putWord stores x at b[:8], little-endian.
func putWord(b []byte, x uint64) { binary.LittleEndian.PutUint64(b, x) }

// HasPrefix reports whether s begins with prefix (bytes.HasPrefix).
func HasPrefix(s, prefix []byte) bool { return bytes.HasPrefix(s, prefix) }
