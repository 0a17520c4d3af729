package tokenest

import (
	"math/bits"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// Read validates b as one JSON object, with the verdicts of EstimateNear's
// reader (those of gjson.Valid; nesting at most 512 deep), and notes where
// its top-level members are, without estimating anything. It reports
// whether b is one such object; the Index is Complete exactly then. It is
// the reader for the other JSON the filter reads whole, prefill answers
// above all, whose block id lists grow with the prompt.
func (x *Index) Read(b []byte) bool {
	x.reset()
	i := jsonraw.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = jsonraw.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return x.closeAt(b, i)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		// A key of up to 15 bytes without escapes (most keys) in line:
		// its closing quote is the first quote, backslash or control
		// character of the two words after the opening one. Others
		// through SkipString.
		m := Member{Start: i, KeyEnd: -1}
		if len(b)-i > 16 {
			k := i + 1
			st := jsonraw.Stops(jsonraw.Word(b, k))
			if st == 0 {
				k += 8
				st = jsonraw.Stops(jsonraw.Word(b, k))
			}
			if e := k + bits.TrailingZeros64(st)>>3; st != 0 && b[e] == '"' {
				m.KeyEnd = e + 1
			}
		}
		if m.KeyEnd < 0 {
			if m.KeyEnd = jsonraw.SkipString(b, i); m.KeyEnd < 0 {
				return false
			}
		}
		i = jsonraw.SkipSpace(b, m.KeyEnd)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		m.Val = jsonraw.SkipSpace(b, i+1)
		// the member's value is one level inside the object
		if m.End = jsonraw.Skip(b, m.Val, 1); m.End < 0 {
			return false
		}
		x.Members = append(x.Members, m)
		i = jsonraw.SkipSpace(b, m.End)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return x.closeAt(b, i)
		case ',':
			i = jsonraw.SkipSpace(b, i+1)
		default:
			return false
		}
	}
}

// closeAt ends Read at the object's closing brace b[i]: only white space
// may follow.
func (x *Index) closeAt(b []byte, i int) bool {
	if jsonraw.SkipSpace(b, i+1) != len(b) {
		return false
	}
	x.Close, x.complete = i, true
	return true
}
