package textmodel

import (
	"math/bits"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// The block reader. Between pieces, where the replay is idle, blocks reads
// a text 64 bytes at a time without looking at pieces one by one: it turns
// a block into bitmaps of character classes (bit k: byte k; see
// classify) and derives the pieces' features from them with shifts, masks,
// additions and population counts. Lower-case words are counted by length,
// punctuation runs by length, digit groups, white-space runs, word
// prefixes and the letters and runs of CJK scripts for the whole block at
// once; only words with capitals, accents or of ten letters and more, the
// words of the other alphabets, punctuation runs of four characters and
// more, and the function-word lookups of two- to four-letter words take a
// loop iteration each.
//
// The bitmaps model ASCII, the two-byte escapes of a JSON string and its
// \u escapes of ASCII punctuation (asciiEscapes), the three-byte
// characters of CJK text (Han, kana and Hangul letters, CJK and general
// punctuation and wide spaces) and of Thai and the Brahmic scripts (their
// letters, and their vowel signs and viramas: combining marks, so
// punctuation) (multibyte), and the two-byte characters of
// European and Middle Eastern text: accented Latin letters, the letters of
// Cyrillic, Greek, Arabic and Hebrew, symbols, combining marks and the
// no-break space (twoBytes). Every byte of a multi-byte character carries
// its class, so that bit runs are runs of characters; counts of characters
// leave out the bytes after the first (cont), and the alphabets' words,
// counted by length, are two bytes per letter. Anything else (other
// non-ASCII characters, other \u escapes, the end of a JSON string,
// malformed input) ends the block's readable part.
//
// A block ends where the replay is certainly idle, so that no piece crosses
// from one block to the next and every block starts as a text does: after
// a letter that a non-letter follows, around a digit run (neither takes
// anything from what is around it), between punctuation and white space or
// a digit, after a newline that no white space follows; or inside a run of
// letters of a per-character script (Han, kana, Hangul, Thai, Brahmic),
// which is counted by characters and ends, not by length, and so goes on
// into the next block (see blocks). The next
// block starts there. Where no cut is left before the readable part ends,
// fast and step take over, as they would have from the start.
// TestBlocksMatchStep and FuzzBlocksMatchStep check that the features equal
// step's on any text.

// minBlock is the shortest rest of a text worth a block: shorter rests go
// to fast directly.
const minBlock = 16

// fastSpan is how far fast reads on its own after blocks stopped (at a
// stretch without cuts, such as a long punctuation or white-space run)
// before blocks try again.
const fastSpan = 64

// unmodelledSpan is how far scan reads without trying blocks after bytes
// that they do not model (see modelled): in such a script, checking at every
// piece would cost more than the odd block gains.
const unmodelledSpan = 32

// windowLen is the length of a block's window: its 64 bytes and 8 more, so
// that an 8-byte load at any of its offsets stays inside.
const windowLen = 72

// classes are the bitmaps of one block: bit k describes byte k. Every
// byte of a multi-byte character (a two- or three-byte UTF-8 character or
// a white-space escape, see classify) carries its character's class, so
// that a shift by one looks at the neighbouring character; cont marks the
// bytes that do not start a character.
type classes struct {
	// The bitmaps that classify compacts at escapes, in one run of words
	// in the order compress takes them (TestClassesLayout checks it):
	// those of every window, those of multi-byte characters, and those of
	// two-byte characters and of Thai and the Brahmic scripts.
	letter, upper, digit uint64 // ASCII letters, capitals (also the first bytes of two-byte ones), digits
	space                uint64 // ' '
	blank                uint64 // white space that is neither ' ' nor a newline (\t \v \f, U+3000…)
	tab                  uint64
	newline              uint64 // \r \n

	// in a JSON string (see classify): the characters that were
	// punctuation escapes, and the first bytes of white-space escapes
	escaped, doubled uint64
	wide             uint64 // the characters that were \u escapes (see classify)

	han, kana, hangul uint64 // letters of the per-character scripts (three bytes each)
	uni               uint64 // punctuation of two and three bytes
	cont              uint64 // bytes after the first of a character
	multi             uint64 // every letter that is not ASCII: the two-byte ones below and the per-character scripts

	// two-byte characters (see twoBytes)
	lead2                    uint64 // their first bytes
	latin2, lower2           uint64 // accented Latin letters (é, ß, Ü…), and those of them that are lower case
	cyr, greek, arab, hebrew uint64 // letters of the alphabets counted by length
	thai, indic              uint64 // letters of the other per-character scripts (Devanagari and the other Brahmic scripts of U+0900–U+0DFF)

	punct  uint64 // every other character (cOther)
	quotes uint64 // in a JSON string, the raw bytes that are quotes, escaped or not
}

// transposeBits transposes x as an 8×8 bit matrix whose rows are its
// bytes: bit j of byte i becomes bit i of byte j.
func transposeBits(x uint64) uint64 {
	y := (x ^ x>>7) & 0x00AA00AA00AA00AA
	x ^= y ^ y<<7
	y = (x ^ x>>14) & 0x0000CCCC0000CCCC
	x ^= y ^ y<<14
	y = (x ^ x>>28) & 0x00000000F0F0F0F0
	return x ^ y ^ y<<28
}

// swapBytes exchanges the bits of a selected by m<<s with those of b
// selected by m.
func swapBytes(a, b uint64, s uint, m uint64) (uint64, uint64) {
	y := (a>>s ^ b) & m
	return a ^ y<<s, b ^ y
}

// classify sets the bitmaps of the window b, all but punct, from their bit
// planes, and returns how many bytes of it the bitmaps describe: those
// before the first byte ≥ 0x80 that is not part of a multi-byte character
// of a kind the block reader models (see multibyte and twoBytes), the
// first of the avail bytes left in the text, and in a JSON string (json)
// the closing quote, a control byte or a \u or malformed escape (see the
// escapes below).
func (c *classes) classify(b []byte, avail int, json bool) int {
	// the bit planes: plane j holds bit j of every byte (bit k: byte k),
	// by two transpositions of 8×8 matrices, the bits within each word,
	// then the bytes across words (planes_test.go has it as a function;
	// a call costs wasm more than the transposition)
	var b0, b1, b2, b3, b4, b5, b6, b7 uint64
	w := b[:64]
	// The three byte stages commute; interleaving them with the bit
	// transposes keeps fewer values live at once.
	b0, b1 = swapBytes(transposeBits(jsonraw.Word(w, 0)), transposeBits(jsonraw.Word(w, 8)), 8, 0x00FF00FF00FF00FF)
	b2, b3 = swapBytes(transposeBits(jsonraw.Word(w, 16)), transposeBits(jsonraw.Word(w, 24)), 8, 0x00FF00FF00FF00FF)
	b0, b2 = swapBytes(b0, b2, 16, 0x0000FFFF0000FFFF)
	b1, b3 = swapBytes(b1, b3, 16, 0x0000FFFF0000FFFF)
	b4, b5 = swapBytes(transposeBits(jsonraw.Word(w, 32)), transposeBits(jsonraw.Word(w, 40)), 8, 0x00FF00FF00FF00FF)
	b6, b7 = swapBytes(transposeBits(jsonraw.Word(w, 48)), transposeBits(jsonraw.Word(w, 56)), 8, 0x00FF00FF00FF00FF)
	b4, b6 = swapBytes(b4, b6, 16, 0x0000FFFF0000FFFF)
	b5, b7 = swapBytes(b5, b7, 16, 0x0000FFFF0000FFFF)
	b0, b4 = swapBytes(b0, b4, 32, 0x00000000FFFFFFFF)
	b1, b5 = swapBytes(b1, b5, 32, 0x00000000FFFFFFFF)
	b2, b6 = swapBytes(b2, b6, 32, 0x00000000FFFFFFFF)
	b3, b7 = swapBytes(b3, b7, 32, 0x00000000FFFFFFFF)
	ascii := ^b7
	// letters: 0x41–0x5A and 0x61–0x7A, the low five bits in 1..26
	c.letter = ascii & b6 & (b0 | b1 | b2 | b3 | b4) & (^b4 | ^b3 | ^(b2 | b1&b0))
	c.upper = c.letter &^ b5
	low := ascii &^ b6 // 0x00–0x3F
	c.digit = low & b5 & b4 & (^b3 | ^(b2 | b1))
	ctrl := low &^ b5                             // 0x00–0x1F
	format := ctrl &^ b4 & b3                     // 0x08–0x0F
	c.newline = format & (b1&^b2&^b0 | b2&^b1&b0) // 0x0A, 0x0D
	c.blank = format & (b0&^b2 | b2&^(b1|b0))     // 0x09, 0x0B, 0x0C
	c.tab = format &^ (b2 | b1) & b0              // 0x09
	sym := low & b5 &^ b4 &^ b3 &^ b2             // 0x20–0x23
	c.space = sym &^ (b1 | b0)
	c.reset()
	var trouble uint64
	if avail < 64 {
		trouble = ^uint64(0) << avail
	}
	if b7 != 0 {
		// Three-byte characters: lead bytes 0xE0–0xEF, then two of
		// 0x80–0xBF. Han from the first two bytes: leads 0xE4–0xE9
		// (U+4000–U+9FFF) but 0xE4 0xB7 (U+4DC0–U+4DFF, symbols), and 0xE3
		// with a second byte ≥ 0x90 (U+3400–U+3FFF); Hangul from the first
		// two too (hangulLeads), kana and most Devanagari and Thai letters
		// and marks from all three (kanaLeads, brahmicLeads), each where the
		// block has (enough of) their lead bytes. Two-byte characters: lead
		// bytes 0xC0–0xDF, then one of 0x80–0xBF; Cyrillic letters
		// (U+0400–U+047F) from the lead bytes 0xD0 and 0xD1, and most Greek,
		// Arabic and Hebrew ones from both bytes (alphabets), which is
		// called only where there are lead bytes of 0xCE, 0xCF or 0xD2–0xDF.
		// Blocks of accented Latin text (lead bytes 0xC2–0xC5) test neither.
		lead := b7 & b6 & b5 &^ b4
		cont := b7 &^ b6
		var known uint64
		if lead2 := b7 & b6 &^ b5 & (cont >> 1); lead2 != 0 {
			var cyr, greek, arab, hebrew uint64
			if lead2&(b4|b3) != 0 { // 0xC8–0xDF
				cyr = lead2 & b4 &^ (b3 | b2 | b1)
				if lead2&(b4|b3&b2&b1) != cyr { // 0xCE, 0xCF, 0xD2–0xDF
					greek, arab, hebrew = alphabets(lead2, b0, b1, b2, b3, b4, b5)
				}
			}
			known = c.twoBytes((*[windowLen]byte)(b), lead2, cyr, greek, arab, hebrew)
		}
		lead &= cont >> 1 & (cont >> 2)
		b7s := (b7 &^ b6 & b5 & b4 &^ b3 & b2 & b1 & b0) >> 1 // second byte 0xB7
		e4b7 := ^b3 & b2 &^ b1 &^ b0 & b7s
		han := lead & (^b3&b2&^e4b7 | b3&^b2&^b1 | ^b3&^b2&b1&b0&((b5|b4)>>1))
		kinds := [numKinds]uint64{kindHan: han}
		if lead&b3&(b2^b1) != 0 { // leads 0xEA–0xED
			kinds[kindHangul] = hangulLeads(lead, b0, b1, b2, b3, b4, b5)
		}
		if lead != 0 {
			if other := lead &^ (han | kinds[kindHangul]); other&(other-1) != 0 {
				// kana, or else (a block seldom has both) Devanagari
				// and Thai characters
				if e3 := other &^ (b3 | b2) & b1 & b0; bits.OnesCount64(e3) > 3 {
					kinds[kindKana] = kanaLeads(e3, b0, b1, b2, b3, b4, b5) // lead bytes 0xE3 but Han
				} else if e0 := other &^ (b3 | b2 | b1 | b0); bits.OnesCount64(e0) > 3 {
					kinds[kindIndic], kinds[kindThai], kinds[kindPunct] = brahmicLeads(e0, b0, b1, b2, b3, b4, b5)
				}
			}
			known |= c.multibyte((*[windowLen]byte)(b), lead, &kinds)
		}
		trouble |= b7 &^ known
	}
	if !json {
		return bits.TrailingZeros64(trouble)
	}
	quote := sym & b1 &^ b0
	c.quotes = quote
	trouble |= ctrl | quote
	bslash := ascii & b6 &^ b5 & b4 & b3 & b2 &^ (b1 | b0) // 0x5C
	if bslash&(trouble&-trouble-1) == 0 {
		return bits.TrailingZeros64(trouble)
	}
	escaped, carry := jsonraw.EscapedBytes(bslash)
	if carry {
		trouble |= 1 << 63 // the escaped byte is in the next window
	}
	// What the escaped bytes stand for: the low five bits of lower-case
	// n (01110), r (10010), t (10100), f (00110), b (00010).
	lower := escaped & c.letter & b5 &^ b0
	newlines := lower & b1 & (^b4&b3&b2 | b4&^b3&^b2)
	blanks := lower &^ b3 & b2 & (b4&^b1 | ^b4&b1)
	tabs := blanks & b4
	slash := low & b5 &^ b4 & b3 & b2 & b1 & b0 // 0x2F
	puncts := escaped & (lower&^(b4|b3|b2)&b1 | quote | bslash | slash)
	// The escapes. Those before the window's first stop give each escaped
	// character its class, so that the bitmaps describe characters, and
	// classify returns the number of characters before the stop. trouble
	// marks the raw bytes that stop the block (bytes ≥ 0x80, control
	// bytes, quotes), escaped the bytes after escaping backslashes, and
	// newlines, blanks, tabs and puncts those of them that make an escape
	// of that class (\n \r; \t \f; \t; \" \\ \/ \b). An escaped quote does not
	// stop the block; a \u escape stops it unless it is one of ASCII
	// punctuation (\u003c, as Go's encoding/json writes '<', '>' and '&',
	// and as many encoders write control characters), whose six bytes
	// inside the window are read as that character (see asciiEscapes). A
	// malformed escape stops the block. (In line rather than a function of
	// its own: in wasm the call cost JSON text 5–10 %.)
	//
	// A white-space escape stays two bytes, both of its class: a run of
	// white space is the same run whatever its length, so only counts of
	// characters and the look back from the end of a trail must know
	// (c.doubled marks the first bytes, see blocks). A punctuation escape,
	// whose runs are counted by length, loses all its bytes but the last
	// from the bitmaps, so that bit k of them describes character k;
	// c.escaped marks the characters that were such escapes, each one raw
	// byte longer, and c.wide those of them that were \u escapes, four
	// bytes longer still (see raw).
	{
		space := newlines | blanks
		if escaped == space {
			// Only white-space escapes (most windows of prose with
			// paragraphs): nothing to compact.
			c.letter &^= escaped
			c.blank |= blanks | blanks>>1
			c.tab |= tabs | tabs>>1
			c.newline |= newlines | newlines>>1
			c.doubled = space >> 1
			return bits.TrailingZeros64(trouble &^ escaped)
		}
		var wide, wheads uint64 // the last bytes of \u escapes of ASCII punctuation, and their backslashes
		if u := escaped &^ (space | puncts); u != 0 {
			wide = asciiEscapes(b, u)
			escaped &^= wide >> 4 // their 'u's
		}
		trouble |= (escaped &^ (space | puncts)) >> 1 // other \u escapes and malformed ones
		stop := bits.TrailingZeros64(trouble &^ escaped)
		doubled := space >> 1
		heads := puncts >> 1 & (1<<stop - 1)
		tails := puncts
		letter, upper, digit := c.letter&^escaped, c.upper, c.digit
		blank, tab, newline := c.blank|blanks|blanks>>1, c.tab|tabs|tabs>>1, c.newline|newlines|newlines>>1
		space = c.space
		if wide == 0 {
			for h := heads; h != 0; {
				q := 63 - bits.LeadingZeros64(h)
				h &^= 1 << q
				keep := uint64(1)<<q - 1
				letter = letter&keep | letter>>1&^keep
				upper = upper&keep | upper>>1&^keep
				digit = digit&keep | digit>>1&^keep
				space = space&keep | space>>1&^keep
				blank = blank&keep | blank>>1&^keep
				tab = tab&keep | tab>>1&^keep
				newline = newline&keep | newline>>1&^keep
				tails = tails&keep | tails>>1&^keep
				doubled = doubled&keep | doubled>>1&^keep
			}
		} else {
			// The rare window with \u escapes: the same, with five bytes
			// dropped for each of those (from its backslash to its
			// second-last hex digit) and its last digit made punctuation.
			// (One loop for both costs the usual windows a variable shift:
			// +0.2 to +0.7 % instructions at v3, up to +1.3 % at v1.)
			wheads = wide >> 5 & (1<<stop - 1)
			letter &^= wide
			upper &^= wide
			digit &^= wide
			tails |= wide
			for h := heads | wheads; h != 0; {
				q := 63 - bits.LeadingZeros64(h)
				h &^= 1 << q
				k := 1 + 4*uint(wheads>>q&1) // bytes dropped
				keep := uint64(1)<<q - 1
				letter = letter&keep | letter>>k&^keep
				upper = upper&keep | upper>>k&^keep
				digit = digit&keep | digit>>k&^keep
				space = space&keep | space>>k&^keep
				blank = blank&keep | blank>>k&^keep
				tab = tab&keep | tab>>k&^keep
				newline = newline&keep | newline>>k&^keep
				tails = tails&keep | tails>>k&^keep
				doubled = doubled&keep | doubled>>k&^keep
				wide = wide&keep | wide>>k&^keep
			}
			heads |= wheads
			stop -= 4 * bits.OnesCount64(wheads)
		}
		c.letter, c.upper, c.digit, c.space, c.blank, c.tab, c.newline = letter, upper, digit, space, blank, tab, newline
		c.escaped, c.doubled, c.wide = tails, doubled, wide
		if c.cont != 0 {
			han, kana, hangul, uni, cont, multi := c.han, c.kana, c.hangul, c.uni, c.cont, c.multi
			for h := heads; h != 0; {
				q := 63 - bits.LeadingZeros64(h)
				h &^= 1 << q
				k := 1 + 4*uint(wheads>>q&1)
				keep := uint64(1)<<q - 1
				han = han&keep | han>>k&^keep
				kana = kana&keep | kana>>k&^keep
				hangul = hangul&keep | hangul>>k&^keep
				uni = uni&keep | uni>>k&^keep
				cont = cont&keep | cont>>k&^keep
				multi = multi&keep | multi>>k&^keep
			}
			c.han, c.kana, c.hangul, c.uni, c.cont, c.multi = han, kana, hangul, uni, cont, multi
			if c.lead2|c.thai|c.indic != 0 {
				c.compactTwo(heads, wheads)
			}
		}
		return stop - bits.OnesCount64(heads)
	}
}

// hangulLeads returns the first bytes of the Hangul syllables (U+AC00–U+D77F)
// among the three-byte characters that start at lead, from the bit planes
// b0–b5 of their bytes: lead bytes 0xEB and 0xEC, 0xEA with a second byte ≥
// 0xB0, 0xED with a second byte < 0x9E (U+D780–U+D7A3 are left to kind3).
// classify takes it where a block has a lead byte of 0xEA–0xED.
func hangulLeads(lead, b0, b1, b2, b3, b4, b5 uint64) uint64 {
	eaeb := b3 &^ b2 & b1 // 0xEA, 0xEB
	eced := b3 & b2 &^ b1 // 0xEC, 0xED
	s5, s4 := b5>>1, b4>>1
	high := ^s5 &^ (s4 & (b3 >> 1) & (b2 >> 1) & (b1 >> 1)) // second byte 0x80–0x9D
	return lead & (eaeb&(b0|s5&s4) | eced&(^b0|high))
}

// kanaLeads returns the first bytes of the kana letters among the
// three-byte characters that start at lead, from the bit planes b0–b5 of
// their bytes: the lead byte 0xE3 with a second byte of 0x81–0x83
// (U+3040–U+30FF), but for the characters there that classify does not
// make kana letters: U+3040 (0x81 0x80, unassigned), U+3097–U+309C (0x82
// 0x97–0x9C: unassigned, combining marks, their spacing forms), U+30A0
// (0x82 0xA0, a double hyphen) and U+30FB (0x83 0xBB, the katakana middle
// dot); those are looked up (kind3). classify takes it where a block has
// more than three characters of the lead byte 0xE3 that are not Han
// (Japanese text, whose kana would otherwise be looked up one by one), so
// that Chinese text, whose 0xE3 characters are a few punctuation marks, and
// Thai and Brahmic text (lead byte 0xE0) seldom pay for it.
func kanaLeads(lead, b0, b1, b2, b3, b4, b5 uint64) uint64 {
	// the second byte's low bits, then the third's
	s0, s1 := b0>>1, b1>>1
	t0, t1, t2, t3, t4, t5 := b0>>2, b1>>2, b2>>2, b3>>2, b4>>2, b5>>2
	kana := lead &^ (b3 | b2) & b1 & b0 &^ (b5>>1 | b4>>1 | b3>>1 | b2>>1) & (s1 | s0)
	lowZero := ^(t3 | t2 | t1 | t0)
	not := ^s1&s0&^(t5|t4)&lowZero | // 0x81 0x80
		s1&^s0&(^t5&t4&(^t3&t2&t1&t0|t3&^(t2&(t1|t0)))|t5&^t4&lowZero) | // 0x82 0x97–0x9C, 0x82 0xA0
		s1&s0&t5&t4&t3&^t2&t1&t0 // 0x83 0xBB
	return kana &^ not
}

// brahmicLeads returns the first bytes of the Devanagari letters (indic),
// the Thai letters (thai), and the combining marks and punctuation of both
// scripts (marks: punctuation to classify) among the three-byte characters
// that start at e0 (lead bytes 0xE0), from the bit planes b0–b5 of their
// bytes, in the ranges in which kind3 gives every character one of these
// kinds and that hold no unassigned code point (which a later Unicode
// version may make a letter); TestBrahmicLeads checks them. The others are
// looked up one by one (kind3): the digits, the unassigned code points and
// the few characters among them.
//
//   - Devanagari, second bytes 0xA4 and 0xA5: U+0900–U+097F but the digits
//     U+0966–U+096F (0xA5 0xA6–0xAF). Letters: U+0904–U+0939 (0xA4
//     0x84–0xB9), the avagraha U+093D (0xA4 0xBD), om U+0950 (0xA5 0x90),
//     U+0958–U+0961 (0xA5 0x98–0xA1) and U+0971–U+097F (0xA5 0xB1–0xBF).
//     Marks: the signs, vowel signs, nukta and virama (U+0900–U+0903,
//     U+093A–U+093C, U+093E–U+094F, U+0951–U+0957, U+0962, U+0963), the
//     dandas U+0964 and U+0965, and the abbreviation sign U+0970.
//   - Thai, second bytes 0xB8 and 0xB9: U+0E01–U+0E3A (0xB8 0x81–0xBA) and
//     U+0E40–U+0E4F (0xB9 0x80–0x8F). Letters: U+0E01–U+0E30, U+0E32,
//     U+0E33 and U+0E40–U+0E46; marks: the vowel signs U+0E31 and
//     U+0E34–U+0E3A, and U+0E47–U+0E4F (the tone marks and other signs,
//     and the fongman). Not U+0E00 and U+0E3B–U+0E3E (unassigned), the
//     baht sign U+0E3F, the digits U+0E50–U+0E59, the punctuation U+0E5A
//     and U+0E5B, nor U+0E5C–U+0E7F (unassigned).
//
// Each script's terms are computed only where e0 has its second bytes; the
// other Brahmic scripts (U+0980–U+0DFF) and Lao are looked up. classify
// takes it where a block has more than three characters of the lead byte
// 0xE0 (Hindi and Thai text, whose characters would otherwise be looked up
// one by one) and does not take kanaLeads (a block seldom has both), so
// that CJK text, which has few or none, does not pay for it.
func brahmicLeads(e0, b0, b1, b2, b3, b4, b5 uint64) (indic, thai, marks uint64) {
	// s0–s5: the planes of the second bytes, t0–t5 of the third, under
	// their lead bytes
	s0, s1, s2, s3, s4, s5 := b0>>1, b1>>1, b2>>1, b3>>1, b4>>1, b5>>1
	t0, t1, t2, t3, t4, t5 := b0>>2, b1>>2, b2>>2, b3>>2, b4>>2, b5>>2
	if d := e0 & s5 &^ (s4 | s3 | s1) & s2; d != 0 { // 0xA4, 0xA5
		// after 0xA4: marks at 0x80–0x83, 0xBA–0xBC, 0xBE, 0xBF
		a4 := ^(t5 | t4 | t3 | t2) | t5&t4&t3&(t1|t2&^t0)
		// after 0xA5: letters at 0x90, 0x98–0xA1, 0xB1–0xBF (low0: the
		// low three bits are zero), digits at 0xA6–0xAF
		low0 := ^(t2 | t1 | t0)
		a5 := t4&(t3|(t5^low0)) | t5&^(t4|t3|t2|t1)
		digits := t5 &^ t4 & (t3 | t2&t1)
		indic = d & (a5&s0 | ^(a4 | s0))
		marks = d &^ indic &^ (digits & s0)
	}
	if th := e0 & s5 & s4 & s3 &^ (s2 | s1); th != 0 { // 0xB8, 0xB9
		// after 0xB8: letters at 0x81–0xB0, 0xB2, 0xB3 (not0: not
		// 0x80), marks at 0xB1, 0xB4–0xBA
		not0 := t5 | t4 | t3 | t2 | t1 | t0
		b8 := not0&^(t5&t4) | t5&t4&^(t3|t2)&(t1|^t0)
		b8marks := not0 &^ b8 &^ (t5 & t4 & t3 & (t2 | t1&t0))
		// after 0xB9: letters at 0x80–0x86, marks at 0x87–0x8F
		b9 := ^(t5 | t4 | t3 | t2&t1&t0)
		b9marks := ^(t5 | t4) &^ b9
		thai = th & (b9&s0 | b8&^s0)
		marks |= th & (b9marks&s0 | b8marks&^s0)
	}
	return indic, thai, marks
}

// alphabets returns the first bytes of the Greek, Arabic and Hebrew letters
// among the two-byte characters that start at lead2 (lead bytes
// 0xC0–0xDF), in the ranges that the bit planes b0–b5 of their two bytes
// settle in a few terms: ranges in which every character is a letter of
// the alphabet (kind2Of; TestAlphabets checks them), and which hold nearly
// all the letters of running text. The other two-byte characters are looked
// up one by one (twoBytes): the letters outside the ranges, and the
// punctuation, combining marks and digits around and among them.
//
//   - Greek, lead bytes 0xCE and 0xCF: U+0390–U+03EF (0xCE 0x90–0xBF, 0xCF
//     0x80–0xAF) but U+03A2 (unassigned; 0xCE 0xA2): the letters with and
//     without accents, the letter variants and the Coptic letters. Not
//     U+0386–U+038F (capitals with tonos, among punctuation and unassigned
//     code points) nor U+03F0–U+03FF (letter variants, and the symbol
//     U+03F6).
//   - Arabic, lead bytes 0xD8–0xDB: U+0620–U+064A (0xD8 0xA0–0xBF, 0xD9
//     0x80–0x8A), the letters of Arabic, with the tatweel U+0640, a letter
//     too; U+0671–U+06D3 (0xD9 0xB1–0xBF, 0xDA, 0xDB 0x80–0x93), the
//     letters that Persian, Urdu and other languages add. Not U+064B–U+065F
//     (the harakat, combining marks), U+0660–U+0669 (digits),
//     U+066A–U+066D (punctuation) nor U+0670 (a combining mark).
//   - Hebrew, lead byte 0xD7: U+05D0–U+05EA (0xD7 0x90–0xAA), the letters;
//     not the points (U+0591–U+05C7, combining marks), U+05EF nor the
//     Yiddish ligatures U+05F0–U+05F2.
//
// Each alphabet's terms are computed only where the block has its lead
// bytes.
func alphabets(lead2, b0, b1, b2, b3, b4, b5 uint64) (greek, arab, hebrew uint64) {
	// s0–s5: the planes of the continuation bytes, under their lead bytes
	s0, s1, s2, s3, s4, s5 := b0>>1, b1>>1, b2>>1, b3>>1, b4>>1, b5>>1
	if g := lead2 &^ b4 & b3 & b2 & b1; g != 0 { // 0xCE, 0xCF
		ce := s4 | s5&^(s1&^(s3|s2|s0)) // after 0xCE: 0x90–0xBF but 0xA2
		cf := ^(s5 & s4)                // after 0xCF: 0x80–0xAF
		greek = g & (ce&^b0 | cf&b0)
	}
	if a := lead2 & b4 & b3 &^ b2; a != 0 { // 0xD8–0xDB
		d9 := ^(s5 | s4 | s3&(s2|s1&s0)) | s5&s4&(s3|s2|s1|s0) // after 0xD9: 0x80–0x8A, 0xB1–0xBF
		db := ^(s5 | s4&(s3|s2))                               // after 0xDB: 0x80–0x93
		d8d9 := s5&^b0 | d9&b0                                 // after 0xD8: 0xA0–0xBF
		dadb := db | ^b0                                       // after 0xDA: any
		arab = a & (d8d9&^b1 | dadb&b1)
	}
	if h := lead2 & b4 &^ b3 & b2 & b1 & b0; h != 0 { // 0xD7
		hebrew = h & (s4 ^ s5) &^ (s3 & (s2 | s1&s0) &^ s4) // 0x90–0xAA
	}
	return greek, arab, hebrew
}

// reset zeroes the bitmaps that only bytes ≥ 0x80 and escapes set.
func (c *classes) reset() {
	c.han, c.kana, c.hangul, c.uni, c.cont, c.escaped, c.doubled, c.wide, c.quotes = 0, 0, 0, 0, 0, 0, 0, 0, 0
	c.lead2, c.latin2, c.lower2, c.cyr, c.greek, c.arab, c.hebrew, c.multi, c.thai, c.indic = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
}

// Kinds of three-byte characters for the block reader: the Han ideographs
// that the bit planes do not settle, CJK and general punctuation, wide
// spaces, kana, Hangul, and the letters of Thai and of the Brahmic scripts
// (whose vowel signs and viramas are combining marks: punctuation).
const (
	kindNone uint8 = iota // anything else ends a block
	kindPunct
	kindSpace
	kindHan
	kindKana
	kindHangul
	kindThai
	kindIndic
	numKinds
)

// kindPage[r>>8] is the index in kindPages of the kinds of the characters
// r of a 256-character page: built from classify at start-up for the pages
// of the Brahmic scripts and Thai, general punctuation, CJK symbols and
// kana, and full-width forms (2304 calls; the Hangul syllables, settled by
// range in classify, are too in kind3).
var kindPage, kindPages = func() (index [256]uint8, pages [][256]uint8) {
	pages = append(pages, [256]uint8{}) // 0: none
	for _, hi := range []int{0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x20, 0x30, 0xFF} {
		var page [256]uint8
		for lo := range page {
			page[lo] = kindOf(classify(rune(hi<<8 | lo)))
		}
		index[hi] = uint8(len(pages))
		pages = append(pages, page)
	}
	return index, pages
}()

// kind3 returns the kind of the three-byte character r (U+0800–U+FFFF) for
// the block reader; TestKinds checks it against classify.
func kind3(r int) uint8 {
	if uint(r-0xAC00) <= 0xD7A3-0xAC00 {
		return kindHangul
	}
	return kindPages[kindPage[r>>8&0xFF]][r&0xFF]
}

// kindOf maps classify's answer for a three-byte character to its kind.
func kindOf(cls, script uint8, _, _ bool) uint8 {
	switch {
	case cls == cOther:
		return kindPunct
	case cls == cSpace:
		return kindSpace
	case cls != cLetter:
	case script == sHan:
		return kindHan
	case script == sKana:
		return kindKana
	case script == sThai:
		return kindThai
	case script == sIndic:
		return kindIndic
	}
	return kindNone // Hangul syllables are kind3's
}

// Kinds of two-byte characters (U+0080–U+07FF) for the block reader:
// punctuation (symbols, combining marks), white space (U+00A0, U+0085),
// accented Latin letters by case, and the letters of the alphabets that
// are counted by length. Anything else ends a block: digits, letters of
// other scripts such as Armenian or Syriac, and Latin letters that are not
// accented (µ, ª, ɐ, ʼ…), which step looks up as function words by their
// low bits as it does ASCII ones.
const (
	kind2None uint8 = iota
	kind2Punct
	kind2Space
	kind2Lower // accented Latin letters that are not upper case
	kind2Upper // and those that are
	kind2Cyrillic
	kind2Greek
	kind2Arabic
	kind2Hebrew
	numKinds2
)

// kind2Of[(lead-0xC0)<<6 | cont&0x3F] is the kind of the character of the
// lead byte lead ≥ 0xC0 and the continuation byte cont; lead bytes of other
// lengths, and the overlong 0xC0 and 0xC1, have kind2None. Built at
// start-up from classify's answers in lowInfo.
var kind2Of = func() (t [64 << 6]uint8) {
	for r := rune(0x80); r < 0x800; r++ {
		ci := lowInfo[r]
		cls, script, upper, accented := ci.class(), ci.script(), ci.upper(), ci.accented()
		k := kind2None
		switch {
		case cls == cOther:
			k = kind2Punct
		case cls == cSpace:
			k = kind2Space
		case cls != cLetter:
		case script == sLatin && accented:
			k = pick(upper, kind2Upper, kind2Lower)
		case script >= sCyrillic && script <= sHebrew:
			k = kind2Cyrillic + script - sCyrillic
		}
		t[r] = k // (lead-0xC0)<<6 | cont&0x3F is r itself
	}
	return t
}()

// multibyte sets the bitmaps of the three-byte characters of the window b,
// given the first bytes of its well-formed three-byte characters (lead)
// and, by kind, those of them whose kind classify settled (kinds): the Han
// ideographs, and, where they were looked for, the Hangul syllables, the
// kana letters, and the Devanagari and Thai letters and marks (see
// hangulLeads, kanaLeads and brahmicLeads). It looks the others up one by
// one (kind3), adding them to kinds, and returns the bytes of the
// characters it set; any other byte ≥ 0x80 that twoBytes does not set
// ends the block.
func (c *classes) multibyte(b *[windowLen]byte, lead uint64, kinds *[numKinds]uint64) uint64 {
	for x := lead &^ (kinds[kindPunct] | kinds[kindHan] | kinds[kindKana] | kinds[kindHangul] | kinds[kindThai] | kinds[kindIndic]); x != 0; x &= x - 1 {
		q := bits.TrailingZeros64(x) & 63
		kinds[kind3(int(b[q]&0x0F)<<12|int(b[q+1]&0x3F)<<6|int(b[q+2]&0x3F))&(numKinds-1)] |= 1 << q
	}
	three := func(x uint64) uint64 { return x | x<<1 | x<<2 }
	c.han, c.kana, c.hangul = three(kinds[kindHan]), three(kinds[kindKana]), three(kinds[kindHangul])
	c.uni |= three(kinds[kindPunct])
	c.blank |= three(kinds[kindSpace])
	known := lead &^ kinds[kindNone]
	c.cont |= known<<1 | known<<2
	c.multi |= c.han | c.kana | c.hangul
	if kinds[kindThai]|kinds[kindIndic] != 0 {
		c.thai, c.indic = three(kinds[kindThai]), three(kinds[kindIndic])
		c.multi |= c.thai | c.indic
	}
	return three(known)
}

// twoBytes sets the bitmaps of the two-byte characters of the window b,
// given the bytes of 0xC0–0xFF followed by a continuation byte (lead2) and
// the first bytes of those that start letters of the alphabets by the bit
// planes (cyr, greek, arab, hebrew, may be zero; see classify), and
// returns their bytes. The others are looked up one by one (kind2Of).
func (c *classes) twoBytes(b *[windowLen]byte, lead2, cyr, greek, arab, hebrew uint64) uint64 {
	two := func(x uint64) uint64 { return x | x<<1 }
	if x := lead2 &^ (cyr | greek | arab | hebrew); x != 0 {
		var kinds [16]uint64
		for ; x != 0; x &= x - 1 {
			q := bits.TrailingZeros64(x) & 63
			kinds[kind2Of[(int(b[q])-0xC0)<<6&0xFC0|int(b[q+1]&0x3F)]&15] |= 1 << q
		}
		upper, lower := kinds[kind2Upper], kinds[kind2Lower]
		c.latin2, c.lower2 = two(upper|lower), two(lower)
		c.upper |= upper
		c.multi |= c.latin2
		c.uni |= two(kinds[kind2Punct])
		c.blank |= two(kinds[kind2Space])
		cyr, greek, arab, hebrew = cyr|kinds[kind2Cyrillic], greek|kinds[kind2Greek], arab|kinds[kind2Arabic], hebrew|kinds[kind2Hebrew]
		lead2 &^= kinds[kind2None]
	}
	c.cyr, c.greek, c.arab, c.hebrew = two(cyr), two(greek), two(arab), two(hebrew)
	c.lead2 = lead2
	c.cont |= lead2 << 1
	c.multi |= c.cyr | c.greek | c.arab | c.hebrew
	return two(lead2)
}

// compactTwo drops the bytes of escapes from the bitmaps of two-byte
// characters, and of Thai and Brahmic letters, as classify does from the
// others: one byte before each bit of heads, five before those of wheads.
// (Its loop repeats classify's for other bitmaps, so that each loop keeps
// its bitmaps in registers.)
func (c *classes) compactTwo(heads, wheads uint64) {
	lead2, latin2, lower2 := c.lead2, c.latin2, c.lower2
	cyr, greek, arab, hebrew := c.cyr, c.greek, c.arab, c.hebrew
	thai, indic := c.thai, c.indic
	for h := heads; h != 0; {
		q := 63 - bits.LeadingZeros64(h)
		h &^= 1 << q
		k := 1 + 4*uint(wheads>>q&1)
		keep := uint64(1)<<q - 1
		lead2 = lead2&keep | lead2>>k&^keep
		latin2 = latin2&keep | latin2>>k&^keep
		lower2 = lower2&keep | lower2>>k&^keep
		cyr = cyr&keep | cyr>>k&^keep
		greek = greek&keep | greek>>k&^keep
		arab = arab&keep | arab>>k&^keep
		hebrew = hebrew&keep | hebrew>>k&^keep
		thai = thai&keep | thai>>k&^keep
		indic = indic&keep | indic>>k&^keep
	}
	c.thai, c.indic = thai, indic
	c.lead2, c.latin2, c.lower2 = lead2, latin2, lower2
	c.cyr, c.greek, c.arab, c.hebrew = cyr, greek, arab, hebrew
}

// asciiEscapes returns the last bytes of the \u escapes of ASCII
// punctuation (\u0000–\u007f of class cOther) in the window b, given the
// bytes after a backslash that make no two-byte escape (u): those before
// any other such escape, whose six bytes lie within the window's 64 (the
// block stops at the first other one, so those after it do not matter).
// It reads the two digits by table rather than with jsonraw.DecodeEscape,
// whose full decoding cost code prompts 1.5 % more instructions.
func asciiEscapes(b []byte, u uint64) uint64 {
	b = b[:windowLen]
	var wide uint64
	for x := u; x != 0; x &= x - 1 {
		p := bits.TrailingZeros64(x) & 63
		w := jsonraw.Word(b, p) // u, 0, 0, then two hex digits
		if p >= 60 || uint32(w)&0xFFFFFF != 'u'|'0'<<8|'0'<<16 || !punctEscape[hexHigh[byte(w>>24)]|hexLow[byte(w>>32)]] {
			break
		}
		wide |= 1 << (p + 4)
	}
	return wide
}

// hexHigh and hexLow map the two last hex digits of a \u00XX escape to
// their value in the high and the low nibble, with bit 7 set for a byte
// that is not one (or, in the high nibble, not a digit of ASCII);
// punctEscape tells the values below 0x80 of ASCII punctuation.
var hexHigh, hexLow, punctEscape = func() (hi, lo [256]uint8, punct [256]bool) {
	for b := range 256 {
		hi[b], lo[b] = 0x80, 0x80
	}
	for d, ch := range []byte("0123456789abcdef") {
		lo[ch] = uint8(d)
		if d < 8 {
			hi[ch] = uint8(d) << 4
		}
	}
	for d, ch := range []byte("ABCDEF") {
		lo[ch] = uint8(10 + d)
	}
	for v := range 0x80 {
		punct[v] = asciiClass[v] == cOther
	}
	return hi, lo, punct
}()

// raw returns the offset in the raw bytes of character k of a block.
func (c *classes) raw(k int) int {
	below := uint64(1)<<k - 1
	return k + bits.OnesCount64(c.escaped&below) + 4*bits.OnesCount64(c.wide&below)
}

// blocks reads s[i:] block by block, the replay being idle (scan has
// checked that the text is modelled there), and returns the offset where it
// stopped and the offset before which trying again is pointless. It stops
// where a block has no cut before its first byte that the bitmaps do not
// model (returning that byte's offset), where fewer than minBlock bytes are
// left, or at the closing quote of a JSON string when the last block read
// the text to its end. A block may also end between two letters of a
// per-character script (Han, kana, Hangul, Thai, Brahmic), whose runs are
// counted by characters and ends, not by length: the run then goes on into
// the next block, or into step if blocks stop there (see resume).
func (c *Counter) blocks(s []byte, i int, json bool) (stop, retry int) {
	var (
		cl    classes
		carry uint8 // the script of a run going on from the last block, or 0
	)
	for {
		avail := len(s) - i
		if avail < minBlock {
			c.resume(carry)
			return i, len(s)
		}
		b := s[i:]
		if avail < windowLen {
			// the last bytes of the text, in a window of zeros (which
			// the bitmaps do not read as characters)
			var tail [windowLen]byte
			copy(tail[:], b)
			b = tail[:]
		}
		b = b[:windowLen]
		n := cl.classify(b, avail, json)
		valid := uint64(1)<<n - 1
		letters := cl.letter | cl.multi
		cl.punct = valid &^ (letters | cl.digit | cl.space | cl.blank | cl.newline)
		// Where the replay is idle: after a letter but before another,
		// around a digit run, between punctuation and white space or a
		// digit, after a newline but before more white space.
		digit, ws := cl.digit, cl.space|cl.blank|cl.newline
		var within uint64
		if cl.cont != 0 { // multi-byte characters: maybe letters of per-character scripts
			within = cl.han&(cl.han<<1) | cl.kana&(cl.kana<<1) | cl.hangul&(cl.hangul<<1)
			if cl.thai|cl.indic != 0 {
				within |= cl.thai&(cl.thai<<1) | cl.indic&(cl.indic<<1)
			}
			within &^= cl.cont
		}
		cuts := (letters<<1&^letters | (digit ^ digit<<1) | cl.punct<<1&(ws&^cl.newline|digit) |
			cl.newline<<1&^ws | within) & valid &^ 1
		// The closing quote of a JSON string (the one raw quote a window
		// can stop at) ends the text, and with it the piece in progress,
		// as a cut does, unless that is a trail of blanks (which at the
		// end is one piece, not a run that gives its last character to
		// what follows): the block may then count the text to its end.
		var end uint64
		if cl.quotes != 0 && n < 64 && b[cl.raw(n)&63] == '"' {
			end = 1 << n &^ ((cl.space | cl.blank) << 1) &^ 1
			cuts |= end
		}
		if cuts == 0 {
			c.resume(carry)
			return i, i + cl.raw(n)
		}
		cut := 63 - bits.LeadingZeros64(cuts)
		// Count the pieces of characters [0, cut): they are classified,
		// and the replay is idle at 0, or inside a run of the
		// per-character script carry, and at cut, or inside a run of a
		// per-character script. The counting is in line, by kind of
		// piece in scopes of their own: Latin words of ASCII letters
		// and the function words among them, punctuation runs, white
		// space and digit runs. In wasm a call costs more than most of
		// what a part does (the arguments and results go through
		// memory, and every value live across it is stored and loaded
		// again: a call for each part cost 15 % of the block reader's
		// time), so only letters beyond ASCII, which blocks of English
		// or code have none of, take calls: accented Latin words
		// (accentedWords) and the other scripts (nonLatinWords).
		{
			f := &c.feat
			in := uint64(1)<<cut - 1 // the characters whose pieces are counted
			// `[^\r\n\p{L}\p{N}]?\p{L}+`: a punctuation character that is a run
			// of its own, not after a space, starts the word after it. joins
			// marks the last bytes of such characters.
			var joins uint64
			{
				punct, lead := cl.punct, cl.uni&^cl.cont
				starts := punct &^ (punct << 1) &^ (cl.space << 1)
				ends := punct &^ (punct >> 1)
				letters := cl.letter | cl.multi
				joins = ends & (starts | (starts&lead&^cl.lead2)<<2 | (starts&cl.lead2)<<1) & (letters >> 1) & in
			}
			letter := cl.letter // the letters of the words below
			if cl.multi != 0 {
				if cl.latin2 != 0 {
					// words of accented letters, which the words below are
					// not to see
					letter &^= c.accentedWords(&cl, in, joins)
				}
				if cl.multi&^cl.latin2 != 0 {
					c.nonLatinWords(&cl, in, joins, carry)
				}
			}

			// Latin words of ASCII letters; joins marks the punctuation
			// characters that start a word.
			{
				upper := cl.upper
				// Prefixes and camel-case humps (only mixed-case words have any)
				// for the whole block.
				starts := letter &^ (letter << 1) & in
				ends := letter &^ (letter >> 1) & in
				f[FPrefixSpaceLatin] += pop(starts & (cl.space << 1))
				f[FPrefixWSLatin] += pop(starts & (cl.blank << 1))
				f[FPrefixPunctLatin] += pop(starts & (joins &^ cl.uni << 1))
				f[FPrefixUniLatin] += pop(starts & (joins & cl.uni << 1))
				lower := letter &^ upper
				f[FLatinHumps] += pop(upper & (lower << 1) & in)

				// Lower-case words, most of prose, by length for the whole block:
				// run marks the lower-case letters that a word starts with, so a
				// word end in it ends a lower-case word; ek marks those of at
				// least k letters (the k-1 characters before the end are in run
				// too, so in its word).
				run := ((lower + starts&lower) ^ lower) & lower
				e1 := ends & run
				e2 := e1 & (run << 1)
				e3 := e2 & (run << 2)
				e4 := e3 & (run << 3)
				e5 := e4 & (run << 4)
				f[FLatinLower] += pop(e1 &^ e2)
				f[FLatinLower+1] += pop(e2 &^ e3)
				f[FLatinLower+2] += pop(e3 &^ e4)
				f[FLatinLower+3] += pop(e4 &^ e5)

				// Function words: the lower-case words of two to four letters,
				// which end at the bits of short, looked up in the function-word
				// table, packed from the raw bytes b. Their first letters are the
				// word starts one or two characters before their ends, or three
				// before the ends of four-letter words (a start three before a
				// shorter word's end is a one-letter word's); in the raw bytes
				// they are one byte further for each escaped character of cl
				// before them, and four more for each that was a \u escape
				// (wide).
				short := e2 &^ e5
				first := starts & (short>>1 | short>>2 | short&e4>>3)
				switch escaped, wide := cl.escaped, cl.wide; {
				case escaped == 0:
				case wide == 0:
					for x := escaped; x != 0; {
						j := 63 - bits.LeadingZeros64(x)
						x &^= 1 << j
						keep := uint64(2)<<j - 1
						first = first&keep | first&^keep<<1
					}
				default:
					for x := escaped; x != 0; { // \u escapes: four bytes more
						j := 63 - bits.LeadingZeros64(x)
						x &^= 1 << j
						keep := uint64(2)<<j - 1
						first = first&keep | first&^keep<<(1+4*(wide>>j&1))
					}
				}
				var counts uint32 // see langCount: at most 21 words of each kind in a block
				for ; short != 0; short &= short - 1 {
					end := bits.TrailingZeros64(short) & 63
					n := 2 + int(e3>>end&1) + int(e4>>end&1)
					counts += langCount(packLetters(jsonraw.Word(b, bits.TrailingZeros64(first)&63)) & keyMask[n&7])
					first &= first - 1
				}
				c.english += counts & 0xFFFF
				c.other += counts >> 16

				e6 := e5 & (run << 5)
				e7 := e6 & (run << 6)
				e8 := e7 & (run << 7)
				e9 := e8 & (run << 8)
				e := e9 & (run << 9) // ten letters or more: counted one at a time below
				f[FLatinLower+4] += pop(e5 &^ e6)
				f[FLatinLower+5] += pop(e6 &^ e7)
				f[FLatinLower+6] += pop(e7 &^ e8)
				f[FLatinLower+7] += pop(e8 &^ e9)
				f[FLatinLower+8] += pop(e9 &^ e)
				// Longer words, and words with capitals (Title, UPPER, mixed), one
				// at a time.
				for rest := e | ends&^e1; rest != 0; rest &= rest - 1 {
					end := bits.TrailingZeros64(rest) & 63
					s := 63 - bits.LeadingZeros64(starts&(2<<end-1))
					n := uint32(end - s + 1)
					shape := FLatinLower
					if e>>end&1 == 0 {
						up := pop(upper & (2<<end - 1<<s))
						shape = FLatinMixed
						if up == n {
							shape = FLatinUpper
						}
						if up == 1 && upper>>s&1 != 0 {
							shape = FLatinTitle
						}
					}
					if n > latinLens {
						f[FLatinLongChars] += n - latinLens
						n = latinLens
					}
					f[shape+int(n)-1]++
				}
			}

			// Punctuation runs (` ?[^\s\p{L}\p{N}]+[\r\n]*`) by length in
			// characters; joins marks the one-character runs that start a word
			// instead. Runs of ASCII characters are counted as lower-case words
			// are: pk marks the ends of runs of at least k. Runs of one multi-byte
			// character are counted for the block too, longer runs with one one
			// at a time.
			{
				p, uni := cl.punct&in, cl.uni&in
				starts := p &^ (p << 1)
				ends := p &^ (p >> 1)
				f[FPunctSpace] += pop(starts & (cl.space << 1))
				f[FPunctNewline] += pop(cl.newline & (p << 1))
				if uni != 0 {
					// characters of three bytes, and of two (their first bytes: lead2)
					single := ends & (starts | (starts&uni)<<2)
					if lead2 := cl.lead2; lead2 == 0 {
						f[FPunctU3] += pop(uni&^cl.cont) - pop(joins&uni)
					} else {
						last2 := lead2 << 1
						f[FPunctU2] += pop(uni&lead2) - pop(joins&uni&last2)
						f[FPunctU3] += pop(uni&^cl.cont&^lead2) - pop(joins&uni&^last2)
						single = ends & (starts | (starts&uni&^lead2)<<2 | (starts&lead2)<<1)
					}
					f[FPunct] += pop(single) - pop(joins)
					for rest := ends &^ single; rest != 0; rest &= rest - 1 {
						end := bits.TrailingZeros64(rest) & 63
						s := 63 - bits.LeadingZeros64(starts&(2<<end-1))
						c.punctLength(pop(p &^ cl.cont & (2<<end - 1<<s)))
					}
				} else {
					p2 := ends & (p << 1)
					p3 := p2 & (p << 2)
					p4 := p3 & (p << 3)
					f[FPunct] += pop(ends&^p2) - pop(joins)
					f[FPunct+1] += pop(p2 &^ p3)
					f[FPunct+2] += pop(p3 &^ p4)
					for rest := p4; rest != 0; rest &= rest - 1 {
						end := bits.TrailingZeros64(rest) & 63
						c.punctLength(uint32(end - (63 - bits.LeadingZeros64(starts&(2<<end-1))) + 1))
					}
				}
			}

			// White space. The newlines right after a punctuation run belong to
			// it; the other white-space characters form runs, each cut into
			// `\s*[\r\n]+` up to its last newline and the blanks after it (its
			// trail), whose last character goes with what follows the run. Counts
			// of characters leave out the bytes after the first of a multi-byte
			// one, and the character before the last of a trail ends one, two or
			// three bytes before it.
			{
				newline, punct, space := cl.newline, cl.punct, cl.space
				letters := cl.letter | cl.multi
				if newline|cl.blank|cl.doubled == 0 {
					// Only ' ' (most blocks of prose): every run is a trail, of
					// one byte per character, and none takes a newline.
					ends := space &^ (space >> 1) & in
					long := pop(ends & (space << 1))
					f[FSpaceRuns] += long
					f[FSpaceRunExtra] += pop(space&in) - long - pop(ends)
					f[FLoneSpaces] += pop(ends &^ (letters>>1 | space&(punct>>1)))
				} else {
					extra := cl.doubled | cl.cont // bytes that start no character
					absorbed := ((newline + newline&(punct<<1)) ^ newline) & newline
					nl := newline &^ absorbed
					bl := space | cl.blank
					ws := bl | nl
					trailEnds := bl &^ (ws >> 1) & in // last bytes of trails
					nTrails := pop(trailEnds)
					two := (cl.doubled | cl.lead2) << 1                                     // last bytes of two-byte characters
					three := bl & cl.cont &^ (cl.cont >> 1) &^ two                          // and of three-byte ones
					long := pop(trailEnds & (bl<<1&^(two|three) | bl<<2&two | bl<<3&three)) // trails of two or more
					// Blanks followed by a newline of their run (rare): walk
					// back to the start of their segment.
					var preBlanks, preRuns uint32
					for pre := bl & (nl >> 1) & in; pre != 0; pre &= pre - 1 {
						m := bits.TrailingZeros64(pre)
						a := bits.Len64(^bl & (1<<m - 1))
						preBlanks += uint32(m-a+1) - pop(extra&(2<<m-1)>>a<<a)
						if a == 0 || ws>>(a-1)&1 == 0 {
							preRuns++ // the segment starts its run
						}
					}
					runs := pop(ws &^ (ws << 1) & in)
					blankRuns := pop(bl&^(ws<<1)&in) - preRuns // runs without a newline
					nlRuns := runs - blankRuns
					f[FNewlineRuns] += nlRuns
					f[FNewlineRunExtra] += pop(nl&^extra&in) + preBlanks - nlRuns
					f[FSpaceRuns] += long
					f[FSpaceRunExtra] += pop(bl&^extra&in) - preBlanks - long - nTrails
					f[FLoneSpaces] += pop(trailEnds &^ (letters>>1 | space&(punct>>1)))
					f[FTabs] += pop(cl.tab &^ extra & in)
				}
			}

			// Digit runs: ⌈n/3⌉ groups each, the group starts found three
			// digits at a time: those of runs of up to nine digits without a
			// loop, whose trip count would follow the lengths of numbers (JSON
			// has many), the rest in one.
			digit := cl.digit
			if groups := digit &^ (digit << 1) & in; groups != 0 {
				three := digit & (digit << 1) & (digit << 2)
				second := groups << 3 & three
				third := second << 3 & three
				n := pop(groups) + pop(second) + pop(third)
				for more := third << 3 & three; more != 0; more = more << 3 & three {
					n += pop(more)
				}
				f[FDigitGroups] += n
			}
		}
		carry = 0
		if within>>cut&1 != 0 {
			carry = runScript(&cl, cut)
		}
		next := i + cl.raw(cut)
		if end != 0 {
			return next, next + 1 // at the closing quote
		}
		// A byte that the bitmaps do not model (stop, in the raw bytes)
		// stops the next block too, and a cut depends only on the two
		// characters around it: that block would find none between this
		// one's last cut and that byte. Not so when the stop may be an
		// artefact of the window's end (in its last two bytes: a
		// multi-byte character or an escape that goes on past it; in
		// its last six, the backslash of a \u escape).
		if stop := cl.raw(n); stop < 62 && (stop < 58 || b[stop] != '\\') {
			c.resume(carry)
			return next, i + stop
		}
		i = next
	}
}

// runScript returns the per-character script of the letter at character
// k of a block.
func runScript(cl *classes, k int) uint8 {
	switch {
	case cl.han>>k&1 != 0:
		return sHan
	case cl.kana>>k&1 != 0:
		return sKana
	case cl.hangul>>k&1 != 0:
		return sHangul
	case cl.thai>>k&1 != 0:
		return sThai
	}
	return sIndic
}

// resume hands a run of a per-character script that the blocks left open
// (script, 0 for none) to step: a word segment whose characters so far are
// counted already.
func (c *Counter) resume(script uint8) {
	if script != 0 {
		c.mode, c.script, c.segLen = mWord, script, 0
	}
}

// modelled reports whether the eight bytes x (little-endian) at the start
// of a block are worth a block: they hold no first byte of a four-byte
// UTF-8 character, nor of a three-byte one of U+1000–U+1FFF (lead 0xE1:
// Myanmar, Georgian, Ethiopic, Khmer, …), which the bitmaps do not model.
// Text in such a script goes to fast and step without trying blocks.
func modelled(x uint64) bool {
	const ones = 0x0101010101010101
	t := x ^ ones*0xE1 // zero in the bytes 0xE1
	e1 := ^((t&(ones*0x7F) + ones*0x7F) | t) & highs
	return (x&(x<<1)&(x<<2)&(x<<3)|e1)&highs == 0
}

// accentedWords counts the Latin words of a block (see blocks) that hold
// accented letters (two bytes each: latin2), one at a time, as blocks counts
// the others, and returns their bytes, which the ASCII words are then not to see. No
// function word has an accent.
func (c *Counter) accentedWords(cl *classes, in, joins uint64) uint64 {
	f := &c.feat
	letter, upper := cl.letter|cl.latin2, cl.upper
	starts := letter &^ (letter << 1) & in
	ends := letter &^ (letter >> 1) & in
	lower := cl.letter&^upper | cl.lower2
	cont := cl.latin2 & cl.cont
	var seen uint64
	for x := cl.latin2 & cl.lead2 & in; x != 0; {
		q := bits.TrailingZeros64(x) & 63
		s := 63 - bits.LeadingZeros64(starts&(2<<q-1))
		end := bits.TrailingZeros64(ends>>q) + q
		word := uint64(2)<<end - uint64(1)<<s
		x &^= word
		seen |= word
		f[FLatinAccents] += pop(cl.latin2 & cl.lead2 & word)
		n := uint32(end-s+1) - pop(cont&word)
		up := pop(upper & word)
		shape := FLatinMixed
		switch {
		case up == 0:
			shape = FLatinLower
		case up == 1 && upper>>s&1 != 0:
			shape = FLatinTitle
		case up == n:
			shape = FLatinUpper
		default:
			f[FLatinHumps] += pop(upper & (lower << 1) & word)
		}
		if n > latinLens {
			f[FLatinLongChars] += n - latinLens
			n = latinLens
		}
		f[shape+int(n)-1]++
	}
	first := starts & seen
	f[FPrefixSpaceLatin] += pop(first & (cl.space << 1))
	f[FPrefixWSLatin] += pop(first & (cl.blank << 1))
	f[FPrefixPunctLatin] += pop(first & (joins &^ cl.uni << 1))
	f[FPrefixUniLatin] += pop(first & (joins & cl.uni << 1))
	return seen
}

// nonLatinWords counts the letters of scripts other than Latin of a block
// (see blocks): characters and runs of the per-character scripts (Han,
// kana, Hangul, Thai, Brahmic), words of the alphabets by length, the
// script changes inside letter runs, and the prefixes of letter runs that
// start with one of them; joins marks the punctuation characters that
// start a word, carry the script of a run going on from the last block.
func (c *Counter) nonLatinWords(cl *classes, in, joins uint64, carry uint8) {
	f := &c.feat
	latin := cl.letter | cl.latin2
	letters := cl.letter | cl.multi
	// The bitmaps of the characters before: a run that goes on from the
	// last block is a letter of its script before bit 0.
	var carried uint64
	if carry != 0 {
		carried = 1
	}
	prev := letters<<1 | carried
	switches := latin &^ (latin << 1) & prev // Latin after another script
	if cl.han != 0 {
		switches |= c.scriptRuns(cl.han, cl.cont, in, prev, carried, carry == sHan, FHanChars)
	}
	if cl.kana != 0 {
		switches |= c.scriptRuns(cl.kana, cl.cont, in, prev, carried, carry == sKana, FKanaChars)
	}
	if cl.hangul != 0 {
		switches |= c.scriptRuns(cl.hangul, cl.cont, in, prev, carried, carry == sHangul, FHangulChars)
	}
	if cl.thai|cl.indic != 0 {
		switches |= c.scriptRuns(cl.thai, cl.cont, in, prev, carried, carry == sThai, FThaiChars)
		switches |= c.scriptRuns(cl.indic, cl.cont, in, prev, carried, carry == sIndic, FIndicChars)
	}
	if cl.lead2 != 0 {
		if cl.cyr != 0 {
			switches |= c.alphabetWords(cl.cyr, in, prev, FCyrillic)
		}
		if cl.greek|cl.arab|cl.hebrew != 0 {
			switches |= c.alphabetWords(cl.greek, in, prev, FGreek)
			switches |= c.alphabetWords(cl.arab, in, prev, FArabic)
			switches |= c.alphabetWords(cl.hebrew, in, prev, FHebrew)
		}
	}
	f[FScriptSwitches] += pop(switches & in)
	first := (letters &^ latin) &^ prev & in // words whose first segment is one of them
	f[FPrefixSpaceOther] += pop(first & (cl.space << 1))
	f[FPrefixWSOther] += pop(first & (cl.blank << 1))
	f[FPrefixPunctOther] += pop(first & (joins &^ cl.uni << 1))
	f[FPrefixUniOther] += pop(first & (joins & cl.uni << 1))
}

// alphabetWords counts the words (segments of letter runs) of one alphabet
// of a block, whose letters (two bytes each) are m, by length into the
// features from base on, and returns the letters of m that change script
// inside a letter run (see nonLatinWords). No such word crosses a block's ends:
// a run of letters counted by length is never cut.
func (c *Counter) alphabetWords(m, in, prev uint64, base int) uint64 {
	starts := m &^ (m << 1)
	for ends := m &^ (m >> 1) & in; ends != 0; ends &= ends - 1 {
		end := bits.TrailingZeros64(ends) & 63
		n := uint32(end-(63-bits.LeadingZeros64(starts&(2<<end-1)))+1) / 2
		if n > alphaLens {
			c.feat[FAlphaLongChars] += n - alphaLens
			n = alphaLens
		}
		c.feat[base+int(n)-1]++
	}
	return starts & prev
}

// scriptRuns counts the characters and the runs of one per-character
// script of a block (see nonLatinWords), whose letters are m, into the features
// chars and chars+1, and returns the letters of m that change script inside
// a letter run; carries tells whether the run going on from the last block
// (carried, bit -1) is of this script.
func (c *Counter) scriptRuns(m, cont, in, prev, carried uint64, carries bool, chars int) uint64 {
	same := m << 1
	if carries {
		same |= carried
	}
	c.feat[chars] += pop(m &^ cont & in)
	c.feat[chars+1] += pop(m &^ (m >> 1) & in) // runs
	return m &^ same & (prev &^ same)
}

// punctLength counts a punctuation run of n characters by its length.
func (c *Counter) punctLength(n uint32) {
	if n > punctLens {
		c.feat[FPunctLongChars] += n - punctLens
		n = punctLens
	}
	c.feat[FPunct+int(n)-1]++
}

func pop(x uint64) uint32 { return uint32(bits.OnesCount64(x)) }
