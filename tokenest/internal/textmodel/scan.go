package textmodel

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// scan feeds s[i:] through the pre-tokenizer replay. In a JSON string body
// (json) it decodes escapes, stops at the closing quote and returns its
// offset, or -1 at a raw control character, a malformed escape or the end of
// s; in plain text it reads all of s and returns len(s).
//
// Three readers share the work. Whenever the replay is idle (between
// pieces), blocks reads 64 bytes at a time through bitmaps of character
// classes (see block.go), as far as their characters are modelled there
// (ASCII, escapes, and the characters of most scripts: see block.go's
// overview); then fast
// reads whole pieces of ASCII text, for at most fastSpan bytes before
// blocks try again. Whatever neither can settle goes character by
// character through step, the replay's definition, until the piece ends;
// step's runs (letters of one script, spaces, punctuation, digits) are
// extended by loops over byte-class tables. With a Trace, which reports
// pieces one by one, blocks are not used.
func (c *Counter) scan(s []byte, i int, json bool) int {
	c.used = true
	class := &plainClass
	if json {
		class = &jsonClass
	}
	retry := i // where blocks may read again
	if c.Trace != nil {
		retry = len(s) // Trace reports pieces one by one: no blocks
	} else if json && len(s)-i >= 16 {
		// A JSON string that closes within 16 bytes (a one-word
		// message, a name), its closing quote being the first quote,
		// backslash or control character of two words: fast and step
		// read it, and the block reader, a large function, is not
		// entered for it. The counts are the same either way (blocks
		// are optional; FuzzBlocksMatchStep). In line: a call costs
		// what the test saves.
		x, k := jsonraw.Word(s, i), i
		if jsonraw.Stops(x) == 0 {
			x, k = jsonraw.Word(s, i+8), i+8
		}
		if st := jsonraw.Stops(x); st != 0 && s[k+bits.TrailingZeros64(st)>>3] == '"' {
			retry = i + 16
		}
	}
	for i < len(s) {
		if c.mode == mIdle {
			limit := len(s)
			if i >= retry {
				if len(s)-i < minBlock || !modelled(jsonraw.Word(s, i)) {
					retry = i + unmodelledSpan // text in a script blocks do not read
				} else if i, retry = c.blocks(s, i, json); c.mode != mIdle {
					continue // a run of a per-character script goes on
				} else {
					limit = i + fastSpan
				}
			}
			if i = c.fast(s, i, json, limit); i >= len(s) {
				break
			}
			if i >= limit {
				continue // the blocks may take over again
			}
		}
		b := s[i]
		cb := class[b]
		switch c.mode {
		case mWord:
			if c.script == sLatin {
				if cb == cLetter {
					i = c.latinRun(s, i)
					continue
				}
			} else if j := c.sameScriptRun(s, i, json); j > i {
				i = j
				continue
			}
		case mSpace:
			if b == ' ' {
				j := i + 1
				for j < len(s) && s[j] == ' ' {
					j++
				}
				c.wsLen += uint32(j - i)
				c.wsLastChar, c.wsLastPos = ' ', j-1
				i = j
				continue
			}
		case mPunct:
			if cb == cOther {
				j := i + 1
				for j < len(s) && class[s[j]] == cOther {
					j++
				}
				c.punctLen += uint32(j - i)
				i = j
				continue
			}
		case mDigits:
			if cb == cDigit {
				j := i + 1
				for j < len(s) && s[j]-'0' < 10 {
					j++
				}
				c.digitLen += uint32(j - i)
				i = j
				continue
			}
		}
		var (
			r          rune
			size, ulen int
		)
		switch cb {
		case cNonASCII:
			r, size = decodeRune(s[i:])
			ulen = size
		case cEscape:
			if r, size = jsonraw.DecodeEscape(s[i:]); size == 0 {
				return -1
			}
			if r >= utf8.RuneSelf && decodeStrings && c.Trace == nil {
				return c.decoded(s, i) // a \u escape of a character beyond ASCII
			}
			ulen = utf8.RuneLen(r)
		case cQuote:
			return i
		case cInvalid:
			return -1
		default:
			r, size, ulen = rune(b), 1, 1
		}
		ci := infoOf(r)
		cls, script, upper, accented := ci.class(), ci.script(), ci.upper(), ci.accented()
		consumed := c.step(r, cls, script, upper, accented, ulen, i)
		if !consumed && r >= utf8.RuneSelf {
			// fast reads no such character: start the next piece with it
			consumed = c.step(r, cls, script, upper, accented, ulen, i)
		}
		if consumed {
			i += size
		}
	}
	if json {
		return -1
	}
	return i
}

// decodeStrings lets scan hand a JSON string to decoded (tests turn it off
// to compare).
var decodeStrings = true

// decodeBuf is the size of decoded's buffer: several blocks.
const decodeBuf = 512

// decoded reads the rest of a JSON string, s[i:], which scan has met a \u
// escape of a character beyond ASCII in, and returns the offset of its
// closing quote, or -1 where scan would (a raw control character, a
// malformed escape, no closing quote). Clients that escape every
// non-ASCII character (Python's json.dumps by default) send such strings:
// the block reader stops at each of those escapes, so scan would read the
// string's non-ASCII text through step, character by character (~280
// instructions per character of \u-escaped Chinese, ~65 unescaped).
// decoded decodes the rest of the string instead, into a buffer on the
// stack, and scans it a buffer at a time as plain text, which the block
// reader reads (\u-escaped Chinese ~135 instructions per character): the
// counts are those of the string's text either way
// (TestDecodedMatchesEscaped, FuzzDecodedMatchesEscaped). A run of escapes
// of three-byte characters is decoded in a loop of its own, and plain ASCII is copied eight bytes at a
// time, so that a string of ASCII with escaped quotes (a \u-escaped JSON
// prompt) costs what scan's reading in place does. A buffer is scanned only
// where no character is split: before an escape or a raw byte that is not a
// continuation byte, or before one that no lead byte less than four bytes
// back can own (pending counts down from a raw lead byte's three possible
// continuation bytes).
func (c *Counter) decoded(s []byte, i int) int {
	buf := &c.decodedBuf
	n, pending := 0, 0 // bytes in buf
	for i < len(s) {
		b := s[i]
		if n >= decodeBuf-8 && (b < 0x80 || b >= 0xC0 || pending == 0) {
			c.scan(buf[:n], 0, false)
			n = 0
		}
		if b == '\\' && i+1 < len(s) {
			if e := jsonraw.Escape(s[i+1]); e != 0 {
				buf[n] = e // \n, \", \\ …
				n, i, pending = n+1, i+2, 0
				continue
			}
			// \uXXXX escapes of characters of two bytes, and runs of
			// those of three, the bulk of such strings (the others
			// and malformed escapes below; n < decodeBuf-8 here, the
			// buffer having been scanned above)
			if len(s)-i >= 6 && s[i+1] == 'u' {
				v, ok := jsonraw.Hex4(s[i+2:])
				u := uint32(v)
				if ok && u-0x80 < 0x800-0x80 {
					buf[n], buf[n+1] = 0xC0|byte(u>>6), 0x80|byte(u)&0x3F
					n, i, pending = n+2, i+6, 0
					continue
				}
				if ok && threeBytes(u) {
					binary.LittleEndian.PutUint32(buf[n:], utf8Three(u))
					n, i, pending = n+3, i+6, 0
					for len(s)-i >= 6 && n <= decodeBuf-8 {
						e := s[i : i+6 : i+6]
						v, ok := jsonraw.Hex4(e[2:])
						u := uint32(v)
						if e[0] != '\\' || e[1] != 'u' || !ok || !threeBytes(u) {
							break // not a three-byte character, or a surrogate
						}
						binary.LittleEndian.PutUint32(buf[n:], utf8Three(u))
						n, i = n+3, i+6
					}
					continue
				}
			}
		}
		if b >= 0x20 && b < 0x80 && b != '"' && b != '\\' {
			// plain ASCII, eight bytes at a time up to the first
			// quote, backslash, control or non-ASCII byte (as far as
			// the buffer goes; the bytes stored after it are
			// overwritten)
			pending = 0
			from := i
			for n <= decodeBuf-16 && len(s)-i >= 8 {
				x := jsonraw.Word(s, i)
				binary.LittleEndian.PutUint64(buf[n:], x)
				if stop := jsonraw.Stops(x) | x&0x8080808080808080; stop != 0 {
					k := bits.TrailingZeros64(stop) >> 3 // ≥ 1: b is plain
					n, i = n+k, i+k
					break
				}
				n, i = n+8, i+8
			}
			if i == from {
				buf[n] = b // near the end of s or of the buffer
				n, i = n+1, i+1
			}
			continue
		}
		switch {
		case b == '"':
			c.scan(buf[:n], 0, false)
			return i
		case b == '\\':
			r, size := jsonraw.DecodeEscape(s[i:])
			if size == 0 {
				return -1
			}
			n += utf8.EncodeRune(buf[n:], r)
			i += size
			pending = 0
		case b < 0x20:
			return -1
		default:
			buf[n] = b
			n++
			i++
			if b >= 0xC0 {
				pending = 3
			} else {
				pending = max(pending-1, 0)
			}
		}
	}
	return -1
}

// threeBytes reports whether u, at most U+FFFF, is a character of three
// UTF-8 bytes: U+0800 or above, and not a surrogate.
func threeBytes(u uint32) bool { return u >= 0x800 && u-0xD800 >= 0x800 }

// utf8Three is the UTF-8 encoding of u, a character of three bytes
// (U+0800 to U+FFFF but the surrogates), in the low three bytes, first
// byte lowest.
func utf8Three(u uint32) uint32 {
	return 0xE0 | u>>12 | (0x80|u>>6&0x3F)<<8 | (0x80|u&0x3F)<<16
}

// sameScriptRun continues a segment of a script other than Latin with the
// letters of that script at s[i:] and returns the offset after them. Han
// and Hangul, the bulk of CJK text, take no call. In a JSON string (json)
// the letters may also be \u escapes, which is how Python's json.dumps
// sends every non-ASCII character by default.
func (c *Counter) sameScriptRun(s []byte, i int, json bool) int {
	want := charInfo(cLetter) | charInfo(c.script)<<3
	n := c.segLen
	for i < len(s) {
		var (
			r    rune
			size int
		)
		switch {
		case s[i] >= utf8.RuneSelf:
			r, size = decode3(s[i:])
			if size == 0 {
				r, size = decodeRune(s[i:])
			}
		case json && s[i] == '\\' && i+1 < len(s) && s[i+1] == 'u':
			if r, size = jsonraw.DecodeEscape(s[i:]); size == 0 {
				size = -1 // malformed: step reports it
			}
		}
		if size <= 0 {
			break
		}
		var ci charInfo
		switch {
		case r >= 0x4E00 && r <= 0x9FFF:
			ci = hanInfo
		case r >= 0xAC00 && r <= 0xD7A3:
			ci = hangulInfo
		default:
			ci = infoOf(r)
		}
		if ci&(7|15<<3) != want {
			break
		}
		n++
		i += size
	}
	c.segLen = n
	return i
}

// decode3 decodes a valid three-byte UTF-8 sequence at the start of s, or
// returns size 0.
func decode3(s []byte) (rune, int) {
	if len(s) < 3 || s[0]&0xF0 != 0xE0 || s[1]&0xC0 != 0x80 || s[2]&0xC0 != 0x80 {
		return 0, 0
	}
	r := rune(s[0]&0x0F)<<12 | rune(s[1]&0x3F)<<6 | rune(s[2]&0x3F)
	if r < 0x800 || r >= 0xD800 && r < 0xE000 {
		return 0, 0 // overlong or a surrogate
	}
	return r, 3
}

// decodeRune is utf8.DecodeRune, with the two- and three-byte sequences
// that the alphabets and CJK text are made of decoded inline.
func decodeRune(s []byte) (rune, int) {
	if r, size := decode3(s); size > 0 {
		return r, size
	}
	if len(s) >= 2 && s[0] >= 0xC2 && s[0] < 0xE0 && s[1]&0xC0 == 0x80 {
		return rune(s[0]&0x1F)<<6 | rune(s[1]&0x3F), 2
	}
	return utf8.DecodeRune(s)
}

// latinRun continues a Latin segment with the ASCII letters at s[i:] and
// returns the offset after them.
func (c *Counter) latinRun(s []byte, i int) int {
	n, up, humps, key, lastLow := c.segLen, c.upper, c.humps, c.key, uint32(0)
	if c.lastLow {
		lastLow = 1
	}
	for ; i < len(s); i++ {
		f := asciiInfo[s[i]]
		if f&iLetter == 0 {
			break
		}
		u := uint32(f / iUpper)
		key |= packLetter(rune(s[i]), n)
		n++
		up += u
		humps += u & lastLow
		lastLow = u ^ 1
	}
	c.segLen, c.upper, c.humps, c.key, c.lastLow = n, up, humps, key, lastLow != 0
	return i
}

// char returns the ASCII character at s[i], decoding a two-byte escape in a
// JSON string, and its width; the width is 0 when there is none: a byte ≥
// 0x80, a \u escape, the end of s, or in JSON a quote or a control
// character.
func char(s []byte, i int, json bool) (byte, int) {
	if i >= len(s) {
		return 0, 0
	}
	b := s[i]
	switch {
	case b >= utf8.RuneSelf:
		return 0, 0
	case !json:
		return b, 1
	case b == '\\':
		if i+1 < len(s) {
			if e := jsonraw.Escape(s[i+1]); e != 0 {
				return e, 2
			}
		}
		return 0, 0
	case b == '"' || b < 0x20:
		return 0, 0
	}
	return b, 1
}

// ends reports whether the character at s[i] shows that a word, a digit run
// or a punctuation run before it has ended: an ASCII character or escape,
// or the end of a JSON string.
func ends(s []byte, i int, json bool) bool {
	if i >= len(s) {
		return false
	}
	switch b := s[i]; {
	case !json:
		return b < utf8.RuneSelf
	case b == '\\':
		return i+1 < len(s) && jsonraw.Escape(s[i+1]) != 0
	default:
		return b < utf8.RuneSelf && b >= 0x20 // a quote ends the text
	}
}

// plainEnd reports whether byte b, after a word, shows where it ends
// without decoding: an ASCII character that is not a backslash, or a quote
// at the end of a JSON string.
func plainEnd(b byte, json bool) bool {
	return b < utf8.RuneSelf && (!json || b >= 0x20 && b != '\\')
}

// fast reads pieces from s[i:], the replay being idle, as long as each is
// ASCII text (two-byte escapes included) and followed by a character that
// settles where it ends: the step-by-step replay's results, without its
// per-character bookkeeping. It returns the offset where step must take
// over (the replay still idle): a piece that meets a non-ASCII character
// or a \u escape (which might continue it), the end of s, or the white
// space at the end of a JSON string; or the first piece boundary at or
// after limit. It records a piece, or a white-space run with the piece its
// last character joins, only once it has read it all, so that handing over
// never splits what step would count together.
func (c *Counter) fast(s []byte, i int, json bool, limit int) int {
	for i < limit {
		if len(s)-i > 8 && s[i] == ' ' {
			// " word" of up to seven letters followed by a plain ASCII
			// character, the bulk of prose: no loop, and no call for a
			// lower-case word (latin's work, inlined).
			x := jsonraw.Word(s, i+1)
			if k, uppers, lowers := wordMasks(x); k > 0 && k < 8 && plainEnd(s[i+1+k], json) {
				e := i + 1 + k
				c.feat[FPrefixSpaceLatin]++
				if uppers != 0 {
					c.latin(uint32(k), uint32(bits.OnesCount64(uppers)), uint32(bits.OnesCount64(uppers&(lowers<<8))),
						uppers&0x80 != 0, 0, 0, e)
				} else {
					c.countLang(uint32(k), packLetters(x)&keyMask[k&7])
					c.piece(FLatinLower+k-1, 1, e)
				}
				i = e
				continue
			}
		}
		ch, w := char(s, i, json)
		if w == 0 {
			return i
		}
		next, ok := i, false
		switch asciiClass[ch] {
		case cLetter:
			next, ok = c.word(s, i, pNone, json)
		case cDigit:
			e := i + 1
			for e < len(s) && s[e]-'0' < 10 {
				e++
			}
			if ok = ends(s, e, json); ok {
				c.piece(FDigitGroups, uint32(e-i+2)/3, e)
				next = e
			}
		case cOther:
			var p asciiPunct
			if p, ok = scanPunct(s, i, false, json); ok && p.word {
				// `[^\r\n\p{L}\p{N}]?\p{L}+`: a lone symbol before letters
				next, ok = c.word(s, p.end, pPunct, json)
			} else if ok {
				c.recordPunct(p, false)
				next = p.end
			}
		default:
			if ch == ' ' && i+1 < len(s) && asciiInfo[s[i+1]]&iLetter != 0 {
				next, ok = c.word(s, i+1, pSpace, json) // " word", most of prose
			} else {
				next, ok = c.space(s, i, json)
			}
		}
		if !ok {
			return i
		}
		i = next
	}
	return i
}

// word reads and records the Latin word of ASCII letters at s[j:] (at
// least one), after a prefix of the given kind. It returns the offset after
// it, or false when the character after it does not settle where it ends.
func (c *Counter) word(s []byte, j int, prefix uint8, json bool) (int, bool) {
	end, n, up, humps, key, firstUp, ok := scanWord(s, j, json)
	if ok {
		c.recordWord(end, n, up, humps, key, firstUp, prefix)
	}
	return end, ok
}

// scanWord reads the ASCII letters at s[j:] (at least one) that end at
// end: n letters, up of them upper-case, humps lower-to-upper transitions,
// key packed (see packLetter), firstUp whether the first is upper-case. ok
// is false when the character after them does not settle where the word
// ends. A word of up to seven letters with eight bytes to read takes no
// loop: letters and capitals are found eight bytes at a time and counted.
func scanWord(s []byte, j int, json bool) (end int, n, up, humps, key uint32, firstUp, ok bool) {
	if len(s)-j >= 8 {
		x := jsonraw.Word(s, j)
		if k, uppers, lowers := wordMasks(x); k < 8 {
			end = j + k
			return end, uint32(k), uint32(bits.OnesCount64(uppers)), uint32(bits.OnesCount64(uppers & (lowers << 8))),
				packLetters(x) & keyMask[k&7], uppers&0x80 != 0, ends(s, end, json)
		}
	}
	var lastLow uint32
	end = j
	for ; end < len(s); end++ {
		f := asciiInfo[s[end]]
		if f&iLetter == 0 {
			break
		}
		u := uint32(f / iUpper)
		key |= packLetter(rune(s[end]), n)
		n++
		up += u
		humps += u & lastLow
		lastLow = u ^ 1
	}
	return end, n, up, humps, key, asciiInfo[s[j]]&iUpper != 0, ends(s, end, json)
}

// recordWord records a word read by scanWord, after its prefix.
func (c *Counter) recordWord(end int, n, up, humps, key uint32, firstUp bool, prefix uint8) {
	switch prefix {
	case pSpace:
		c.feat[FPrefixSpaceLatin]++
	case pWS:
		c.feat[FPrefixWSLatin]++
	case pPunct:
		c.feat[FPrefixPunctLatin]++
	}
	c.latin(n, up, humps, firstUp, key, 0, end)
}

const highs = 0x8080808080808080

// wordMasks finds the ASCII letters that x (eight bytes, little-endian)
// starts with: k of them (8 when all are), and among them the upper-case
// and the lower-case ones, marked by the high bit of their bytes.
func wordMasks(x uint64) (k int, uppers, lowers uint64) {
	const ones = 0x0101010101010101
	y := (x | ones*0x20) & (ones * 0x7F) // fold case; no carries below
	letters := (y + ones*(0x80-'a')) &^ (y + ones*(0x80-'z'-1)) &^ x & highs
	stop := ^letters & highs
	word := stop&-stop - 1 // the bytes before the first non-letter (all when none)
	y = x & (ones * 0x7F)
	uppers = (y + ones*(0x80-'A')) &^ (y + ones*(0x80-'Z'-1)) &^ x & word & highs
	return bits.TrailingZeros64(stop) >> 3, uppers, letters & word &^ uppers
}

// asciiPunct is a run of ASCII punctuation that ends at end: n characters,
// then newlines when newlines. word: a lone character (not after a space)
// that instead prefixes the word starting at end.
type asciiPunct struct {
	end            int
	n              uint32
	newlines, word bool
}

// scanPunct reads the punctuation run at s[first:] (at least one
// character) and its trailing newlines; space says whether a space
// precedes it. ok is false when the character after it does not settle
// where it ends.
func scanPunct(s []byte, first int, space, json bool) (p asciiPunct, ok bool) {
	j := first
	ch, w := char(s, j, json)
	for w > 0 && asciiClass[ch] == cOther {
		p.n++
		j += w
		ch, w = char(s, j, json)
	}
	p.end = j
	switch {
	case w == 0:
		return p, ends(s, j, json)
	case asciiClass[ch] == cLetter && p.n == 1 && !space:
		p.word = true
		return p, true
	case asciiClass[ch] != cNewline:
		return p, true
	}
	for w > 0 && asciiClass[ch] == cNewline {
		j += w
		ch, w = char(s, j, json)
	}
	p.end, p.newlines = j, true
	// A newline run ends at anything but a newline; a non-ASCII character
	// is never one, a \u escape might be, and the end of s might not be
	// the end of the text.
	return p, w > 0 || ends(s, j, json) || j < len(s) && s[j] >= utf8.RuneSelf
}

// recordPunct records a run read by scanPunct.
func (c *Counter) recordPunct(p asciiPunct, space bool) {
	c.punctRun(p.n, space, p.newlines, p.end)
}

// space reads a run of white space at s[i:] and records its pieces with
// the word or punctuation run its last character joins, if any (see
// step). It returns the offset after what it read, or false when a
// character it meets leaves the run's pieces unsettled.
func (c *Counter) space(s []byte, i int, json bool) (int, bool) {
	var n, nlEnd, tabs uint32
	j, last, lastPos, nlPos := i, byte(0), i, i+1
	ch, w := char(s, j, json)
	for w > 0 && asciiClass[ch] >= cNewline {
		n++
		if asciiClass[ch] == cNewline {
			nlEnd, nlPos = n, j+1
		} else if ch == '\t' {
			tabs++
		}
		last, lastPos = ch, j
		j += w
		ch, w = char(s, j, json)
	}
	if w == 0 {
		// Non-ASCII white space might continue the run, and at the end of
		// a JSON string `\s+(?!\S)` takes all of it: step decides.
		return i, false
	}
	trail := n - nlEnd
	var (
		p    asciiPunct
		join uint8 // what the last character joins: a word, a punctuation run, or nothing (pNone)
		ok   = true
		// the word it joins (see scanWord)
		end                int
		wn, up, humps, key uint32
		firstUp            bool
	)
	switch cls := asciiClass[ch]; {
	case trail == 0:
	case cls == cLetter:
		join = pWS
		if last == ' ' {
			join = pSpace
		}
		end, wn, up, humps, key, firstUp, ok = scanWord(s, j, json)
	case cls == cOther && last == ' ':
		join = pPunct
		p, ok = scanPunct(s, j, true, json)
	}
	if !ok {
		return i, false
	}
	c.feat[FTabs] += tabs
	if trail == 0 {
		c.spaceRun(nlEnd, nlPos, 0, 0)
		return j, true
	}
	c.spaceRun(nlEnd, nlPos, trail-1, lastPos)
	switch join {
	case pWS, pSpace:
		c.recordWord(end, wn, up, humps, key, firstUp, join)
		return end, true
	case pPunct:
		c.recordPunct(p, true)
		return p.end, true
	}
	c.piece(FLoneSpaces, 1, j)
	return j, true
}
