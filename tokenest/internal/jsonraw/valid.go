package jsonraw

import (
	"math/bits"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects Valid and Skip
// accept. Requests nest a few levels; the bound keeps validation iterative
// and its state on the stack.
const MaxDepth = 512

// Valid reports whether b is one JSON value (RFC 8259) with optional white
// space around it, nested at most MaxDepth deep. Like gjson.Valid, whose
// verdicts it matches (a differential fuzz test checks), it does not check
// that strings are valid UTF-8.
func Valid(b []byte) bool {
	i := Skip(b, SkipSpace(b, 0), 0)
	return i >= 0 && SkipSpace(b, i) == len(b)
}

// Skip validates the value that starts at b[i] (no white space before it),
// inside depth already open arrays and objects, and returns the offset just
// after it, or -1 when it is not valid JSON or nests deeper than MaxDepth in
// all.
//
// It is one loop without calls for what most values are (keys and other
// short strings, integers, literals): a call costs more than such a value
// in wasm, whose Go back end passes arguments and results through memory.
// Longer strings, other numbers and runs of integers in arrays go to
// SkipString, SkipNumber and skipIntegers.
func Skip(b []byte, i, depth int) int {
	var stack [MaxDepth / 64]uint64 // bit set: the level is an object
	base := depth
	key := false // the value expected is an object's key (with its colon)
	for {
		// A value (or a key) is expected at b[i].
		if i >= len(b) {
			return -1
		}
		c := b[i]
		if key && c != '"' {
			return -1
		}
		switch c {
		case '{', '[':
			if depth >= MaxDepth {
				return -1
			}
			if d := uint(depth); c == '{' { // unsigned: shifts, not divisions
				stack[d/64] |= 1 << (d % 64)
			} else {
				stack[d/64] &^= 1 << (d % 64)
			}
			depth++
			i = SkipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // empty: {} or []
				depth--
				i++
				break
			}
			key = c == '{'
			continue
		case '"':
			// A string of up to fifteen bytes: its closing quote is the
			// first stop of the two words after the opening one (as in
			// SkipString).
			e := -1
			if len(b)-i > 16 {
				k := i
				x := Word(b, k+1)
				if stops(x) == 0 {
					k += 8
					x = Word(b, k+1)
				}
				if m := stops(x); m != 0 && b[k+1+bits.TrailingZeros64(m)>>3] == '"' {
					e = k + 2 + bits.TrailingZeros64(m)>>3
				}
			}
			if e < 0 {
				if e = SkipString(b, i); e < 0 {
					return -1
				}
			}
			i = e
			if key {
				i = SkipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return -1
				}
				i = SkipSpace(b, i+1)
				key = false
				continue
			}
		case 't':
			i = literal(b, i, "true")
		case 'f':
			i = literal(b, i, "false")
		case 'n':
			i = literal(b, i, "null")
		default:
			// An integer without sign, fraction or exponent, in line;
			// the run of them that may start here in an array, and any
			// other number, by calls.
			j := i + 1
			if c-'1' < 9 {
				for j < len(b) && b[j]-'0' < 10 {
					j++
				}
			} else if c != '0' {
				i = SkipNumber(b, i)
				break
			}
			if j >= len(b) {
				i = j
				break
			}
			if n := b[j]; n == ',' {
				if d := uint(depth - 1); c != '0' && j+1 < len(b) && b[j+1]-'1' < 9 &&
					depth > base && stack[d/64]>>(d%64)&1 == 0 {
					i = SkipNumber(b, skipIntegers(b, i))
					break
				}
			} else if n == '.' || n|0x20 == 'e' {
				i = SkipNumber(b, i)
				break
			}
			i = j
		}
		if i < 0 {
			return -1
		}
		// After a value: close containers or move to the next element.
		for {
			if depth == base {
				return i
			}
			i = SkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			d := uint(depth - 1)
			obj := stack[d/64]>>(d%64)&1 != 0
			switch {
			case b[i] == ',':
				i = SkipSpace(b, i+1)
				key = obj
			case obj && b[i] == '}', !obj && b[i] == ']':
				depth--
				i++
				continue
			default:
				return -1
			}
			break
		}
	}
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// stops marks, with the high bit of each byte, the bytes of x (eight bytes
// of a string, little-endian) that stop a scan: a quote, a backslash or a
// control character. Only the lowest mark is exact (a borrow can mark a
// byte above a real stop), and only the lowest is used.
func stops(x uint64) uint64 { return stopBits(x) & highs }

// stopBits is stops before its mask of high bits, so that the stops of
// several words are tested with one mask: the high bit of a byte of q or
// s is that of x, so one &^x serves the three tests.
func stopBits(x uint64) uint64 {
	q := x ^ (ones * '"')
	s := x ^ (ones * '\\')
	return ((q - ones) | (s - ones) | (x - ones*0x20)) &^ x
}

// Stops is stops for other packages: the high bit of each byte of x
// (eight bytes of a string, little-endian) that is a quote, a backslash or
// a control character, exact for the lowest.
func Stops(x uint64) uint64 { return stops(x) }

// continuations counts the UTF-8 continuation bytes (0b10xxxxxx) of x.
func continuations(x uint64) int {
	return bits.OnesCount64(x &^ (x << 1) & highs)
}

// escapes maps the byte after a backslash to the character a two-byte
// escape stands for, or 0.
var escapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// Escape returns the character that the two-byte escape `\c` stands for,
// or 0 when there is none (`\u` escapes are DecodeEscape's).
func Escape(c byte) byte { return escapes[c] }

// SkipString validates the JSON string at b[i] (b[i] == '"') and returns the
// offset after its closing quote, or -1: CountString's end without the
// count. Plain text goes two words at a time, and words with two-byte
// escapes (code) are taken in place as CountString takes them; it reads
// the whole of a long prompt that EstimateNear counts in part.
func SkipString(b []byte, i int) int {
	end, _ := SkipStringExtra(b, i)
	return end
}

// SkipStringExtra is SkipString that also returns how many more bytes the
// string's \u escapes take than the UTF-8 of their characters (a
// surrogate pair's twelve against four): the string's raw length less
// extra is its length with every \u escape written as UTF-8, a measure of
// its text that does not depend on how a client escaped it (EstimateNear
// extrapolates by it). Only \u escapes leave the word loop, where they
// are decoded anyway, so the count costs nothing on other text.
func SkipStringExtra(b []byte, i int) (end, extra int) {
	if len(b)-i > 16 {
		// A string of up to fifteen bytes (most keys and roles): its
		// closing quote is the first stop of the two words after the
		// opening one (as in CountString).
		x := Word(b, i+1)
		if stops(x) == 0 {
			i += 8
			x = Word(b, i+1)
		}
		if stops(x) != 0 {
			k := bits.TrailingZeros64(stops(x)) >> 3
			if b[i+1+k] == '"' {
				return i + 2 + k, 0
			}
		}
	}
	// Plain text in blocks of 64 bytes, then a word at a time, where a
	// word whose escapes are all of two bytes (\n, \", \\ …, frequent in
	// code) is passed in place, as CountString does; the closing quote, a
	// \u escape or an error leaves the words for the byte loop, which also
	// finishes the string's last bytes.
	var carry uint64 // the previous word ended with an escaping backslash
	for i++; ; {
		for i = plainBlocks(b, i); len(b)-i >= 8; i += 8 {
			x := Word(b, i)
			if stops(x) == 0 && carry == 0 {
				continue
			}
			e := uint64(escapeTable[bitsOf(equal(x, '\\'))|carry<<8])
			escaped := e & 0xFF
			if bitsOf(equal(x, '"')|below(x, 0x20))&^escaped != 0 || !twoByteEscapes(x, escaped) {
				i -= int(carry) // from the escaping backslash if it ended the last word
				carry = 0
				break
			}
			carry = e >> 8
		}
		if carry != 0 { // fewer than 8 bytes left after an escaping backslash
			i--
			carry = 0
		}
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++
		}
		if i >= len(b) {
			return -1, 0
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, extra
		case c < 0x20:
			return -1, 0
		}
		if i+1 < len(b) && escapes[b[i+1]] != 0 {
			i += 2
			continue
		}
		r, w := DecodeEscape(b[i:])
		if w == 0 {
			return -1, 0
		}
		extra += w - utf8.RuneLen(r)
		i += w
	}
}

// CountString validates the JSON string at b[i] (b[i] == '"') and counts
// its characters after decoding, as Python's len() does: an escape is one
// character (a surrogate pair too), and so is every byte that is not a
// UTF-8 continuation byte (which counts valid UTF-8 exactly). It returns
// the offset after the closing quote and the count, or -1 when the string
// is not valid JSON.
//
// The word loop reads eight bytes at a time. A word without quotes, backslashes or
// control characters is counted with one population count; a word with
// two-byte escapes (\n, \", \\, …, frequent in code) is counted in place
// too, its escaped bytes found with escapeTable, so only the closing
// quote, \u escapes and errors leave the loop.
func CountString(b []byte, i int) (end, n int) {
	if len(b)-i > 16 {
		// A string of up to fifteen bytes (most keys and roles): its
		// closing quote is the first stop of the two words after the
		// opening one.
		x := Word(b, i+1)
		if stops(x) == 0 {
			n = 8 - continuations(x)
			i += 8
			x = Word(b, i+1)
		}
		if stops(x) != 0 {
			k := bits.TrailingZeros64(stops(x)) >> 3
			if b[i+1+k] == '"' {
				return i + 2 + k, n + k - continuations(x&(1<<(8*k)-1))
			}
		}
	}
	var carry uint64 // the previous word ended with an escaping backslash
	for i++; ; {
		for len(b)-i >= 8 {
			x := Word(b, i)
			if stops(x) == 0 && carry == 0 {
				n += 8 - continuations(x)
				i += 8
				continue
			}
			e := uint64(escapeTable[bitsOf(equal(x, '\\'))|carry<<8])
			escaped := e & 0xFF
			if bitsOf(equal(x, '"')|below(x, 0x20))&^escaped != 0 || !twoByteEscapes(x, escaped) {
				// The closing quote, an error or a \u escape: byte by byte,
				// from the escaping backslash if it ended the last word.
				i -= int(carry)
				n -= int(carry)
				carry = 0
				break
			}
			n += 8 - continuations(x) - bits.OnesCount64(escaped)
			carry = e >> 8
			i += 8
		}
		if carry != 0 { // fewer than 8 bytes left after an escaping backslash
			i--
			n--
			carry = 0
		}
		for ; i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20; i++ {
			if b[i]&0xC0 != 0x80 {
				n++
			}
		}
		if i >= len(b) || b[i] < 0x20 {
			return -1, 0
		}
		if b[i] == '"' {
			return i + 1, n
		}
		n++
		if i+1 < len(b) && escapes[b[i+1]] != 0 {
			i += 2
			continue
		}
		_, w := DecodeEscape(b[i:])
		if w == 0 {
			return -1, 0
		}
		i += w
	}
}

// EscapedBytes marks the bytes that a backslash escapes, given the
// backslashes (bit k: byte k) of a window that starts outside any escape:
// the bytes after an odd-length run of backslashes. Runs that start on an
// odd bit are carried through by an addition, which tells runs of odd
// length from runs of even length by the parity of the bit after them.
// carry reports that the window ends with an escaping backslash.
func EscapedBytes(bslash uint64) (escaped uint64, carry bool) {
	const even = 0x5555555555555555
	follows := bslash << 1
	oddStarts := bslash &^ even &^ follows
	evenEnds, c := bits.Add64(oddStarts, bslash, 0)
	return (even ^ evenEnds<<1) & follows, c != 0
}

// escapeTable[bs | carry<<8] gives, for a word whose backslashes are the
// bits of bs (bit k: byte k) and whose first byte is escaped when carry is
// 1, the bits of the escaped bytes and, in bit 8, whether the word's last
// backslash escapes the next word's first byte.
var escapeTable = func() (t [512]uint16) {
	for in := range t {
		escaping := in>>8 != 0
		var out uint16
		for k := range 8 {
			switch {
			case escaping:
				out |= 1 << k
				escaping = false
			case in>>k&1 != 0:
				escaping = true
			}
		}
		if escaping {
			out |= 1 << 8
		}
		t[in] = out
	}
	return t
}()

// twoByteEscapes reports whether every escaped byte of x (bits of escaped)
// ends a two-byte escape (\" \\ \/ \b \f \n \r \t).
func twoByteEscapes(x, escaped uint64) bool {
	for ; escaped != 0; escaped &= escaped - 1 {
		if escapes[byte(x>>(8*bits.TrailingZeros64(escaped)))] == 0 {
			return false
		}
	}
	return true
}

// equal marks with the high bit of each byte the bytes of x equal to c,
// exactly (no borrow between bytes).
func equal(x uint64, c byte) uint64 {
	t := x ^ ones*uint64(c)
	return ^((t&(ones*0x7F) + ones*0x7F) | t) & highs
}

// below marks with the high bit of each byte the bytes of x below c (c ≤
// 0x80), exactly.
func below(x uint64, c byte) uint64 {
	return ^((x&(ones*0x7F) + ones*uint64(0x80-c)) | x) & highs
}

// bitsOf gathers the high bits of the bytes of m (only high bits set) into
// bits 0–7.
func bitsOf(m uint64) uint64 { return (m >> 7) * 0x0102040810204080 >> 56 }

// skipIntegers passes, in an array, the elements at b[i] that are
// integers without sign or leading zero followed by a comma and another
// such integer (prefill answers' KV block id lists, thousands of numbers),
// without the element-by-element walk, and returns the offset of the
// element it stopped at, which Skip reads as any other.
func skipIntegers(b []byte, i int) int {
	for i < len(b) && b[i]-'1' < 9 {
		if k := integerWords(b, i); k > i {
			i = k
			continue
		}
		j := i + 1
		for j < len(b) && b[j]-'0' < 10 {
			j++
		}
		if j+1 >= len(b) || b[j] != ',' || b[j+1]-'1' >= 9 {
			break
		}
		i = j + 1
	}
	return i
}

// integerWords is skipIntegers eight bytes at a time: from b[i], a digit
// other than 0 that starts an element, it passes the words whose bytes are
// all digits or commas with a digit other than 0 after each comma (the
// first byte of the next word after a comma that ends a word), and returns
// the offset just after the last comma passed: each element started
// before it is then an integer without a leading zero, and the element
// after it is read as any other. It returns i when no comma was passed.
//
// The words go in steps of eight bytes, whatever they hold, with one bit
// (a comma ended the word) carried to the next: the last comma is looked
// for once, back from where the words stopped.
func integerWords(b []byte, i int) int {
	const low7 = ones * 0x7F
	var carry uint64
	j := i
	for ; j+8 <= len(b); j += 8 {
		x := Word(b, j)
		// The high bit of each byte says whether it is a digit, a comma,
		// a '0': byte by byte, as no sum below carries into the next byte.
		t := x ^ (ones * '0')
		digit := ^((t&low7 + ones*(0x80-10)) | t) & highs
		zero := ^((t&low7 + low7) | t) & highs
		c := x ^ (ones * ',')
		comma := ^((c&low7 + low7) | c) & highs
		// the bytes after the commas (after the last word's, this one's
		// first) are digits other than 0
		if digit|comma != highs || (comma<<8|carry)&^(digit&^zero) != 0 {
			break
		}
		carry = comma >> 56
	}
	// Back to the last comma passed (the elements are short); one that
	// ended the last word passed counts only if a digit other than 0
	// follows it, which the next word did not check.
	for j > i && b[j-1] != ',' {
		j--
	}
	if carry != 0 && (j >= len(b) || b[j]-'1' >= 9) {
		for j--; j > i && b[j-1] != ','; j-- {
		}
	}
	return j
}

// SkipNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i]
// and returns the offset after it, or -1.
func SkipNumber(b []byte, i int) int {
	digits := func(i int) (int, bool) {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i, i > s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else {
		var ok bool
		if i, ok = digits(i); !ok {
			return -1
		}
	}
	if i < len(b) && b[i] == '.' {
		var ok bool
		if i, ok = digits(i + 1); !ok {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		var ok bool
		if i, ok = digits(i); !ok {
			return -1
		}
	}
	return i
}
