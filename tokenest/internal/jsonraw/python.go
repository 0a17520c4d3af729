package jsonraw

import (
	"math/bits"
	"unicode/utf8"
)

// A Renderer prints a valid JSON value as Python's json.dumps(v,
// ensure_ascii=False) prints it, which is what chat templates' tojson
// prints (transformers renders them so): ", " and ": " between items and no
// other white space, and in strings only quotes, backslashes and control
// characters escaped, \n \r \t \b \f in their two-byte form and the others
// as \u00xx. So a value prints the same whatever escapes its client chose:
// \u escapes of other characters (all of them from Python's default
// json.dumps, <, > and & from Go's encoder) print as the characters, and \/
// as /. A lone surrogate escape, which has no UTF-8 form, is printed as it
// came.
//
// Fill writes the rendering into the caller's buffer a part at a time,
// copying a string's bytes eight at a time between escapes, so that a
// caller can scan each part as it comes, with nothing allocated and no call
// per piece. A part never ends inside a character (see Fill).
type Renderer struct {
	raw []byte
	i   int  // the next byte of raw to render
	str bool // i is inside a string
}

// NewRenderer returns a Renderer of the valid JSON value raw (what it
// prints of anything else is meaningless, but it never panics or loops).
func NewRenderer(raw []byte) Renderer { return Renderer{raw: raw} }

// MinFill is the shortest buffer Fill takes.
const MinFill = 32

// Fill writes the next part of the rendering into buf (at least MinFill
// bytes) and returns its length: 0 once the value is rendered. A part ends
// before a byte that is not a UTF-8 continuation byte, or before one that
// no lead byte in the three before it (with only continuation bytes
// between) can own: a stray one, a character of its own wherever the run
// is cut. So no character is split between two parts.
func (r *Renderer) Fill(buf []byte) int {
	raw, i, str, n := r.raw, r.i, r.str, 0
	if len(buf) < MinFill {
		panic("jsonraw: Fill's buffer is too short")
	}
	// One turn writes at most 13 bytes (seven copied before an escape and
	// its six-byte rendering) and may store eight at n.
	limit := len(buf) - 16
	for i < len(raw) && n <= limit {
		c := raw[i]
		if !str {
			i++
			switch c {
			case ' ', '\t', '\n', '\r':
			case ',', ':':
				buf[n], buf[n+1] = c, ' '
				n += 2
			case '"':
				buf[n] = c
				n++
				str = true
			default:
				buf[n] = c
				n++
			}
			continue
		}
		if i+8 <= len(raw) {
			// eight bytes of the string, copied whatever they hold,
			// kept up to the first quote or backslash (a valid
			// string has no control byte)
			w := Word(raw, i)
			putWord(buf[n:], w)
			s := stops(w)
			if s == 0 {
				i, n = i+8, n+8
				continue
			}
			k := bits.TrailingZeros64(s) >> 3
			i, n = i+k, n+k
			c = raw[i]
		}
		switch {
		case c == '"':
			buf[n] = c
			n++
			i++
			str = false
		case c != '\\':
			buf[n] = c
			n++
			i++
		case i+1 >= len(raw) || raw[i+1] != 'u' && raw[i+1] != '/':
			// a two-byte escape that json.dumps writes too
			buf[n] = c
			n++
			if i++; i < len(raw) {
				buf[n] = raw[i]
				n++
				i++
			}
		default:
			x, size := DecodeEscape(raw[i:])
			if v, _ := Hex4(raw[min(i+2, len(raw)):]); size == 0 || x == utf8.RuneError && v != utf8.RuneError {
				// malformed or a lone surrogate: as it came
				buf[n] = c
				n++
				i++
				continue
			}
			i += size
			if x < 0x20 || x == '"' || x == '\\' {
				n += copy(buf[n:], pythonEscapes[x&0x7F])
			} else {
				n += utf8.EncodeRune(buf[n:], x)
			}
		}
	}
	if str && i < len(raw) && raw[i]&0xC0 == 0x80 {
		// Stopped inside a string before a continuation byte, where
		// the bytes just written are raw's own (an escape is ASCII, and
		// so is what follows its rendering in raw): back to the lead
		// byte of its character, if that is at most three bytes back
		// with only continuation bytes between (else it is stray).
		for k := 1; k <= 3 && raw[i-k] >= 0x80; k++ {
			if raw[i-k] >= 0xC0 {
				i, n = i-k, n-k
				break
			}
		}
	}
	r.i, r.str = i, str
	return n
}

// AppendPython appends the rendering of the valid JSON value raw (see
// Renderer) to dst.
func AppendPython(dst, raw []byte) []byte {
	var buf [512]byte
	r := NewRenderer(raw)
	for n := r.Fill(buf[:]); n > 0; n = r.Fill(buf[:]) {
		dst = append(dst, buf[:n]...)
	}
	return dst
}

// pythonEscapes holds json.dumps's escapes of the control characters, the
// quote and the backslash: the two-byte escapes that decode to them (see
// escapes; all but \/), else \u00xx.
var pythonEscapes = func() (t [128][]byte) {
	const hex = "0123456789abcdef"
	for r := range 0x20 {
		t[r] = []byte{'\\', 'u', '0', '0', hex[r>>4], hex[r&0xF]}
	}
	for c, r := range escapes {
		if r != 0 && c != '/' {
			t[r] = []byte{'\\', byte(c)}
		}
	}
	return t
}()
