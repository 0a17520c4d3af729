package textmodel

// Englishness. cl100k's vocabulary holds most English words whole but splits
// German, French or Spanish words of the same length into two or three
// pieces, so Latin words get an English weight and an "other language"
// weight, mixed per text by the share of English among the short function
// words the text uses. Only lower-case ASCII words of 2–4 letters are looked
// up: they are packed into an integer while scanning (5 bits a letter), so
// the check costs one table probe per short word and nothing else.

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

// langTable is an open-addressed set of packed words with their language.
var langTable = func() (t [512]uint32) {
	put := func(words []string, lang uint32) {
		for _, w := range words {
			k := packWord(w)
			i := langSlot(k)
			for t[i] != 0 {
				i = (i + 1) % uint32(len(t))
			}
			t[i] = k<<2 | lang
		}
	}
	put(englishWords, langEnglish)
	put(otherWords, langOther)
	return t
}()

func packWord(w string) uint32 {
	var k uint32
	for i := 0; i < len(w); i++ {
		k = k<<5 | uint32(w[i]&31)
	}
	return k
}

func langSlot(k uint32) uint32 { return (k * 0x9E3779B1) >> 23 }

// wordLang returns the language of a packed lower-case word of 2–4 letters,
// or 0 when it is not a listed function word.
func wordLang(k uint32) uint32 {
	k &= 1<<20 - 1
	for i := langSlot(k); ; i = (i + 1) % uint32(len(langTable)) {
		e := langTable[i]
		if e == 0 {
			return 0
		}
		if e>>2 == k {
			return e & 3
		}
	}
}

// englishness is the share of English among the function words seen,
// smoothed towards English: text without any (code, JSON, a name) is
// treated as English, which is what identifiers mostly are.
func englishness(en, other uint32) float64 {
	return float64(en+1) / float64(en+other+1)
}
