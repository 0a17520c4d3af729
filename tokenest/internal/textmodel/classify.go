package textmodel

import "unicode"

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

// classify returns the class of a non-ASCII rune, its script when it is a
// letter, whether it is an upper-case letter, and whether it is a Latin letter
// outside ASCII (an accented letter). The common blocks are decided by range
// so that CJK and Cyrillic text never reach the unicode tables.
func classify(r rune) (cls, script uint8, upper, accented bool) {
	switch {
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

// cjkScript returns the script of a character in the common Han, Hangul and
// kana ranges, or sOtherLetter.
func cjkScript(r rune) uint8 {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF:
		return sHan
	case r >= 0xAC00 && r <= 0xD7A3:
		return sHangul
	case r >= 0x3041 && r <= 0x3096, r >= 0x30A1 && r <= 0x30FA:
		return sKana
	}
	return sOtherLetter
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
