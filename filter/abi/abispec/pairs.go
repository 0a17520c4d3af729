package abispec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Limits Envoy applies when it parses pairs written by the guest
// (cpp-host include/proxy-wasm/limits.h). Over either, Envoy silently uses an
// empty list. ParsePairs does not apply them: a guest must accept whatever
// its host sends.
const (
	MaxPairsBytes = 1 << 20
	MaxPairsCount = 1024
)

// ErrMalformedPairs is wrapped by every ParsePairs error.
var ErrMalformedPairs = errors.New("malformed pairs")

// PairsSize returns the serialized size of pairs: 4 + Σ(8 + len(k)+1 + len(v)+1).
func PairsSize(pairs [][2]string) int {
	n := 4
	for _, p := range pairs {
		n += 10 + len(p[0]) + len(p[1])
	}
	return n
}

// AppendPairs appends the ABI serialization of pairs to dst: a little-endian
// u32 count, count × (u32 key length, u32 value length), then each key and
// value followed by a NUL. An empty list is the 4-byte count 0.
func AppendPairs(dst []byte, pairs [][2]string) []byte {
	dst = slices.Grow(dst, PairsSize(pairs))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(pairs)))
	for _, p := range pairs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[1])))
	}
	for _, p := range pairs {
		dst = append(dst, p[0]...)
		dst = append(dst, 0)
		dst = append(dst, p[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// ParsePairs decodes the ABI pairs serialization. It accepts an empty input
// (and the spec's single 0x00 byte) as an empty list, and rejects a truncated
// header or data, a missing NUL terminator and trailing bytes with an error
// wrapping ErrMalformedPairs. It never panics, whatever the input.
//
// The returned strings share one copy of b, so b may be reused afterwards and
// a map costs two allocations however many pairs it has.
func ParsePairs(b []byte) ([][2]string, error) {
	count, err := checkPairs(b)
	if err != nil || count == 0 {
		return nil, err
	}
	s := string(b)
	pairs := make([][2]string, count)
	data := 4 + 8*count
	for i := range pairs {
		for j := range 2 {
			n := int(binary.LittleEndian.Uint32(b[4+8*i+4*j:]))
			pairs[i][j] = s[data : data+n]
			data += n + 1
		}
	}
	return pairs, nil
}

// EachPair calls fn with each key and value of the pairs serialization b,
// in order, once b is known to be well formed (ParsePairs's rules: a
// malformed b is an error and fn never runs). key and value are sub-slices
// of b: nothing is copied or allocated.
func EachPair(b []byte, fn func(key, value []byte)) error {
	// checkPairs's test, here again so that a header read runs one function
	// of this package: the well-formed input is checked in this loop, any
	// other is left to checkPairs for its error.
	if len(b) == 0 || (len(b) == 1 && b[0] == 0) {
		return nil
	}
	if len(b) < 4 {
		_, err := checkPairs(b)
		return err
	}
	c := uint64(binary.LittleEndian.Uint32(b))
	if c > uint64(len(b)-4)/10 {
		_, err := checkPairs(b)
		return err
	}
	count := int(c)
	data := 4 + 8*count
	for i := range 2 * count {
		n := uint64(binary.LittleEndian.Uint32(b[4+4*i:]))
		if n >= uint64(len(b)-data) || b[data+int(n)] != 0 {
			_, err := checkPairs(b)
			return err
		}
		data += int(n) + 1
	}
	if data != len(b) {
		_, err := checkPairs(b)
		return err
	}
	data = 4 + 8*count
	for i := range count {
		k := int(binary.LittleEndian.Uint32(b[4+8*i:]))
		v := int(binary.LittleEndian.Uint32(b[8+8*i:]))
		key := b[data : data+k : data+k]
		data += k + 1
		fn(key, b[data:data+v:data+v])
		data += v + 1
	}
	return nil
}

// checkPairs validates the pairs serialization b and returns its count.
func checkPairs(b []byte) (int, error) {
	if len(b) == 0 || (len(b) == 1 && b[0] == 0) {
		return 0, nil
	}
	if len(b) < 4 {
		return 0, malformed("%d bytes, want at least 4", len(b))
	}
	count := uint64(binary.LittleEndian.Uint32(b))
	// Each pair needs 8 size bytes and 2 NULs: bound count before allocating.
	if count > uint64(len(b)-4)/10 {
		return 0, malformed("count %d does not fit in %d bytes", int(count), len(b))
	}
	data := 4 + 8*int(count)
	for i := range int(count) {
		for j := range 2 {
			n := uint64(binary.LittleEndian.Uint32(b[4+8*i+4*j:]))
			if n >= uint64(len(b)-data) {
				return 0, malformed("pair %d overruns the buffer", i)
			}
			end := data + int(n)
			if b[end] != 0 {
				return 0, malformed("pair %d is not NUL-terminated", i)
			}
			data = end + 1
		}
	}
	if data != len(b) {
		return 0, malformed("%d trailing bytes", len(b)-data)
	}
	return int(count), nil
}

// malformed is checkPairs's error, built out of line: fmt's boxing of the
// arguments at every return would otherwise sit in the function every
// header read runs.
//
//go:noinline
func malformed(format string, args ...int) error {
	a := []any{ErrMalformedPairs}
	for _, x := range args {
		a = append(a, x)
	}
	return fmt.Errorf("%w: "+format, a...)
}
