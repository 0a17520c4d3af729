//go:build !wasm

package prefix

import "encoding/binary"

// word returns the eight bytes at b[i:] as a little-endian integer.
func word(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
