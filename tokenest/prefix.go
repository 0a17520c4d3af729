package tokenest

import (
	"math"
	"unicode/utf8"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// PrefixKey returns the key the prefix_affinity balancer hashes requests
// by: a 64-bit FNV-1a hash of the first n bytes of the prompt's text, in
// order, decoded from JSON (for chat, each message's role and text; for
// Responses, the instructions then the input), or of the first n/4 token ids
// (4 bytes each, so a budget covers about as many tokens either way). Roles
// and the separators between texts are hashed but do not use up the budget;
// tools and media are left out. n ≤ 0 hashes the whole prompt.
//
// Requests that share a prefix of n bytes get the same key, so they land on
// the engine whose prefix cache already holds it. PrefixKey stops reading
// once the budget is spent, allocates nothing, and returns the same errors
// as Estimate for bodies it reads to the end.
func PrefixKey(body []byte, path string, n int) (uint64, error) {
	if n <= 0 {
		n = math.MaxInt
	}
	sh, ok := shapeOf(path)
	if !ok {
		return 0, ErrUnsupportedPath
	}
	t := tally{prefix: prefixHash{on: true, left: n, h: fnvOffset}, ordered: true}
	if err := t.walkOrdered(body, sh); err != nil {
		return 0, err
	}
	return t.prefix.h, nil
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// prefixHash is PrefixKey's state inside a tally.
type prefixHash struct {
	on   bool
	h    uint64
	left int // bytes of text still to hash
}

func (p *prefixHash) full() bool { return p.on && p.left <= 0 }

func (p *prefixHash) byte(b byte) {
	p.h = (p.h ^ uint64(b)) * fnvPrime
}

// text hashes the decoded characters of a JSON string body.
func (p *prefixHash) text(s []byte) {
	for i := 0; i < len(s) && p.left > 0; {
		c := s[i]
		if c != '\\' {
			p.byte(c)
			p.left--
			i++
			continue
		}
		r, w := jsonraw.DecodeEscape(s[i:])
		if w == 0 {
			return // malformed; the walk rejects the body
		}
		i += w
		var buf [utf8.UTFMax]byte
		for _, b := range buf[:utf8.EncodeRune(buf[:], r)] {
			p.byte(b)
			p.left--
		}
	}
}

// id hashes a token id as 4 little-endian bytes.
func (p *prefixHash) id(v uint32) {
	for k := 0; k < 4; k++ {
		p.byte(byte(v >> (8 * k)))
	}
	p.left -= 4
}

// raw hashes s and a separator without using up the budget.
func (p *prefixHash) raw(s []byte, sep byte) {
	if p.full() {
		return
	}
	for _, b := range s {
		p.byte(b)
	}
	p.byte(sep)
}

// separate marks the end of a text.
func (p *prefixHash) separate() {
	if p.on && !p.full() {
		p.byte(recordSeparator)
	}
}
