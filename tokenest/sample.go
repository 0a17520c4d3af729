package tokenest

import (
	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// Reading long strings in part (EstimateNear). The Default method costs
// ~10 ns a byte in wasm, where the filter runs: a 128k-token prompt (500
// KB) took 5 ms, most of the filter's time on the requests it exists for.
// Text of one prompt is statistically alike along its length, so a string
// longer than sampleMin is read in part: its first sampleHead bytes, then
// sampleWindows windows of sampleWindow bytes spread evenly over the rest,
// whose cost is scaled by the bytes they stand for. The whole string is
// still validated (jsonraw.SkipString, four times faster than the
// estimate), so the JSON guarantee of Estimate holds. TestSampledAccuracy
// bounds the error on long documents of every class and on documents that
// change language along the way; EstimateNear reads the body whole when the
// sampled estimate lands near the caller's threshold.
const (
	sampleMin     = 48 << 10 // strings shorter than this are read whole
	sampleHead    = 8 << 10
	sampleWindows = 48
	sampleWindow  = 1 << 10
	// cutSearch bounds the search for a place to cut a window (see cut).
	cutSearch = 256
	// nearBand is how close to the threshold (a fraction of it) a sampled
	// estimate makes EstimateNear read the body whole: several times the
	// largest sampling error TestSampledAccuracy allows.
	nearBand = 0.15
)

// sampledString counts the JSON string at t.b[v] in part, if it is long
// enough, and returns the offset after it (-1: not valid JSON) and true;
// false when it is to be read whole.
func (t *tally) sampledString(v int) (int, bool) {
	b := t.b
	if len(b)-v < sampleMin {
		return 0, false
	}
	end := jsonraw.SkipString(b, v)
	if end < 0 {
		return -1, true
	}
	lo, hi := v+1, end-1 // the string's raw bytes
	if hi-lo < sampleMin {
		return 0, false
	}
	// on the stack, and zeroed, only for a string read in part (~11 KB)
	var win tallyWindow
	w := &win
	// the head
	headEnd := cut(b, lo+sampleHead, hi)
	if headEnd < 0 || !w.count(b[lo:headEnd]) {
		return 0, false
	}
	head := w.c.Cost()
	// the windows, evenly spaced over the rest
	rest := hi - headEnd
	step := rest / sampleWindows
	read := 0
	for k := range sampleWindows {
		// a place within the k-th stretch, drawn by a fixed hash of k and
		// the length: not at the same place of each stretch, which on a
		// text that repeats itself could read the same part each time
		jitter := 0
		if room := step - sampleWindow - cutSearch; room > 0 {
			jitter = int((uint64(k+1)*0x9E3779B97F4A7C15 ^ uint64(rest)) * 0xBF58476D1CE4E5B9 >> 33 % uint64(room))
		}
		from := cut(b, headEnd+k*step+jitter, hi)
		if from < 0 {
			return 0, false
		}
		to := cut(b, min(from+sampleWindow, hi), hi)
		if to < 0 || to <= from {
			return 0, false
		}
		if !w.count(b[from:to]) {
			return 0, false
		}
		read += to - from
	}
	windows := w.c.Cost() - head
	t.text.AddCost(head + int64(float64(windows)*float64(rest)/float64(read)))
	t.sampled = true
	return end, true
}

// cut returns the first offset at or after i (and before hi) where a window
// of a JSON string's raw bytes may start or end without splitting a
// character or an escape: before a space (also the start of a word, as the
// tokenizer cuts), a UTF-8 lead byte, or a backslash that starts an escape
// (one not preceded by a backslash: the byte before it is then a character
// or the end of an escape, neither of which escapes it). i itself is
// returned at hi; -1 when there is no such place within cutSearch bytes.
func cut(b []byte, i, hi int) int {
	if i >= hi {
		return hi
	}
	lim := min(i+cutSearch, hi)
	for j := i; j < lim; j++ {
		if b[j] == ' ' {
			return j
		}
	}
	for j := i; j < lim; j++ {
		if c := b[j]; c >= 0xC0 || c == '\\' && b[j-1] != '\\' {
			return j
		}
	}
	if lim == hi {
		return hi
	}
	return -1
}

// tallyWindow counts windows of a long string, each as a text of its own.
type tallyWindow struct {
	c   textmodel.Counter
	buf [sampleHead + 2*cutSearch + 2]byte
}

// count scans raw (a window of a JSON string's raw bytes, cut where cut
// allows) as a JSON string of its own: copied between quotes, so that the
// Counter reads it as it reads a whole string. False if it does not read
// as one (it should always).
func (w *tallyWindow) count(raw []byte) bool {
	if len(raw)+2 > len(w.buf) {
		return false
	}
	w.buf[0] = '"'
	n := copy(w.buf[1:], raw)
	w.buf[n+1] = '"'
	return w.c.JSONString(w.buf[:n+2], 0) == n+2
}

// EstimateNear is Estimate for a routing decision against threshold
// tokens: strings longer than 48 KB are read in part and their estimate
// extrapolated (see sample.go), unless the estimate so found lies within
// 15 % of threshold, when the body is read whole. The result and errors
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
		return estimate(body, path, m, cache, false, index)
	}
	r, err := estimate(body, path, m, cache, true, index)
	if err == nil && r.Sampled && threshold > 0 {
		if d := float64(r.Tokens - threshold); d <= nearBand*float64(threshold) && -d <= nearBand*float64(threshold) {
			return estimate(body, path, m, cache, false, index)
		}
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
