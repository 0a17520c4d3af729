package textmodel

import (
	"unicode"
	"unicode/utf8"
)

// Character classes as cl100k's pre-tokenizer regular expression sees them:
// \p{L}, \p{N}, [\r\n], the rest of \s, and everything else (punctuation,
// symbols, combining marks, controls).
const (
	cOther uint8 = iota
	cLetter
	cDigit
	cNewline
	cSpace
)

// Scripts of letters. Each has its own cost features because byte-level BPE
// vocabularies cover them very unevenly.
const (
	sLatin uint8 = iota // ASCII and accented Latin letters
	sCyrillic
	sGreek
	sArabic
	sHebrew
	sThai
	sIndic // Devanagari and the other Brahmic scripts of U+0900–U+0DFF
	sHan
	sKana
	sHangul
	sOtherLetter
	numScripts
)

// asciiClass is the class of every ASCII byte.
var asciiClass = func() (t [128]uint8) {
	for b := range t {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z':
			t[b] = cLetter
		case b >= '0' && b <= '9':
			t[b] = cDigit
		case b == '\r' || b == '\n':
			t[b] = cNewline
		case b == ' ' || b == '\t' || b == '\v' || b == '\f':
			t[b] = cSpace
		default:
			t[b] = cOther
		}
	}
	return t
}()

// asciiInfo flags ASCII letters (indexed by any byte so that lookups need no
// bounds check; bytes ≥ 0x80 have no flags).
var asciiInfo = func() (t [256]uint8) {
	for b := 'A'; b <= 'Z'; b++ {
		t[b] = iLetter | iUpper
		t[b+'a'-'A'] = iLetter
	}
	return t
}()

const (
	iLetter = 1 << iota
	iUpper
)

// Byte classes of the scanner, beyond the character classes above.
const (
	cNonASCII = cSpace + 1 + iota // a byte ≥ 0x80: a character to decode
	cEscape                       // in a JSON string: a backslash
	cQuote                        // in a JSON string: the closing quote
	cInvalid                      // in a JSON string: a raw control character
)

// plainClass and jsonClass give the class of every byte of a plain text
// and of a JSON string body.
var plainClass, jsonClass = func() (plain, json [256]uint8) {
	for b := range plain {
		switch {
		case b >= utf8.RuneSelf:
			plain[b], json[b] = cNonASCII, cNonASCII
		case b < 0x20:
			plain[b], json[b] = asciiClass[b], cInvalid
		default:
			plain[b], json[b] = asciiClass[b], asciiClass[b]
		}
	}
	json['"'], json['\\'] = cQuote, cEscape
	return plain, json
}()

// A charInfo packs what the replay needs of a character: its class (bits
// 0–2), its script (bits 3–6), upper case (bit 7) and accented Latin (bit 8).
type charInfo uint16

func pack(cls, script uint8, upper, accented bool) charInfo {
	ci := charInfo(cls) | charInfo(script)<<3
	if upper {
		ci |= 1 << 7
	}
	if accented {
		ci |= 1 << 8
	}
	return ci
}

func (ci charInfo) class() uint8   { return uint8(ci & 7) }
func (ci charInfo) script() uint8  { return uint8(ci>>3) & 15 }
func (ci charInfo) upper() bool    { return ci&(1<<7) != 0 }
func (ci charInfo) accented() bool { return ci&(1<<8) != 0 }

// Tables of classify over the blocks that text in the common scripts
// spends its characters in: the two-byte UTF-8 range U+0000–U+07FF (Latin,
// Greek, Cyrillic, Hebrew, Arabic), general punctuation, CJK symbols and
// kana, and full-width forms. Built once at start-up: about 2600 calls of
// classify; with the block reader's pages of kinds (kindPages, 2304 more),
// 0.25 ms natively.
var (
	lowInfo   = infoTable(0, 0x800)
	punctInfo = infoTable(0x2000, 0x2070)
	cjkInfo   = infoTable(0x3000, 0x3100)
	wideInfo  = infoTable(0xFF00, 0xFFF0)
)

func infoTable(lo, hi rune) []charInfo {
	t := make([]charInfo, hi-lo)
	for r := lo; r < hi; r++ {
		t[r-lo] = pack(classify(r))
	}
	return t
}

// Han ideographs and Hangul syllables, the bulk of CJK text.
var (
	hanInfo    = pack(cLetter, sHan, false, false)
	hangulInfo = pack(cLetter, sHangul, false, false)
)

// infoOf returns classify's answer for r, from a table when r is in a
// common block.
func infoOf(r rune) charInfo {
	switch {
	case uint32(r) < 0x800:
		return lowInfo[r]
	case r >= 0x4E00 && r <= 0x9FFF:
		return hanInfo
	case r >= 0xAC00 && r <= 0xD7A3:
		return hangulInfo
	case r >= 0x3000 && r < 0x3100:
		return cjkInfo[r-0x3000]
	case r >= 0x2000 && r < 0x2070:
		return punctInfo[r-0x2000]
	case r >= 0xFF00 && r < 0xFFF0:
		return wideInfo[r-0xFF00]
	}
	return pack(classify(r))
}

// classify returns the class of a rune, its script when it is a letter,
// whether it is an upper-case letter, and whether it is a Latin letter
// outside ASCII (an accented letter). It defines the classes; the scanner
// reads them from infoOf's tables.
func classify(r rune) (cls, script uint8, upper, accented bool) {
	switch {
	case r < utf8.RuneSelf:
		return asciiClass[r], sLatin, r >= 'A' && r <= 'Z', false
	case r >= 0x4E00 && r <= 0x9FFF, r >= 0x3400 && r <= 0x4DBF, r >= 0xF900 && r <= 0xFAFF, r >= 0x20000 && r <= 0x3FFFF:
		return cLetter, sHan, false, false
	case r >= 0xAC00 && r <= 0xD7A3:
		return cLetter, sHangul, false, false
	case r >= 0x3041 && r <= 0x3096, r >= 0x30A1 && r <= 0x30FA:
		return cLetter, sKana, false, false
	case r >= 0x0410 && r <= 0x044F, r == 0x0401, r == 0x0451:
		return cLetter, sCyrillic, r <= 0x042F || r == 0x0401, false
	case r >= 0x00C0 && r <= 0x024F && r != 0xD7 && r != 0xF7:
		return cLetter, sLatin, unicode.IsUpper(r), true
	}
	switch {
	case unicode.IsLetter(r):
		return cLetter, scriptOf(r), unicode.IsUpper(r), r >= 0x1E00 && r <= 0x1EFF
	case unicode.IsNumber(r):
		return cDigit, 0, false, false
	case r == 0x85 || r == 0x2028 || r == 0x2029 || unicode.IsSpace(r):
		// .NET's \s (used by tiktoken's pattern) is [\f\n\r\t\v\x85\p{Z}];
		// only \r and \n count as newlines.
		return cSpace, 0, false, false
	}
	return cOther, 0, false, false
}

// scriptOf returns the script group of a letter outside the fast ranges.
func scriptOf(r rune) uint8 {
	switch {
	case r < 0x0370:
		return sLatin
	case r < 0x0400:
		return sGreek
	case r < 0x0530:
		return sCyrillic
	case r < 0x0590:
		return sOtherLetter
	case r < 0x0600:
		return sHebrew
	case r < 0x0700:
		return sArabic
	case r >= 0x0900 && r < 0x0E00:
		return sIndic
	case r >= 0x0E00 && r < 0x0E80:
		return sThai
	case r >= 0x1100 && r < 0x1200, r >= 0x3130 && r < 0x3190:
		return sHangul
	case r >= 0x1E00 && r < 0x1F00:
		return sLatin
	case r >= 0x1F00 && r < 0x2000:
		return sGreek
	case r >= 0x3040 && r < 0x3100, r >= 0x31F0 && r < 0x3200, r >= 0xFF66 && r < 0xFFA0:
		return sKana
	case r >= 0x3000 && r < 0xA000:
		return sHan
	case r >= 0xFF21 && r < 0xFF5B:
		return sLatin
	case r >= 0xFB50 && r < 0xFF00:
		return sArabic
	}
	return sOtherLetter
}
