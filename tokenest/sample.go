package tokenest

import (
	"sync"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// Reading long strings in part (EstimateNear). The Default method costs
// ~4–7 ns a byte in wasm, where the filter runs: on long prompts, the
// requests pdroute exists for, most of the filter's time. A string of at
// least sampleMin bytes is read in part: sampleWindows windows of about
// sampleWindow bytes, each at a place drawn by a fixed hash within an even
// stretch of the string, are copied one after the other into a buffer
// and counted as one text, 8 KB at a time (so that its Englishness is
// judged on all of them, as the whole string's is on all of it). Their cost is scaled by the
// measure of text they stand for: the string's length with every \u escape
// counted as the UTF-8 bytes of its character (jsonraw.SkipStringExtra),
// which does not change when a client escapes what it sends (Python's
// json.dumps does, by default: six bytes for a character of two or three,
// so that a part in ASCII and a part in Cyrillic weigh three times
// differently in bytes). The whole string is still validated (SkipString,
// ~8 times faster than the estimate), so the JSON guarantee of Estimate
// holds. TestSampledAccuracy bounds the error on documents of every class,
// from sampleMin to 128k tokens, escaped or not, on documents that change
// language along the way and on chats; EstimateNear reads the body whole
// when the sampled estimate lands near the caller's threshold.
//
// How much is counted is set by sampling noise, not speed. A string of
// sampleLong bytes or more has sampleWindows windows counted, about 50 KB:
// with about 40 KB, some documents of the test were off by 3–4.4 % at some
// window sizes; from 46 KB none was off by more than 2.5 % at any
// neighbouring setting. A shorter string has sampleFewer windows counted,
// about 20 KB, a third to two thirds of it: the less of a string is left
// unread, the less its sample can miss, and the documents of the test from
// 32 to 64 KB stayed within 2 % (2.9 % at the neighbouring settings).
//
// A long prompt is as often many shorter strings: the turns of a
// conversation, the documents of a RAG prompt, tool results. In a body of
// at least sampleMin bytes, a string of sampleMinPart bytes up to
// sampleMin is read in part too, but by the body rather than by itself
// (see spread): windows at an even stride over the whole body, so that
// each string has about one window per stride of its length, and the
// windows of all such strings counted as one text and scaled together.
// The 165 conversations of the test (3 to 120 turns, of every class and of
// classes in turn) stayed within 1.31 % with spreadWindows windows, and
// within 2.2 % at the neighbouring settings (180–240 windows, strides of
// 512–768 B); 160 windows reached 2.91 % on one. Turns under
// sampleMinPart are read whole: with 256 B, long chats of short turns
// reached 2.98 % at a neighbouring setting. A body whose text is sparse
// (conversations beside an image of 64 KB to 1 MB sent as a data URL) had
// too few windows land in its turns: up to 7.4 % off, and 3.2 % with 64 of
// them covering a sixth; minSpreadWindows reads those whole, and the test's
// 36 such bodies stay within 1.11 % (1.27 % and 1.80 % at 96 and 80).
const (
	sampleMin     = 32 << 10 // strings shorter than this are read whole
	sampleLong    = 64 << 10 // strings shorter than this have sampleFewer windows
	sampleWindows = 160
	sampleFewer   = 64
	sampleWindow  = 320
	// sampleMinPart is the shortest string a long body's spread reads in
	// part (shorter ones, names and short turns, are read whole), and
	// spreadWindows the windows a spread places over a body, at a stride
	// of at least spreadStride bytes (it reads at most about half of
	// what it spreads over).
	sampleMinPart = 1 << 10
	spreadWindows = 200
	spreadStride  = 2 * sampleWindow
	// minSpreadWindows is the least sample a spread extrapolates from:
	// its windows over the share of the strings they leave unread (w /
	// (1 − f)), which stands for the sampling error of reading part of a
	// finite text. Fewer, and the strings are read whole.
	minSpreadWindows = 112
	// cutSpace and cutSearch bound the search for a place to cut a window
	// (see cut).
	cutSpace  = 128
	cutSearch = 256
	// sampleChunk is the buffer the windows are counted from, a few at a
	// time: each is cut past sampleWindow bytes before the next space
	// (within cutSpace bytes), else the next lead byte or escape, at most
	// cutSearch bytes on.
	sampleChunk = 8<<10 + sampleWindow + cutSearch + 2
	// nearBand is how close to the threshold (a fraction of it) a sampled
	// estimate makes EstimateNear read the body whole: several times the
	// largest sampling error TestSampledAccuracy allows.
	nearBand = 0.15
)

// near reports whether an estimate of tokens lies within nearBand of
// threshold.
func near(tokens, threshold int) bool {
	d := float64(tokens - threshold)
	return d <= nearBand*float64(threshold) && -d <= nearBand*float64(threshold)
}

// sampledString counts the JSON string at t.b[v] in part, if it is long
// enough (by itself, or as a string of a long body: t.spread), and
// returns the offset after it (-1: not valid JSON) and true; false when it
// is to be read whole.
func (t *tally) sampledString(v int) (int, bool) {
	b := t.b
	if len(b)-v < sampleMinPart {
		return 0, false
	}
	end, extra := jsonraw.SkipStringExtra(b, v)
	if end < 0 {
		return -1, true
	}
	lo, hi := v+1, end-1 // the string's raw bytes
	if hi-lo < sampleMin {
		if hi-lo < sampleMinPart || !t.spread.add(b, v, lo, hi, extra) {
			return 0, false
		}
		return end, true
	}
	// on the stack, and zeroed, only for a string read in part (~10 KB)
	var win tallyWindow
	w := &win
	n := 1 // bytes in w.buf, after its opening quote
	w.buf[0] = '"'
	rest := hi - lo
	windows := sampleWindows
	if rest < sampleLong {
		windows = sampleFewer
	}
	step := rest / windows
	for k := range windows {
		// a place within the k-th stretch, drawn by a fixed hash of k and
		// the length: not at the same place of each stretch, which on a
		// text that repeats itself could read the same part each time
		jitter := 0
		if room := step - sampleWindow - cutSearch; room > 0 {
			jitter = int((uint64(k+1)*0x9E3779B97F4A7C15 ^ uint64(rest)) * 0xBF58476D1CE4E5B9 >> 33 % uint64(room))
		}
		from := cut(b, lo+k*step+jitter, hi)
		if from < 0 {
			return 0, false
		}
		to := cut(b, min(from+sampleWindow, hi), hi)
		if to < 0 || to <= from {
			return 0, false
		}
		if n+to-from+1 > len(w.buf) { // count the full buffer
			if !w.count(n, extra != 0) || 1+to-from+1 > len(w.buf) {
				return 0, false
			}
			n = 1
		}
		n += copy(w.buf[n:], b[from:to])
	}
	if !w.count(n, extra != 0) {
		return 0, false
	}
	w.c.End(0)
	t.text.AddCost(int64(float64(w.c.Cost()) * float64(rest-extra) / float64(w.raw-w.extra)))
	t.sampled = true
	return end, true
}

// spread reads the strings of a long body that are too short to be read
// in part by themselves (sampleMinPart to sampleMin bytes) in part
// together. Windows of about sampleWindow bytes are placed over the whole
// body at an even stride (spreadWindows of them, at least spreadStride
// apart), each at a place drawn by a fixed hash within its stretch of the
// body as sampledString places them within a string, and those that fall
// in such a string are read: a string has about one window for each
// stride of its length, one or none when it is shorter than the stride.
// Where they fall does not depend on the order the strings are read in.
// The windows of all the strings are copied into one buffer and counted
// as one text (so that its Englishness is judged on all of them), and
// their cost is scaled by the measure of all the strings together
// (endSpread): the unread part of each string is stood for by the windows
// of all, as a long string's is by its own.
//
// A body whose text is sparse next to its size (an image sent as a data
// URL beside a conversation, large tool definitions, most of its text in
// one long string) has few of its windows land in such strings, too few
// to stand for them: then (minSpreadWindows) the strings, whose offsets
// the spread keeps, are read whole at the end instead.
type spread struct {
	w       tallyWindow
	n       int // bytes in w.buf, its opening quote included (0: none yet)
	stride  int
	windows int   // copied
	strs    []int // the strings' offsets, at most maxSpreadStrings
	measure int   // of the strings read in part (see sampledString)
	escapes bool  // some of them has \u escapes
	failed  bool  // the windows did not read as a JSON string: read the body whole
}

// maxSpreadStrings bounds the strings a spread reads in part (and the
// offsets it keeps); beyond it a string is read whole.
const maxSpreadStrings = 4096

// spreads holds the spreads not in use (EstimateNear takes one for a long
// body).
var spreads = sync.Pool{New: func() any { return new(spread) }}

// reset makes p the empty spread of a body of n bytes. The buffer is not
// cleared: it is written before it is read.
func (p *spread) reset(n int) {
	p.w.c, p.w.raw, p.w.extra = textmodel.Counter{}, 0, 0
	p.n, p.windows, p.strs, p.measure, p.escapes, p.failed = 0, 0, p.strs[:0], 0, false, false
	p.stride = max(n/spreadWindows, spreadStride)
}

// add reads the string at b[v] (its raw bytes b[lo:hi], with extra bytes
// of \u escapes, validated) in part: it copies the windows that fall in
// it. It returns false, having read nothing, when the string is to be read
// whole: when a window has no place to cut within cutSearch bytes, or the
// spread holds maxSpreadStrings strings already.
func (p *spread) add(b []byte, v, lo, hi, extra int) bool {
	if p == nil || p.failed || len(p.strs) == maxSpreadStrings {
		return false
	}
	var wins [sampleMin/spreadStride + 2][2]int
	nw := 0
	s := p.stride
	room := s - sampleWindow - cutSearch // > 0: s ≥ spreadStride
	for k := lo / s; k*s < hi; k++ {
		at := k*s + int((uint64(k+1)*0x9E3779B97F4A7C15^uint64(len(b)))*0xBF58476D1CE4E5B9>>33%uint64(room))
		if at < lo {
			continue
		}
		if at >= hi {
			break
		}
		from := cut(b, at, hi)
		if from < 0 {
			return false
		}
		to := cut(b, min(from+sampleWindow, hi), hi)
		if to < 0 {
			return false
		}
		if to > from {
			if nw == len(wins) {
				return false // cannot happen: the stride bounds the windows
			}
			wins[nw] = [2]int{from, to}
			nw++
		}
	}
	p.strs = append(p.strs, v)
	p.windows += nw
	p.measure += hi - lo - extra
	p.escapes = p.escapes || extra != 0
	w := &p.w
	if p.n == 0 {
		w.buf[0], p.n = '"', 1
	}
	for _, win := range wins[:nw] {
		from, to := win[0], win[1]
		if p.n+to-from+1 > len(w.buf) {
			if !w.count(p.n, p.escapes) {
				p.failed = true
				return true
			}
			p.n = 1
		}
		p.n += copy(w.buf[p.n:], b[from:to])
	}
	return true
}

// endSpread adds to the text the cost of the strings the spread read in
// part: the windows' cost scaled by the strings' measure, or, if the
// windows are too few a sample of them (minSpreadWindows), the strings
// read whole.
func (t *tally) endSpread() {
	p := t.spread
	if p == nil || len(p.strs) == 0 || p.failed {
		return
	}
	w := &p.w
	if p.n > 1 && !w.count(p.n, p.escapes) {
		p.failed = true
		return
	}
	p.n = 1
	f := min(float64(w.raw-w.extra)/float64(p.measure), 0.9) // the share read
	if float64(p.windows) < minSpreadWindows*(1-f) {
		for _, v := range p.strs {
			t.text.JSONString(t.b, v) // validated by sampledString
		}
		return
	}
	w.c.End(0)
	t.text.AddCost(int64(float64(w.c.Cost()) * float64(p.measure) / float64(w.raw-w.extra)))
	t.sampled = true
}

// cut returns the first offset at or after i (and before hi) where a window
// of a JSON string's raw bytes may start or end without splitting a
// character or an escape: before a space (also the start of a word, as the
// tokenizer cuts) if there is one within cutSpace bytes, else before a
// UTF-8 lead byte or a backslash that starts an escape (one not preceded by
// a backslash: the byte before it is then a character or the end of an
// escape, neither of which escapes it). i itself is returned at hi; -1
// when there is no such place within cutSearch bytes. (Text with rare
// spaces, such as Japanese, would otherwise make windows a few hundred
// bytes longer than sampleWindow.)
func cut(b []byte, i, hi int) int {
	if i >= hi {
		return hi
	}
	for j := i; j < min(i+cutSpace, hi); j++ {
		if b[j] == ' ' {
			return j
		}
	}
	lim := min(i+cutSearch, hi)
	for j := i; j < lim; j++ {
		if c := b[j]; c == ' ' || c >= 0xC0 || c == '\\' && b[j-1] != '\\' {
			return j
		}
	}
	if lim == hi {
		return hi
	}
	return -1
}

// tallyWindow counts the windows of a long string as one text, a buffer
// of them at a time.
type tallyWindow struct {
	c          textmodel.Counter
	raw, extra int // the windows' bytes, and their \u escapes' extra bytes
	buf        [sampleChunk]byte
}

// count scans the windows in buf[1:n] as the next part of the text (as a
// JSON string, between quotes; the text goes on over the next buffer)
// and empties buf, noting the windows' measure (their \u escapes' extra
// bytes only if escapes is set: else there are none). False if the buffer
// does not read as a JSON string (it should always).
func (w *tallyWindow) count(n int, escapes bool) bool {
	w.buf[n] = '"'
	if w.c.JSONPart(w.buf[:n+1], 0) != n {
		return false
	}
	w.raw += n - 1
	if escapes {
		_, e := jsonraw.SkipStringExtra(w.buf[:n+1], 0)
		w.extra += e
	}
	w.buf[0] = '"'
	return true
}

// EstimateNear is Estimate for a routing decision against threshold
// tokens: strings of 32 KB or more, and in a body of 32 KB or more strings
// of 1 KB or more, are read in part and their estimate extrapolated (see
// sample.go), unless the estimate so found lies within 15 % of threshold,
// when the body is read whole. The result and errors
// are Estimate's, the JSON guarantee included; Result.Sampled tells which
// way it was read. threshold ≤ 0 means no threshold (the decision does not
// depend on the estimate).
//
// If index is not nil, EstimateNear also notes in it where the body's
// top-level members are, so that the caller need not read the body again
// to find them (see Index).
func EstimateNear(body []byte, path string, m Method, threshold int, index *Index) (Result, error) {
	return estimateNear(body, path, m, threshold, nil, index)
}

// EstimateNear is the package's EstimateNear, with the tool definitions
// the Cache holds.
func (c *Cache) EstimateNear(body []byte, path string, m Method, threshold int, index *Index) (Result, error) {
	return estimateNear(body, path, m, threshold, c, index)
}

func estimateNear(body []byte, path string, m Method, threshold int, cache *Cache, index *Index) (Result, error) {
	if m != Default || len(body) < sampleMin {
		return estimate(body, path, m, cache, nil, index)
	}
	// pooled rather than on the stack: the tally's pointers leak (escape
	// analysis does not tell its fields apart), and a spread is ~10 KB
	sp := spreads.Get().(*spread)
	sp.reset(len(body))
	r, err := estimate(body, path, m, cache, sp, index)
	failed := sp.failed
	spreads.Put(sp)
	if err == nil && (failed || r.Sampled && threshold > 0 && near(r.Tokens, threshold)) {
		return estimate(body, path, m, cache, nil, index)
	}
	return r, err
}

// Index is where the top-level members of a body that EstimateNear read
// are: the one reading of the body serves the estimate and the caller's
// edits (filter/connector's Object). Reuse one Index across calls: its
// slice keeps its room, so that noting costs no allocation.
type Index struct {
	// Members are the top-level members in document order, repeated keys
	// included.
	Members []Member
	// Close is the offset of the top-level object's closing brace.
	Close int
	// complete: the walk read the whole top-level object
	complete bool
}

// Member is where a top-level member is: Start is the offset of its key's
// opening quote, KeyEnd the offset after the key's closing quote, Val the
// offset of its value and End the offset after the value.
type Member struct{ Start, KeyEnd, Val, End int }

// Complete reports whether the Index describes the whole top-level object
// of the last body read: EstimateNear returned nil, ErrNoInput or a
// *FieldError (the body is one valid JSON object). Otherwise it is not to
// be used.
func (x *Index) Complete() bool { return x != nil && x.complete }

func (x *Index) reset() {
	if x != nil {
		x.Members, x.Close, x.complete = x.Members[:0], 0, false
	}
}
