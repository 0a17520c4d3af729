// Package textmodel estimates how many tokens a byte-level BPE tokenizer
// (calibrated on cl100k_base) makes of a text, without a vocabulary.
//
// It replays cl100k's pre-tokenizer (the regular expression that cuts text
// into words, numbers, punctuation runs and white space before BPE merges
// within each piece) as a one-pass state machine, and counts the pieces by
// kind: Latin words by shape and length, other alphabets by length, CJK and
// other scripts by character, digit groups, punctuation runs, white-space
// runs. The estimate is a dot product of those counts with weights fitted
// against the real tokenizer (see Weights). Pure Go, no allocation, no
// goroutines: it runs inside the wasm filter.
package textmodel

import (
	"math"
	"unicode/utf8"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
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
// is ready to use; a Counter is a few hundred bytes and lives on the stack.
type Counter struct {
	feat [NumFeatures]uint32 // counts of the current text
	sum  float64             // estimated tokens of the finished texts

	// function words seen in the current text (see lang.go), and the
	// Englishness of the last finished text
	english, other uint32
	lastEnglish    float64

	mode uint8

	// word state: the current script segment of the letter run
	script   uint8
	key      uint32 // the segment's last letters, packed 5 bits each
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

// Features returns the counts of the current text so far.
func (c *Counter) Features() *[NumFeatures]uint32 { return &c.feat }

// LastEnglishness returns the Englishness (0..1) the last finished text was
// weighted with.
func (c *Counter) LastEnglishness() float64 { return c.lastEnglish }

// Estimate returns the estimated tokens of the finished texts, rounded to
// the nearest integer and never negative.
func (c *Counter) Estimate() int {
	if c.sum <= 0 {
		return 0
	}
	return int(math.Round(c.sum))
}

// Text scans a plain UTF-8 text as one unit: pieces never cross its ends.
func (c *Counter) Text(s []byte) {
	c.scan(s, false)
	c.End(len(s))
}

// JSONString scans the body of a JSON string (the bytes between the quotes,
// escapes undecoded) as one text, decoding escapes on the fly.
func (c *Counter) JSONString(raw []byte) {
	c.scan(raw, true)
	c.End(len(raw))
}

// Part scans part of a text; call End when the text is complete. It lets a
// caller feed a text from several places without copying (escaped says
// whether s holds JSON escapes).
func (c *Counter) Part(s []byte, escaped bool) { c.scan(s, escaped) }

// End closes the current text at input offset pos (used only for Trace)
// and adds its cost: the dot product of its counts with Weights, the Latin
// features weighted by the text's Englishness.
func (c *Counter) End(pos int) {
	c.flush(pos)
	e := englishness(c.english, c.other)
	var sum float64
	for i, n := range c.feat {
		if n == 0 {
			continue
		}
		w := Weights[i]
		if i < NumLatin {
			w = e*w + (1-e)*Weights[OtherLatin+i]
		}
		sum += float64(n) * w
	}
	c.sum += sum
	c.lastEnglish = e
	c.feat = [NumFeatures]uint32{}
	c.english, c.other = 0, 0
}

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

// scan feeds bytes through the pre-tokenizer replay. Two fast paths cover
// most of Latin text and code without a call per character: letters that
// continue a Latin word, and a space that starts one.
func (c *Counter) scan(s []byte, escaped bool) {
	for i := 0; i < len(s); {
		b := s[i]
		var (
			r        rune
			cls      uint8
			script   uint8
			upper    bool
			accented bool
			size     int
			ulen     int // UTF-8 length of the decoded character
		)
		info := asciiInfo[b]
		if c.mode == mWord && c.script == sLatin && info&iLetter != 0 {
			j := i
			key, up, humps, lastLow := c.key, c.upper, c.humps, c.lastLow
			for j < len(s) {
				ch := s[j]
				f := asciiInfo[ch]
				if f&iLetter == 0 {
					break
				}
				key = key<<5 | uint32(ch&31)
				if f&iUpper != 0 {
					up++
					if lastLow {
						humps++
					}
					lastLow = false
				} else {
					lastLow = true
				}
				j++
			}
			c.key, c.upper, c.humps, c.lastLow = key, up, humps, lastLow
			c.segLen += uint32(j - i)
			i = j
			continue
		}
		switch {
		case c.mode == mPunct && b < utf8.RuneSelf && asciiClass[b] == cOther && !(escaped && b == '\\'):
			c.punctLen++ // punctuation continues a punctuation run
			i++
			continue
		case c.mode == mSpace && b == ' ':
			c.wsLen++ // a space continues a white-space run
			c.wsLastChar, c.wsLastPos = ' ', i
			i++
			continue
		case c.mode == mWord && b >= 0xE0 && c.script >= sHan && c.script <= sHangul:
			// CJK characters continuing a run of the same script.
			r, size := utf8.DecodeRune(s[i:])
			if cjkScript(r) == c.script {
				c.segLen++
				i += size
				continue
			}
		}
		if b == ' ' && i+1 < len(s) && asciiInfo[s[i+1]]&iLetter != 0 && c.mode != mSpace {
			// " word": the space is the word's prefix.
			if c.mode == mWord && c.script == sLatin {
				c.endLatin(i)
			} else {
				c.flush(i)
			}
			c.feat[FPrefixSpaceLatin]++
			next := s[i+1]
			up := asciiInfo[next] & iUpper
			c.mode, c.script, c.key, c.segLen = mWord, sLatin, uint32(next&31), 1
			c.upper, c.humps, c.accents = uint32(up/iUpper), 0, 0
			c.firstUp, c.lastLow = up != 0, up == 0
			i += 2
			continue
		}
		if b < utf8.RuneSelf && !(escaped && b == '\\') {
			r, cls, size, ulen = rune(b), asciiClass[b], 1, 1
			script = sLatin
			upper = info&iUpper != 0
		} else {
			if b == '\\' {
				r, size = jsonraw.DecodeEscape(s[i:])
				ulen = utf8.RuneLen(r)
			} else {
				r, size = utf8.DecodeRune(s[i:])
				ulen = size
			}
			if r < utf8.RuneSelf {
				cls = asciiClass[r]
				script = sLatin
				upper = r >= 'A' && r <= 'Z'
			} else {
				cls, script, upper, accented = classify(r)
			}
		}
		pos := i
		i += size
		c.step(r, cls, script, upper, accented, ulen, pos)
	}
}

// step advances the replay by one character of ulen UTF-8 bytes at input
// offset pos.
func (c *Counter) step(r rune, cls, script uint8, upper, accented bool, ulen, pos int) {
	switch c.mode {
	case mWord:
		if cls == cLetter {
			if script != c.script {
				c.endSegment(-1)
				c.feat[FScriptSwitches]++
				c.startSegment(r, script, upper, accented)
				return
			}
			c.segLen++
			c.key = c.key<<5 | uint32(r&31)
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
			return
		}
		c.endSegment(pos)
	case mDigits:
		if cls == cDigit {
			c.digitLen++
			return
		}
		c.endDigits(pos)
	case mPunct:
		if cls == cLetter && c.punctLen == 1 && !c.punctSpace {
			// `[^\r\n\p{L}\p{N}]?\p{L}+`: a single symbol joins the word.
			c.startWord(r, c.punctFirst, script, upper, accented)
			return
		}
		if cls == cOther {
			c.punctChar(ulen)
			return
		}
		if cls == cNewline {
			c.mode = mPunctNL
			return
		}
		c.endPunct(pos)
	case mPunctNL:
		if cls == cNewline {
			return
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
			return
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
				return
			case cls == cOther && last == ' ':
				c.startPunct(true, ulen)
				return
			default:
				c.piece(FLoneSpaces, 1, pos)
			}
		}
	}
	c.mode = mIdle
	c.start(r, cls, script, upper, accented, ulen, pos)
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

func pick(cond bool, a, b int) int {
	if cond {
		return a
	}
	return b
}

func (c *Counter) startSegment(r rune, script uint8, upper, accented bool) {
	c.script = script
	c.key = uint32(r & 31)
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
	n := c.segLen
	var base int
	switch {
	case c.upper == 0:
		base = FLatinLower
		if n >= 2 && n <= 4 && c.accents == 0 {
			switch wordLang(c.key) {
			case langEnglish:
				c.english++
			case langOther:
				c.other++
			}
		}
	case c.upper == 1 && c.firstUp:
		base = FLatinTitle
	case c.upper == n:
		base = FLatinUpper
	default:
		base = FLatinMixed
		c.feat[FLatinHumps] += c.humps
	}
	if n > latinLens {
		c.feat[FLatinLongChars] += n - latinLens
		n = latinLens
	}
	if c.accents != 0 {
		c.feat[FLatinAccents] += c.accents
	}
	c.segment(base+int(n)-1, pos)
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
	n := c.punctLen
	c.feat[FPunctU2] += c.punctUTF8[0]
	c.feat[FPunctU3] += c.punctUTF8[1]
	c.feat[FPunctU4] += c.punctUTF8[2]
	if c.punctSpace {
		c.feat[FPunctSpace]++
	}
	if c.mode == mPunctNL {
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
	if c.wsNLEnd > 0 {
		// `\s*[\r\n]+` up to the last newline.
		c.feat[FNewlineRunExtra] += c.wsNLEnd - 1
		c.piece(FNewlineRuns, 1, c.wsNLPos)
	}
	trail := int(c.wsLen - c.wsNLEnd)
	end := pos
	if !atEnd {
		trail-- // the last character goes with the next piece
		end = c.wsLastPos
	}
	if trail > 0 {
		c.feat[FSpaceRunExtra] += uint32(trail - 1)
		c.piece(FSpaceRuns, 1, end)
	}
}
