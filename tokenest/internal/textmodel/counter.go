// Package textmodel estimates how many tokens a byte-level BPE tokenizer
// (calibrated on cl100k_base) makes of a text, without a vocabulary.
//
// It replays cl100k's pre-tokenizer (the regular expression that cuts text
// into words, numbers, punctuation runs and white space before BPE merges
// within each piece) in one pass, and counts the pieces by kind: Latin
// words by shape and length, other alphabets by length, CJK and other
// scripts by character, digit groups, punctuation runs, white-space runs.
// The estimate is a dot product of those counts with weights fitted against
// the real tokenizer (see Weights). The replay is defined character by
// character (step); a reader of 64-byte blocks through bitmaps of character
// classes and a table-driven reader of whole ASCII pieces do the same work
// faster wherever they can (see scan), and tests check that they count
// exactly what step does. A JSON string is read straight from the body,
// escapes decoded and its syntax validated on the way. Pure Go, no
// allocation, no goroutines: it runs inside the wasm filter.
package textmodel

import (
	"math"
	"unicode/utf8"
)

// Scanner modes: which alternative of the pre-tokenizer pattern the current
// piece matched.
const (
	mIdle    uint8 = iota
	mWord          // [^\r\n\p{L}\p{N}]?\p{L}+
	mDigits        // \p{N}{1,3}, counted per run
	mPunct         // ` ?[^\s\p{L}\p{N}]+`
	mPunctNL       // the `[\r\n]*` tail of a punctuation run
	mSpace         // a white-space run, decided when it ends
)

// Prefix kinds of a word piece.
const (
	pNone uint8 = iota
	pSpace
	pWS
	pPunct
	pUni
)

// Counter accumulates feature counts over one or more texts. The zero value
// is ready to use; a Counter is about a kilobyte and a half (1 552 bytes) and lives on
// the stack.
type Counter struct {
	// counts of all texts since the Counter was made (see End)
	feat [NumFeatures]uint32
	// the Latin counts (the first NumLatin, whose weights depend on a
	// text's Englishness) where the current text started
	base [NumLatin]uint32
	// what the finished texts' Englishness takes from or adds to their
	// estimate (see End) in units of 1/nano: fixed point, so that the
	// total does not depend on the order of the texts
	sum int64

	// function words seen in the current text (see lang.go), and the
	// Englishness of the last finished text
	english, other uint32
	lastEnglish    float64

	runeBuf [utf8.UTFMax]byte // PartRune's character

	// used: some text was scanned or ended, so that Estimate can tell a
	// Counter that saw none (a request's tools Counter, often) by one
	// test instead of comparing all the counts with zero
	used bool

	// decoded's buffer. A field rather than decoded's local: the
	// profile's inlining puts decoded into scan, which it calls back with
	// the buffer, and a local handed to a call of its own function moves
	// to the heap (one allocation an escaped string; TestNoAllocations
	// runs with the profile). decoded's call back to scan reads plain
	// text, which never reaches decoded again, so one buffer is enough.
	decodedBuf [decodeBuf]byte

	mode uint8

	// word state: the current script segment of the letter run
	script   uint8
	key      uint32 // the segment's first letters (see packLetter)
	segLen   uint32
	upper    uint32
	humps    uint32
	accents  uint32
	lastLow  bool
	firstUp  bool
	digitLen uint32

	// punctuation run
	punctLen   uint32
	punctUTF8  [3]uint32 // characters of 2, 3 and 4 UTF-8 bytes
	punctSpace bool
	punctFirst uint8 // prefix kind the run would give a following word

	// white-space run
	wsLen      uint32
	wsNLEnd    uint32 // characters up to and including the last newline
	wsTabs     uint32
	wsLastChar byte // ' ' or another white-space character (0 for non-ASCII)
	wsNLPos    int  // input offset just after the last newline
	wsLastPos  int  // input offset of the last character

	// Trace, when set, is called with every piece's feature index and the
	// byte offsets of the input consumed when the piece ended; calibration
	// uses it to check the replay against the real pre-tokenizer. Nil in
	// production.
	Trace func(feature int, end int)
}

// nano is the fixed-point scale of Counter.sum.
const nano = 1e9

// Features returns the counts so far, of every text since the Counter was
// made.
func (c *Counter) Features() *[NumFeatures]uint32 { return &c.feat }

// LastEnglishness returns the Englishness (0..1) the last finished text was
// weighted with.
func (c *Counter) LastEnglishness() float64 { return c.lastEnglish }

// Estimate returns the estimated tokens of the finished texts, rounded to
// the nearest integer and never negative. End the last text first: one
// still in progress would count in part (the pieces it has finished, as
// if it were English).
func (c *Counter) Estimate() int {
	if !c.used && c.sum <= 0 {
		return 0 // no text and no added cost (a request's tools Counter, often): no dot product
	}
	sum := c.Cost()
	if sum <= 0 {
		return 0
	}
	return int((sum + nano/2) / nano)
}

// Text scans a plain UTF-8 text as one unit: pieces never cross its ends.
func (c *Counter) Text(s []byte) {
	c.scan(s, 0, false)
	c.End(len(s))
}

// JSONString scans the JSON string that starts at b[i] (b[i] == '"') as one
// text, decoding escapes on the fly and validating it as it goes. It
// returns the offset after the closing quote, or -1 when the string is not
// valid JSON (a raw control character, a malformed escape, no closing
// quote); the Counter's state is then meaningless.
func (c *Counter) JSONString(b []byte, i int) int {
	end := c.scan(b, i+1, true)
	if end < 0 {
		return -1
	}
	c.End(end)
	return end + 1
}

// JSONPart scans the JSON string that starts at b[i] (b[i] == '"') as part
// of a text, as Part does a plain text: the text goes on over the next
// part, and End completes it. It returns the offset of the closing quote,
// or -1 as JSONString does. (EstimateNear counts the windows of a long
// string as one text, a buffer of them at a time.)
func (c *Counter) JSONPart(b []byte, i int) int { return c.scan(b, i+1, true) }

// Part scans part of a plain text; call End when the text is complete. It
// lets a caller feed a text from several places without copying.
func (c *Counter) Part(s []byte) { c.scan(s, 0, false) }

// PartRune continues the current text with the character r, as Part
// would with its UTF-8 bytes.
func (c *Counter) PartRune(r rune) {
	n := utf8.EncodeRune(c.runeBuf[:], r)
	c.scan(c.runeBuf[:n], 0, false)
}

// End closes the current text at input offset pos (used only for Trace)
// and adds its cost: the dot product of its counts with Weights, the Latin
// features weighted by the text's Englishness e, e·English + (1−e)·other,
// which is English + (1−e)·(other − English).
//
// The weights are whole thousandths (tokcalib rounds them so), so the dot
// products are sums of integers (milliWeights), exact and without a chain
// of floating-point additions. The counts are never reset: they go on over
// all texts, and Estimate takes one dot product of them with the weights
// (rest), the English ones for the Latin features. What depends on the text
// is the (1−e) term, and e is 1 exactly for a text without function words
// of other languages (English, code, JSON, names, CJK text): End then only
// notes where the next text's counts start (base, a copy of the Latin
// counts), and such a text pays for nothing else. For the others it takes
// the dot product of the text's own Latin counts (the counts less base)
// with the differences of the weights, skipping with one branch each the
// groups of counts that most texts leave at zero (Latin words with
// capitals).
func (c *Counter) End(pos int) {
	c.used = true
	c.flush(pos)
	feat := (*[NumLatin]uint32)(c.feat[:NumLatin])
	if c.other != 0 {
		e := englishness(c.english, c.other)
		var d int64 // thousandths of a token
		for i := range latinLens {
			d += int64(feat[i]-c.base[i]) * milliLatinDiff[i]
		}
		for g := FLatinTitle; g < fLatinRunsEnd; g += latinLens {
			if *(*[latinLens]uint32)(feat[g:]) == *(*[latinLens]uint32)(c.base[g:]) {
				continue
			}
			for i := g; i < g+latinLens; i++ {
				d += int64(feat[i]-c.base[i]) * milliLatinDiff[i]
			}
		}
		for i := fLatinRunsEnd; i < NumLatin; i++ {
			d += int64(feat[i]-c.base[i]) * milliLatinDiff[i]
		}
		const perMilli = nano / 1000
		c.sum += int64(math.Round((1 - e) * float64(d) * perMilli))
		c.lastEnglish = e
	} else {
		c.lastEnglish = 1 // englishness(english, 0)
	}
	c.base = *feat
	c.english, c.other = 0, 0
}

// Cost returns the cost of the texts the Counter has ended, in
// billionths of a token: what Estimate rounds. End the last text first.
func (c *Counter) Cost() int64 { return c.sum + c.rest()*(nano/1000) }

// AddCost adds cost, another Counter's Cost, to c's, as if c had scanned
// that Counter's texts after its own (their last Englishness aside): a
// text's cost does not depend on the texts before it (End starts each
// afresh) and the cost is linear in the counts, so a text counted once can
// be added wherever it comes again at the price of one addition
// (tokenest's Cache of tool definitions does so; TestAddCostMatchesScan
// checks it). Features does not include the texts so added. c's texts must
// be ended.
func (c *Counter) AddCost(cost int64) { c.sum += cost }

// rest returns the dot product, in thousandths of a token, of the counts
// with the English weights of the Latin features and the weights of the
// others. The counts go two at a time, a pair of zeros (most of them, for
// a short text) with one test: one small loop, as the request's fixed
// cost wants, rather than one per group of features.
func (c *Counter) rest() int64 {
	var rest int64
	f := &c.feat
	w := (*[NumFeatures]int64)(milliWeights[:NumFeatures])
	for i := 0; i+1 < NumFeatures; i += 2 {
		if f[i]|f[i+1] != 0 {
			rest += int64(f[i])*w[i] + int64(f[i+1])*w[i+1]
		}
	}
	if NumFeatures%2 != 0 {
		rest += int64(f[NumFeatures-1]) * w[NumFeatures-1]
	}
	return rest
}

// milliWeights holds Weights in thousandths of a token, as integers
// (TestMilliWeights checks that they are exact).
var milliWeights = func() (w [NumWeights]int64) {
	for i, v := range Weights {
		w[i] = int64(math.Round(v * 1000))
	}
	return w
}()

// milliLatinDiff holds, for each Latin feature, its other-language weight
// less its English weight, in thousandths of a token.
var milliLatinDiff = func() (d [NumLatin]int64) {
	for i := range d {
		d[i] = milliWeights[OtherLatin+i] - milliWeights[i]
	}
	return d
}()

// flush ends the piece in progress at the end of a text.
func (c *Counter) flush(pos int) {
	switch c.mode {
	case mWord:
		c.endSegment(pos)
	case mDigits:
		c.endDigits(pos)
	case mPunct, mPunctNL:
		c.endPunct(pos)
	case mSpace:
		// `\s+(?!\S)` takes all trailing white space at the end of a text.
		c.endSpaceRun(pos, true)
	}
	c.mode = mIdle
}

// piece counts n of feature f for a pre-token that ended at input offset pos.
func (c *Counter) piece(f int, n uint32, pos int) {
	c.feat[f] += n
	if c.Trace != nil {
		c.Trace(f, pos)
	}
}

// step advances the replay by one character of ulen UTF-8 bytes at input
// offset pos. It returns false, leaving the character unread and the
// replay idle, when the character ends the piece in progress and starts the
// next one afresh; the caller then reads it again, and in idle mode step
// always reads it.
func (c *Counter) step(r rune, cls, script uint8, upper, accented bool, ulen, pos int) bool {
	switch c.mode {
	case mIdle:
		c.start(r, cls, script, upper, accented, ulen, pos)
		return true
	case mWord:
		if cls == cLetter {
			if script != c.script {
				c.endSegment(-1)
				c.feat[FScriptSwitches]++
				c.startSegment(r, script, upper, accented)
				return true
			}
			c.key |= packLetter(r, c.segLen)
			c.segLen++
			if upper {
				c.upper++
				if c.lastLow {
					c.humps++
				}
				c.lastLow = false
			} else {
				c.lastLow = true
			}
			if accented {
				c.accents++
			}
			return true
		}
		c.endSegment(pos)
	case mDigits:
		if cls == cDigit {
			c.digitLen++
			return true
		}
		c.endDigits(pos)
	case mPunct:
		if cls == cLetter && c.punctLen == 1 && !c.punctSpace {
			// `[^\r\n\p{L}\p{N}]?\p{L}+`: a single symbol joins the word.
			c.startWord(r, c.punctFirst, script, upper, accented)
			return true
		}
		if cls == cOther {
			c.punctChar(ulen)
			return true
		}
		if cls == cNewline {
			c.mode = mPunctNL
			return true
		}
		c.endPunct(pos)
	case mPunctNL:
		if cls == cNewline {
			return true
		}
		c.endPunct(pos)
	case mSpace:
		if cls == cSpace || cls == cNewline {
			c.wsLen++
			if cls == cNewline {
				c.wsNLEnd = c.wsLen
			}
			if r == '\t' {
				c.wsTabs++
			}
			c.wsLastChar = wsByte(r)
			c.wsLastPos = pos
			if cls == cNewline {
				c.wsNLPos = pos + 1
			}
			return true
		}
		trail := c.wsLen - c.wsNLEnd
		c.endSpaceRun(pos, false)
		if trail > 0 {
			// The run's last character belongs to what follows it.
			last := c.wsLastChar
			switch {
			case cls == cLetter:
				k := pWS
				if last == ' ' {
					k = pSpace
				}
				c.startWord(r, k, script, upper, accented)
				return true
			case cls == cOther && last == ' ':
				c.startPunct(true, ulen)
				return true
			default:
				c.piece(FLoneSpaces, 1, pos)
			}
		}
	}
	c.mode = mIdle
	return false
}

// start begins a piece at a character in idle mode.
func (c *Counter) start(r rune, cls, script uint8, upper, accented bool, ulen, pos int) {
	switch cls {
	case cLetter:
		c.startWord(r, pNone, script, upper, accented)
	case cDigit:
		c.mode = mDigits
		c.digitLen = 1
	case cOther:
		c.startPunct(false, ulen)
	default: // white space or newline
		c.mode = mSpace
		c.wsLen = 1
		c.wsNLEnd = 0
		if cls == cNewline {
			c.wsNLEnd = 1
		}
		c.wsTabs = 0
		if r == '\t' {
			c.wsTabs = 1
		}
		c.wsLastChar = wsByte(r)
		c.wsLastPos = pos
		c.wsNLPos = pos + 1
	}
}

func wsByte(r rune) byte {
	if r < utf8.RuneSelf {
		return byte(r)
	}
	return 0
}

func (c *Counter) startPunct(afterSpace bool, ulen int) {
	c.mode = mPunct
	c.punctLen = 0
	c.punctUTF8 = [3]uint32{}
	c.punctSpace = afterSpace
	c.punctFirst = pPunct
	if ulen > 1 {
		c.punctFirst = pUni
	}
	c.punctChar(ulen)
}

func (c *Counter) punctChar(ulen int) {
	c.punctLen++
	if ulen > 1 {
		c.punctUTF8[min(ulen, 4)-2]++
	}
}

func (c *Counter) startWord(r rune, prefix, script uint8, upper, accented bool) {
	c.mode = mWord
	if prefix != pNone {
		latin := script == sLatin
		var f int
		switch prefix {
		case pSpace:
			f = pick(latin, FPrefixSpaceLatin, FPrefixSpaceOther)
		case pWS:
			f = pick(latin, FPrefixWSLatin, FPrefixWSOther)
		case pPunct:
			f = pick(latin, FPrefixPunctLatin, FPrefixPunctOther)
		default:
			f = pick(latin, FPrefixUniLatin, FPrefixUniOther)
		}
		c.feat[f]++
	}
	c.startSegment(r, script, upper, accented)
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

func (c *Counter) startSegment(r rune, script uint8, upper, accented bool) {
	c.script = script
	c.key = packLetter(r, 0)
	c.segLen = 1
	c.upper = 0
	c.humps = 0
	c.accents = 0
	c.firstUp = upper
	c.lastLow = !upper
	if upper {
		c.upper = 1
	}
	if accented {
		c.accents = 1
	}
}

// endSegment records the current script segment of a letter run; pos is
// the offset where the word ends, or -1 when only the script changes.
func (c *Counter) endSegment(pos int) {
	n := c.segLen
	switch c.script {
	case sLatin:
		c.endLatin(pos)
	case sCyrillic, sGreek, sArabic, sHebrew:
		base := FCyrillic + int(c.script-sCyrillic)*alphaLens
		if n > alphaLens {
			c.feat[FAlphaLongChars] += n - alphaLens
			n = alphaLens
		}
		c.segment(base+int(n)-1, pos)
	default:
		f := perCharFeature[c.script]
		c.feat[f] += n
		c.segment(f+1, pos)
	}
}

// endLatin records a Latin segment (see endSegment).
func (c *Counter) endLatin(pos int) {
	c.latin(c.segLen, c.upper, c.humps, c.firstUp, c.key, c.accents, pos)
}

// latin records a Latin segment of n letters: up upper-case, humps
// lower-to-upper transitions, key its letters packed (see packLetter),
// accents non-ASCII letters. pos is as endSegment's.
func (c *Counter) latin(n, up, humps uint32, firstUp bool, key, accents uint32, pos int) {
	base := latinShape(n, up, firstUp)
	switch base {
	case FLatinLower:
		if accents == 0 {
			c.countLang(n, key)
		}
	case FLatinMixed:
		c.feat[FLatinHumps] += humps
	}
	if n > latinLens {
		c.feat[FLatinLongChars] += n - latinLens
		n = latinLens
	}
	c.feat[FLatinAccents] += accents
	c.segment(base+int(n)-1, pos)
}

// latinShape returns the first feature of a Latin word's shape: lower,
// Title, UPPER or mixed (camelCase), from its length, its upper-case
// letters and whether the first is one.
func latinShape(n, up uint32, firstUp bool) int {
	switch {
	case up == 0:
		return FLatinLower
	case up == 1 && firstUp:
		return FLatinTitle
	case up == n:
		return FLatinUpper
	}
	return FLatinMixed
}

// countLang counts a lower-case word of n ASCII letters, packed in key, if
// it is a function word of English or of another language (see lang.go).
func (c *Counter) countLang(n, key uint32) {
	if n-2 <= 2 {
		counts := langCount(key)
		c.english += counts & 0xFFFF
		c.other += counts >> 16
	}
}

func (c *Counter) segment(f, pos int) {
	if pos < 0 {
		c.feat[f]++
		return
	}
	c.piece(f, 1, pos)
}

// perCharFeature maps a per-character script to its chars feature (the runs
// feature follows it).
var perCharFeature = [numScripts]int{
	sThai:        FThaiChars,
	sIndic:       FIndicChars,
	sHan:         FHanChars,
	sKana:        FKanaChars,
	sHangul:      FHangulChars,
	sOtherLetter: FOtherLetterChars,
}

func (c *Counter) endDigits(pos int) {
	c.piece(FDigitGroups, (c.digitLen+2)/3, pos)
}

func (c *Counter) endPunct(pos int) {
	c.feat[FPunctU2] += c.punctUTF8[0]
	c.feat[FPunctU3] += c.punctUTF8[1]
	c.feat[FPunctU4] += c.punctUTF8[2]
	c.punctRun(c.punctLen, c.punctSpace, c.mode == mPunctNL, pos)
}

// punctRun records a punctuation run of n characters, after its space
// (space) and followed by newlines (newlines), that ended at offset pos.
func (c *Counter) punctRun(n uint32, space, newlines bool, pos int) {
	if space {
		c.feat[FPunctSpace]++
	}
	if newlines {
		c.feat[FPunctNewline]++
	}
	if n > punctLens {
		c.feat[FPunctLongChars] += n - punctLens
		n = punctLens
	}
	c.piece(FPunct+int(n)-1, 1, pos)
}

// endSpaceRun records a finished white-space run. At the end of a text the
// whole trailing part is one piece; before another character its last
// character is left for the caller to attach.
func (c *Counter) endSpaceRun(pos int, atEnd bool) {
	c.feat[FTabs] += c.wsTabs
	spaces, end := c.wsLen-c.wsNLEnd, pos
	if !atEnd && spaces > 0 {
		spaces-- // the last character goes with the next piece
		end = c.wsLastPos
	}
	c.spaceRun(c.wsNLEnd, c.wsNLPos, spaces, end)
}

// spaceRun records the pieces of a white-space run: `\s*[\r\n]+` up to its
// last newline (nlEnd characters, ending at offset nlPos), then a run of
// spaces characters ending at offset end.
func (c *Counter) spaceRun(nlEnd uint32, nlPos int, spaces uint32, end int) {
	if nlEnd > 0 {
		c.feat[FNewlineRunExtra] += nlEnd - 1
		c.piece(FNewlineRuns, 1, nlPos)
	}
	if spaces > 0 {
		c.feat[FSpaceRunExtra] += spaces - 1
		c.piece(FSpaceRuns, 1, end)
	}
}
