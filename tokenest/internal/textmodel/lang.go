package textmodel

// Englishness. cl100k's vocabulary holds most English words whole but splits
// German, French or Spanish words of the same length into two or three
// pieces, so Latin words get an English weight and an "other language"
// weight, mixed per text by the share of English among the short function
// words the text uses. Only lower-case ASCII words of 2–4 letters are looked
// up: they are packed into an integer while scanning (the low five bits of
// each letter in a byte of their own, the first letter lowest, see
// packLetter), so the check costs one table probe per short word and
// nothing else, and the block reader packs a word with one AND.

// Function words that mark English, or another Latin-script language
// (German, French, Spanish, Italian, Portuguese, Dutch). Words common to
// both sides ("in", "an", "so", "do", "as") are left out.
var (
	englishWords = []string{"the", "of", "and", "to", "is", "that", "for", "it", "with", "on", "be",
		"are", "this", "by", "or", "not", "from", "at", "was", "have", "has", "you", "can", "will",
		"if", "but", "we", "they", "its", "all", "more", "when", "what", "then", "than", "into",
		"only", "such", "each", "may", "must", "any", "some", "been", "were", "does", "how", "your",
		"our", "who", "them", "out", "also", "just", "like", "most", "over"}
	otherWords = []string{"der", "die", "und", "den", "von", "zu", "das", "mit", "sich", "des", "auf",
		"ist", "im", "dem", "ein", "eine", "als", "auch", "oder", "wird", "bei", "nur", "wenn", "kann",
		"zum", "zur", "sind", "noch", "wie", "aus", "nach", "hat", "dass", "le", "la", "les", "de",
		"du", "et", "un", "une", "est", "pour", "dans", "par", "sur", "que", "qui", "pas", "au", "aux",
		"ce", "ces", "se", "avec", "el", "los", "las", "del", "en", "por", "con", "para", "una", "es",
		"al", "lo", "su", "sus", "como", "il", "di", "che", "per", "non", "gli", "sono", "os", "da",
		"em", "um", "uma", "com", "ao", "het", "een", "van", "dat", "op", "te", "voor", "niet", "met"}
)

const (
	langEnglish = 1
	langOther   = 2
)

// langTable maps a packed word's slot (see langSlot) to the word, in the
// high 32 bits, and what it adds to a count of function words (see
// langCount), in the low: a perfect hash of the listed words, so that a
// lookup is one load and one comparison (TestLangTable checks that no two
// words share a slot).
var langTable = func() (t [1 << langBits]uint64) {
	for lang, words := range [...][]string{langEnglish: englishWords, langOther: otherWords} {
		for _, w := range words {
			k := packWord(w)
			inc := uint64(1) // English
			if lang == langOther {
				inc = 1 << 16
			}
			t[langSlot(k)] = uint64(k)<<32 | inc
		}
	}
	return t
}()

// langBits and langMul make langSlot a perfect hash of the listed words
// (found by trying multipliers; change them if the lists change and
// TestLangTable fails).
const (
	langBits = 10
	langMul  = 0xea9d31bb
)

func langSlot(k uint32) uint32 { return k * langMul >> (32 - langBits) }

func packWord(w string) uint32 {
	var k uint32
	for i := 0; i < len(w); i++ {
		k |= packLetter(rune(w[i]), uint32(i))
	}
	return k
}

// packLetter returns the bits that letter r adds to a word's key as its
// i-th letter: its low 5 bits (which fold ASCII case) in byte i. Letters
// from the fifth on fall off the top, which is harmless: only words of up
// to 4 letters are looked up.
func packLetter(r rune, i uint32) uint32 { return uint32(r&31) << (8 * i) }

// packLetters packs the first letters of x (ASCII, little-endian, one a
// byte) as packLetter does, up to four.
func packLetters(x uint64) uint32 { return uint32(x) & 0x1F1F1F1F }

// keyMask keeps the first n ≤ 4 letters of a packed key.
var keyMask = [8]uint32{1: 1<<8 - 1, 2: 1<<16 - 1, 3: 1<<24 - 1, 4: 1<<32 - 1}

// langCount returns what the packed lower-case word k of 2–4 letters
// adds to a count of function words that holds English ones in its low 16
// bits and other languages' in the next 16: 1, 1<<16, or 0 when it is not
// a listed function word. It has no branch: half the short words of a
// prose text are function words, a coin toss for a branch predictor.
func langCount(k uint32) uint32 {
	e := langTable[langSlot(k)]
	var inc uint32
	if uint32(e>>32) == k { // a conditional move, not a branch
		inc = uint32(e)
	}
	return inc
}

// englishness is the share of English among the function words seen,
// smoothed towards English: text without any (code, JSON, a name) is
// treated as English, which is what identifiers mostly are.
func englishness(en, other uint32) float64 {
	return float64(en+1) / float64(en+other+1)
}
