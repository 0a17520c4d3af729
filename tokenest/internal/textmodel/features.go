package textmodel

import "strconv"

// Features counted while scanning a text. Each is a count of pre-tokens of
// one kind, or of characters of one kind, so that the fit is linear and the
// scan never needs the text twice.
//
// The first NumLatin features describe Latin words. cl100k spends far fewer
// tokens on an English word than on a German or French word of the same
// length, so these have two weights, one for English and one for other
// Latin-script languages, mixed per text by Englishness (see lang.go).
const (
	// Latin letter runs by shape and length 1..latinLens; runs longer than
	// latinLens count in the last bucket and add their extra characters to
	// FLatinLongChars.
	FLatinLower = iota * latinLens
	FLatinTitle
	FLatinUpper
	FLatinMixed
	fLatinRunsEnd = FLatinMixed + latinLens
)

const latinLens = 16

const (
	FLatinLongChars = fLatinRunsEnd + iota // characters beyond latinLens
	FLatinAccents                          // accented (non-ASCII) Latin letters
	FLatinHumps                            // lower→upper transitions inside a run (camelCase)

	// A word pre-token whose first character is not a letter: a space,
	// another white-space character, ASCII punctuation, other punctuation.
	FPrefixSpaceLatin
	FPrefixWSLatin
	FPrefixPunctLatin
	FPrefixUniLatin

	// NumLatin is the number of language-dependent features.
	NumLatin
)

// Runs of alphabets whose words BPE merges into a few tokens, by length.
const (
	FCyrillic = NumLatin + iota*alphaLens
	FGreek
	FArabic
	FHebrew
	fAlphaEnd = FHebrew + alphaLens
)

const alphaLens = 12

const (
	FAlphaLongChars = fAlphaEnd + iota // characters beyond alphaLens in the alphabets above

	// Per-character scripts: characters and runs.
	FThaiChars
	FThaiRuns
	FIndicChars
	FIndicRuns
	FHanChars
	FHanRuns
	FKanaChars
	FKanaRuns
	FHangulChars
	FHangulRuns
	FOtherLetterChars
	FOtherLetterRuns
	FScriptSwitches // script changes inside one letter run ("Linux系统")

	// Prefixes of words in the other scripts (see FPrefixSpaceLatin).
	FPrefixSpaceOther
	FPrefixWSOther
	FPrefixPunctOther
	FPrefixUniOther

	FDigitGroups // \p{N}{1,3}

	// Punctuation runs (` ?[^\s\p{L}\p{N}]+[\r\n]*`) by length 1..punctLens.
	FPunct
	fPunctEnd = FPunct + punctLens - 1
)

const (
	FPunctLongChars = fPunctEnd + 1 + iota // characters beyond punctLens
	FPunctSpace                            // run preceded by its space
	FPunctNewline                          // run followed by newlines
	FPunctU2                               // 2-byte UTF-8 characters in runs
	FPunctU3                               // 3-byte
	FPunctU4                               // 4-byte (emoji)

	// White space.
	FNewlineRuns     // `\s*[\r\n]+`
	FNewlineRunExtra // characters beyond the first in such runs
	FSpaceRuns       // `\s+(?!\S)`
	FSpaceRunExtra   // characters beyond the first
	FLoneSpaces      // a single white-space character before a digit or symbol
	FTabs            // tab characters in white-space runs

	// NumFeatures is the length of a feature vector.
	NumFeatures
)

const punctLens = 8

// NumWeights is the length of the weight vector: every feature, then the
// non-English weights of the NumLatin Latin features.
const NumWeights = NumFeatures + NumLatin

// FeatureName returns the Go expression naming weight i, as written in
// weights.go (e.g. "FLatinLower + 3" for lower-case Latin runs of 4 letters,
// "OtherLatin + FLatinLower + 3" for its non-English weight).
func FeatureName(i int) string {
	if i >= NumFeatures {
		return "OtherLatin + " + FeatureName(i-NumFeatures)
	}
	for _, g := range featureGroups {
		if i >= g.first && i < g.first+g.n {
			if g.n == 1 {
				return g.name
			}
			return g.name + " + " + strconv.Itoa(i-g.first)
		}
	}
	return "?"
}

// OtherLatin is the offset of the non-English weights in Weights.
const OtherLatin = NumFeatures

var featureGroups = []struct {
	name     string
	first, n int
}{
	{"FLatinLower", FLatinLower, latinLens},
	{"FLatinTitle", FLatinTitle, latinLens},
	{"FLatinUpper", FLatinUpper, latinLens},
	{"FLatinMixed", FLatinMixed, latinLens},
	{"FLatinLongChars", FLatinLongChars, 1},
	{"FLatinAccents", FLatinAccents, 1},
	{"FLatinHumps", FLatinHumps, 1},
	{"FPrefixSpaceLatin", FPrefixSpaceLatin, 1},
	{"FPrefixWSLatin", FPrefixWSLatin, 1},
	{"FPrefixPunctLatin", FPrefixPunctLatin, 1},
	{"FPrefixUniLatin", FPrefixUniLatin, 1},
	{"FCyrillic", FCyrillic, alphaLens},
	{"FGreek", FGreek, alphaLens},
	{"FArabic", FArabic, alphaLens},
	{"FHebrew", FHebrew, alphaLens},
	{"FAlphaLongChars", FAlphaLongChars, 1},
	{"FThaiChars", FThaiChars, 1},
	{"FThaiRuns", FThaiRuns, 1},
	{"FIndicChars", FIndicChars, 1},
	{"FIndicRuns", FIndicRuns, 1},
	{"FHanChars", FHanChars, 1},
	{"FHanRuns", FHanRuns, 1},
	{"FKanaChars", FKanaChars, 1},
	{"FKanaRuns", FKanaRuns, 1},
	{"FHangulChars", FHangulChars, 1},
	{"FHangulRuns", FHangulRuns, 1},
	{"FOtherLetterChars", FOtherLetterChars, 1},
	{"FOtherLetterRuns", FOtherLetterRuns, 1},
	{"FScriptSwitches", FScriptSwitches, 1},
	{"FPrefixSpaceOther", FPrefixSpaceOther, 1},
	{"FPrefixWSOther", FPrefixWSOther, 1},
	{"FPrefixPunctOther", FPrefixPunctOther, 1},
	{"FPrefixUniOther", FPrefixUniOther, 1},
	{"FDigitGroups", FDigitGroups, 1},
	{"FPunct", FPunct, punctLens},
	{"FPunctLongChars", FPunctLongChars, 1},
	{"FPunctSpace", FPunctSpace, 1},
	{"FPunctNewline", FPunctNewline, 1},
	{"FPunctU2", FPunctU2, 1},
	{"FPunctU3", FPunctU3, 1},
	{"FPunctU4", FPunctU4, 1},
	{"FNewlineRuns", FNewlineRuns, 1},
	{"FNewlineRunExtra", FNewlineRunExtra, 1},
	{"FSpaceRuns", FSpaceRuns, 1},
	{"FSpaceRunExtra", FSpaceRunExtra, 1},
	{"FLoneSpaces", FLoneSpaces, 1},
	{"FTabs", FTabs, 1},
}
