package tokenest

import (
	"bytes"
	"errors"
	"math/bits"
	"strings"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// How a body is read. Estimate reads it once, front to back, validating
// every byte as it goes and counting the members it needs where they
// stand (streaming): one pass over the bytes. Whatever that pass cannot
// settle alone (an error, whose precedence depends on the order the shape
// checks fields in, or a repeated key, where the last one wins), the
// ordered walk settles: it validates the whole body first, then reads each
// object's members in the shape's order, the last of a repeated key. Both
// walks run the same member handlers; PrefixKey always takes the ordered
// one, as it hashes the prompt in order.

// errRetry reports that the streaming walk met something only the ordered
// walk settles (never returned to callers).
var errRetry = errors.New("tokenest: read the body in order")

// errFull reports that PrefixKey's budget is spent (never returned to
// callers).
var errFull = errors.New("tokenest: prefix budget spent")

// maxKeys bounds the members an object handler reads.
const maxKeys = 8

// members records where the values of an object's named members are:
// offset+1, or 0 while none has been seen.
type members struct{ at [maxKeys]int }

// value returns the offset of member k's value, or -1 (absent, or not read
// yet while streaming).
func (m *members) value(k int) int { return m.at[k] - 1 }

// object reads the object at t.b[v] (t.b[v] == '{') and returns the offset
// after it. visit is called once for each of keys: with the offset of its
// value (the last one, if the key repeats), or with -1 if it is missing
// (not at all for a missing optional key); it reads the value, returning
// the offset after it, and may look where other members are through m.
// The members not in keys are validated and skipped.
//
// Streaming, visit is called in document order as members come, and for
// the missing keys at the end; a repeated key stops the walk with errRetry.
// Ordered, the members are located first and visit is called in the order
// of keys.
func (t *tally) object(v int, keys *keySet, m *members, visit func(k, v int) (int, error)) (int, error) {
	b := t.b
	if t.depth >= jsonraw.MaxDepth {
		return 0, ErrNotJSON
	}
	t.depth++
	var seen uint64 // the keys met (bit k), streaming
	i := jsonraw.SkipSpace(b, v+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return 0, ErrNotJSON
			}
			start := i
			k, end := keyAt(b, i, keys)
			if end < 0 {
				return 0, ErrNotJSON
			}
			keyEnd := end
			if i = jsonraw.SkipSpace(b, end); i >= len(b) || b[i] != ':' {
				return 0, ErrNotJSON
			}
			if i = jsonraw.SkipSpace(b, i+1); i >= len(b) {
				return 0, ErrNotJSON
			}
			val := i
			switch {
			case t.ordered:
				if k >= 0 {
					m.at[k] = i + 1
				}
				end = i + len(jsonraw.Value(b[i:])) // validated before
			case k < 0 && i+4 <= len(b) && string(b[i:i+4]) == "null":
				end = i + 4 // a null without a call to Skip (see skip)
			case k < 0:
				end = jsonraw.Skip(b, i, t.depth)
			case m.at[k] != 0:
				return 0, errRetry
			default:
				m.at[k] = i + 1
				seen |= 1 << k
				var err error
				if end, err = visit(k, i); err != nil {
					return 0, err
				}
			}
			if end < 0 {
				return 0, ErrNotJSON
			}
			if t.depth == 1 && t.index != nil {
				t.index.Members = append(t.index.Members, Member{Start: start, KeyEnd: keyEnd, Val: val, End: end})
			}
			if i = jsonraw.SkipSpace(b, end); i < len(b) && b[i] == ',' {
				i = jsonraw.SkipSpace(b, i+1)
				continue
			}
			if i >= len(b) || b[i] != '}' {
				return 0, ErrNotJSON
			}
			i++
			break
		}
	}
	if t.depth == 1 && t.index != nil {
		t.index.Close, t.index.complete = i-1, true
	}
	if !t.ordered {
		// the missing required keys, in order
		for x := keys.required &^ seen; x != 0; x &= x - 1 {
			if _, err := visit(bits.TrailingZeros64(x), -1); err != nil {
				return 0, err
			}
		}
		t.depth--
		return i, nil
	}
	for k := range keys.names {
		var err error
		switch {
		case m.at[k] != 0:
			_, err = visit(k, m.at[k]-1)
		case keys.optional>>k&1 == 0:
			_, err = visit(k, -1)
		}
		if err != nil {
			return 0, err
		}
	}
	t.depth--
	return i, nil
}

// keySet is the list of members an object handler reads (at most
// maxKeys), with each name and the closing quote after it packed into two
// little-endian words, for keyAt.
type keySet struct {
	names        []string
	words, masks [maxKeys][2]uint64
	// optional marks (bit k) the members whose handler does nothing when
	// they are missing: object does not call it for them; required marks
	// the others.
	optional, required uint64
}

// newKeys makes the keySet of names, each of at most 15 bytes with no
// quote or backslash in it; a name written with a "?" after it is
// optional (see keySet).
func newKeys(names ...string) *keySet {
	ks := &keySet{names: make([]string, len(names))}
	if len(names) > maxKeys {
		panic("tokenest: too many keys")
	}
	for n, name := range names {
		if opt, ok := strings.CutSuffix(name, "?"); ok {
			name = opt
			ks.optional |= 1 << n
		} else {
			ks.required |= 1 << n
		}
		ks.names[n] = name
		q := name + `"`
		if len(q) > 16 || strings.ContainsAny(name, `"\\`) {
			panic("tokenest: key " + name)
		}
		for j := range len(q) {
			ks.words[n][j/8] |= uint64(q[j]) << (8 * (j % 8))
			ks.masks[n][j/8] |= 0xFF << (8 * (j % 8))
		}
	}
	return ks
}

// keyAt reads the key at b[i] (b[i] == '"') and returns its index in keys
// (or -1) and the offset after it (or -1 when it is not a valid string). A
// key written as one of the names (no escapes, the usual case) is found
// without a separate validation, by comparing the 16 bytes after the
// opening quote with the name and its closing quote: such a key is a
// valid string. Any other key is validated, and decoded (KeyIs) only when
// it has an escape.
func keyAt(b []byte, i int, keys *keySet) (k, end int) {
	if i+17 <= len(b) {
		x0, x1 := jsonraw.Word(b, i+1), jsonraw.Word(b, i+9)
		for k := range keys.names {
			w, m := &keys.words[k&(maxKeys-1)], &keys.masks[k&(maxKeys-1)]
			if x0&m[0] == w[0] && x1&m[1] == w[1] {
				return k, i + 2 + len(keys.names[k])
			}
		}
		// another key of at most 15 bytes without an escape (model,
		// max_tokens, stream, …): its closing quote is the first stop of
		// the two words, and it is a valid string that no name matches
		if st := jsonraw.Stops(x0); st != 0 {
			if e := i + 1 + bits.TrailingZeros64(st)>>3; b[e] == '"' {
				return -1, e + 1
			}
		} else if st := jsonraw.Stops(x1); st != 0 {
			if e := i + 9 + bits.TrailingZeros64(st)>>3; b[e] == '"' {
				return -1, e + 1
			}
		}
	} else {
		for k, name := range keys.names {
			if e := i + 1 + len(name); e < len(b) && b[e] == '"' && string(b[i+1:e]) == name {
				return k, e + 1
			}
		}
	}
	if end = jsonraw.SkipString(b, i); end < 0 || bytes.IndexByte(b[i+1:end-1], '\\') < 0 {
		return -1, end
	}
	for k, name := range keys.names {
		if jsonraw.KeyIs(b[i+1:end-1], name) {
			return k, end
		}
	}
	return -1, end
}

// array reads the array at t.b[v] (t.b[v] == '['), calling elem with the
// index and offset of each element; elem reads the element and returns the
// offset after it. It returns the offset after the array and its length.
// In PrefixKey, it stops with errFull once the budget is spent.
func (t *tally) array(v int, elem func(n, e int) (int, error)) (int, int, error) {
	b := t.b
	if t.depth >= jsonraw.MaxDepth {
		return 0, 0, ErrNotJSON
	}
	t.depth++
	i := jsonraw.SkipSpace(b, v+1)
	if i < len(b) && b[i] == ']' {
		t.depth--
		return i + 1, 0, nil
	}
	for n := 1; ; n++ {
		if i >= len(b) {
			return 0, 0, ErrNotJSON
		}
		end, err := elem(n-1, i)
		if err != nil {
			return 0, 0, err
		}
		if t.prefix.full() {
			return 0, 0, errFull
		}
		if i = jsonraw.SkipSpace(b, end); i < len(b) && b[i] == ',' {
			i = jsonraw.SkipSpace(b, i+1)
			continue
		}
		if i >= len(b) || b[i] != ']' {
			return 0, 0, ErrNotJSON
		}
		t.depth--
		return i + 1, n, nil
	}
}

// kind returns the kind of the value at t.b[v] (jsonraw.Invalid for v < 0,
// a missing member, or for bytes that start no JSON value).
func (t *tally) kind(v int) byte {
	if v < 0 {
		return jsonraw.Invalid
	}
	return jsonraw.Kind(t.b[v:])
}

// present reports whether a member is there and not null.
func (t *tally) present(v int) bool { return v >= 0 && t.b[v] != 'n' }

// skip validates the value at t.b[v] and returns the offset after it.
func (t *tally) skip(v int) (int, error) {
	if v < 0 {
		return 0, nil
	}
	// null, a missing value that bodies often write out, without the
	// call: entering Skip, whose frame is large, costs more in wasm than
	// reading the null
	if b := t.b; v+4 <= len(b) && string(b[v:v+4]) == "null" {
		return v + 4, nil
	}
	end := jsonraw.Skip(t.b, v, t.depth)
	if end < 0 {
		return 0, ErrNotJSON
	}
	return end, nil
}

// str validates the string at t.b[v] and returns its raw body (escapes
// undecoded) and the offset after it.
func (t *tally) str(v int) ([]byte, int, error) {
	end := jsonraw.SkipString(t.b, v)
	if end < 0 {
		return nil, 0, ErrNotJSON
	}
	return t.b[v+1 : end-1], end, nil
}
