// Package jsonraw reads JSON bodies in place, without decoding anything it
// does not have to. gjson's Get and ForEach unescape every string value
// they touch into a new allocation, which for a prompt means copying the
// bulk of the body; this package instead works on offsets and raw
// sub-slices of the body and lets the caller decode string escapes one
// character at a time.
//
// It has two layers. The validating scanners (Skip, SkipString, CountString,
// SkipNumber, Valid) check RFC 8259 syntax while they move over a value, so a
// caller that reads a body through them validates it in the same pass. The
// walkers (Value, Members, Field) assume a value that has already been
// validated and jump from quote to quote.
//
// Every function is total: on input that is not valid JSON it returns
// something meaningless (or -1) but never panics or loops. It imports only
// the standard library.
package jsonraw

import (
	"bytes"
	"unicode/utf8"
)

// Kinds of values, by their first byte.
const (
	Invalid = 0
	String  = '"'
	Object  = '{'
	Array   = '['
	Number  = '0'
	True    = 't'
	False   = 'f'
	Null    = 'n'
)

// Kind returns the kind of the raw value v.
func Kind(v []byte) byte {
	if len(v) == 0 {
		return Invalid
	}
	return kinds[v[0]]
}

// kinds maps a value's first byte to its kind.
var kinds = [256]byte{
	'"': String, '{': Object, '[': Array, 't': True, 'f': False, 'n': Null,
	'-': Number, '0': Number, '1': Number, '2': Number, '3': Number,
	'4': Number, '5': Number, '6': Number, '7': Number, '8': Number, '9': Number,
}

// Str returns the body of a raw string value (the bytes between the quotes,
// escapes undecoded), or nil when v is not a string.
func Str(v []byte) []byte {
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	return v[1 : len(v)-1]
}

// isSpace reports whether c is JSON white space, with one comparison for
// the bytes above the space (nearly all of them) and a bit test below.
func isSpace(c byte) bool {
	const spaces = 1<<' ' | 1<<'\t' | 1<<'\n' | 1<<'\r'
	return c <= ' ' && spaces>>c&1 != 0
}

// SkipSpace returns the offset of the first byte at or after s[i] that is
// not JSON white space.
func SkipSpace(s []byte, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// skipString returns the index after the (valid) string starting at
// s[i] == '"'. It jumps from quote to quote (bytes.IndexByte is vectorized)
// and checks the backslashes before each.
func skipString(s []byte, i int) int {
	for i++; i < len(s); i++ {
		q := bytes.IndexByte(s[i:], '"')
		if q < 0 {
			return len(s)
		}
		i += q
		bs := 0
		for k := i - 1; k >= 0 && s[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return i + 1
		}
	}
	return len(s)
}

// skipValue returns the index after the (valid) value starting at s[i].
func skipValue(s []byte, i int) int {
	if i >= len(s) {
		return len(s)
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(s)
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && !isSpace(s[i]) {
		i++
	}
	return i
}

// Value returns the first value in s (leading white space skipped).
func Value(s []byte) []byte {
	i := SkipSpace(s, 0)
	return s[i:skipValue(s, i)]
}

// Iter walks the members of an object.
type Iter struct {
	s []byte
	i int
}

// Members starts a walk over the object v (empty when v is not an object).
func Members(v []byte) Iter {
	if Kind(v) != Object {
		return Iter{}
	}
	return Iter{s: v, i: 1}
}

// Next returns the next member's raw key body and raw value.
func (it *Iter) Next() (key, val []byte, ok bool) {
	s := it.s
	i := SkipSpace(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = SkipSpace(s, i+1)
	}
	if i >= len(s) || s[i] != '"' {
		it.i = len(s)
		return nil, nil, false
	}
	end := skipString(s, i)
	key = s[i+1 : max(end-1, i+1)]
	i = SkipSpace(s, end)
	if i >= len(s) || s[i] != ':' {
		it.i = len(s)
		return nil, nil, false
	}
	i = SkipSpace(s, i+1)
	end = skipValue(s, i)
	it.i = end
	return key, s[i:end], end > i
}

// Field returns the value of the object member named name, the last one
// when the key repeats (as Python's json, which the engines use, does), or
// nil.
func Field(obj []byte, name string) []byte {
	var found []byte
	for it := Members(obj); ; {
		k, v, ok := it.Next()
		if !ok {
			return found
		}
		if KeyIs(k, name) {
			found = v
		}
	}
}

// KeyIs reports whether the raw key body k decodes to name.
func KeyIs(k []byte, name string) bool {
	if string(k) == name {
		return true
	}
	if bytes.IndexByte(k, '\\') < 0 {
		return false
	}
	j := 0
	for i := 0; i < len(k); {
		var r rune
		var n int
		if k[i] == '\\' {
			if r, n = DecodeEscape(k[i:]); n == 0 {
				return false
			}
		} else {
			r, n = utf8.DecodeRune(k[i:])
		}
		i += n
		var buf [utf8.UTFMax]byte
		w := utf8.EncodeRune(buf[:], r)
		if j+w > len(name) || string(buf[:w]) != name[j:j+w] {
			return false
		}
		j += w
	}
	return j == len(name)
}

// DecodeEscape decodes the JSON escape at the start of s (s[0] == '\\') and
// returns the character and the escape's length, 0 when the escape is
// malformed. A surrogate pair is one character; a lone surrogate (valid
// JSON) is utf8.RuneError.
func DecodeEscape(s []byte) (rune, int) {
	if len(s) < 2 {
		return utf8.RuneError, 0
	}
	if c := escapes[s[1]]; c != 0 {
		return rune(c), 2
	}
	r, ok := Hex4(s[2:])
	if s[1] != 'u' || !ok {
		return utf8.RuneError, 0
	}
	if r >= 0xD800 && r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
		if lo, ok := Hex4(s[8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
			return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
		}
	}
	if r >= 0xD800 && r < 0xE000 {
		return utf8.RuneError, 6
	}
	return r, 6
}

// Hex4 decodes the four hex digits at the start of s (a \u escape's,
// after the "\u"), reporting false if s has fewer or they are not.
func Hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	v := hexDigits[s[0]]<<12 | hexDigits[s[1]]<<8 | hexDigits[s[2]]<<4 | hexDigits[s[3]]
	return rune(v), v <= 0xFFFF
}

// hexDigits maps a hex digit to its value and every other byte to 0x10000,
// which puts four digits combined above 0xFFFF: one test for all four.
var hexDigits = func() (t [256]uint32) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = uint32(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = uint32(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			t[c] = uint32(c - 'A' + 10)
		default:
			t[c] = 0x10000
		}
	}
	return t
}()

// hasPrefixWords is HasPrefix eight bytes at a time (wasm's; tested on
// every platform).
func hasPrefixWords(s, prefix []byte) bool {
	if len(s) < len(prefix) {
		return false
	}
	i := 0
	for ; i+8 <= len(prefix); i += 8 {
		if Word(s, i) != Word(prefix, i) {
			return false
		}
	}
	for ; i < len(prefix); i++ {
		if s[i] != prefix[i] {
			return false
		}
	}
	return true
}
