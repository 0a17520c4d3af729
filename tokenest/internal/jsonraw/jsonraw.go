// Package jsonraw walks a JSON document that gjson.Valid has accepted,
// without decoding anything it does not have to. gjson's Get and ForEach
// unescape every string value they touch into a new allocation, which for a
// prompt means copying the bulk of the body; this package instead hands out
// raw sub-slices of the body and lets the caller decode string escapes one
// character at a time.
//
// Every function is total: on input that is not valid JSON it returns
// something meaningless but never panics or loops.
package jsonraw

import (
	"bytes"
	"encoding/binary"
	"math/bits"
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
	switch c := v[0]; c {
	case '"', '{', '[', 't', 'f', 'n':
		return c
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return Number
	}
	return Invalid
}

// Str returns the body of a raw string value (the bytes between the quotes,
// escapes undecoded), or nil when v is not a string.
func Str(v []byte) []byte {
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	return v[1 : len(v)-1]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(s []byte, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at s[i] == '"'.
// It jumps from quote to quote (bytes.IndexByte is vectorized) and checks
// the backslashes before each.
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

// skipValue returns the index after the value starting at s[i].
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
	i := skipSpace(s, 0)
	return s[i:skipValue(s, i)]
}

// Iter walks the members of an object or the elements of an array.
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

// Elements starts a walk over the array v (empty when v is not an array).
func Elements(v []byte) Iter {
	if Kind(v) != Array {
		return Iter{}
	}
	return Iter{s: v, i: 1}
}

// Next returns the next member's raw key body and raw value.
func (it *Iter) Next() (key, val []byte, ok bool) {
	s := it.s
	i := skipSpace(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = skipSpace(s, i+1)
	}
	if i >= len(s) || s[i] != '"' {
		it.i = len(s)
		return nil, nil, false
	}
	end := skipString(s, i)
	key = s[i+1 : max(end-1, i+1)]
	i = skipSpace(s, end)
	if i >= len(s) || s[i] != ':' {
		it.i = len(s)
		return nil, nil, false
	}
	i = skipSpace(s, i+1)
	end = skipValue(s, i)
	it.i = end
	return key, s[i:end], end > i
}

// NextElem returns the next element of an array.
func (it *Iter) NextElem() (val []byte, ok bool) {
	s := it.s
	i := skipSpace(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = skipSpace(s, i+1)
	}
	if i >= len(s) || s[i] == ']' {
		it.i = len(s)
		return nil, false
	}
	end := skipValue(s, i)
	it.i = end
	return s[i:end], end > i
}

// Len returns the number of elements of an array.
func Len(v []byte) int {
	n := 0
	for it := Elements(v); ; n++ {
		if _, ok := it.NextElem(); !ok {
			return n
		}
	}
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
			r, n = DecodeEscape(k[i:])
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
// returns the character and the escape's length. A surrogate pair is one
// character; a lone surrogate or a malformed escape is utf8.RuneError.
func DecodeEscape(s []byte) (rune, int) {
	if len(s) < 2 {
		return utf8.RuneError, len(s)
	}
	switch s[1] {
	case 'n':
		return '\n', 2
	case 't':
		return '\t', 2
	case 'r':
		return '\r', 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'u':
		r, ok := hex4(s[2:])
		if !ok {
			return utf8.RuneError, 2
		}
		if r >= 0xD800 && r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := hex4(s[8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
				return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
			}
		}
		if r >= 0xD800 && r < 0xE000 {
			return utf8.RuneError, 6
		}
		return r, 6
	}
	return rune(s[1]), 2 // \" \\ \/
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, b := range s[:4] {
		switch {
		case b >= '0' && b <= '9':
			r = r<<4 | rune(b-'0')
		case b >= 'a' && b <= 'f':
			r = r<<4 | rune(b-'a'+10)
		case b >= 'A' && b <= 'F':
			r = r<<4 | rune(b-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// CodePoints counts the characters of a raw string body after decoding, as
// Python's len() does: an escape is one character (a surrogate pair too),
// and so is every byte that is not a UTF-8 continuation byte (which counts
// valid UTF-8 exactly). Between escapes it counts eight bytes at a time.
func CodePoints(body []byte) int {
	n := 0
	for len(body) > 0 {
		e := bytes.IndexByte(body, '\\')
		if e < 0 {
			return n + leadBytes(body)
		}
		n += leadBytes(body[:e]) + 1
		_, w := DecodeEscape(body[e:])
		body = body[e+w:]
	}
	return n
}

// leadBytes counts the bytes of b that are not continuation bytes
// (0b10xxxxxx).
func leadBytes(b []byte) int {
	n := len(b)
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		// A continuation byte has bit 7 set and bit 6 clear.
		cont := x & ^(x << 1) & 0x8080808080808080
		n -= bits.OnesCount64(cont)
		b = b[8:]
	}
	for _, c := range b {
		if c&0xC0 == 0x80 {
			n--
		}
	}
	return n
}
