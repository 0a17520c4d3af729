package simd

import (
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// planesRef is the definition of Planes, bit by bit.
func planesRef(p *[64]byte) (out [8]uint64) {
	for k, c := range p {
		for j := range 8 {
			out[j] |= uint64(c>>j&1) << k
		}
	}
	return out
}

// stringMasksRef gives the masks StringBlocks returns for a block, byte by
// byte.
func stringMasksRef(p *[64]byte) (stop, bslash, cont uint64) {
	for k, c := range p {
		if c == '"' || c < 0x20 {
			stop |= 1 << k
		}
		if c == '\\' {
			bslash |= 1 << k
		}
		if c&0xC0 == 0x80 {
			cont |= 1 << k
		}
	}
	return
}

// stringBlocksRef is the definition of StringBlocks, byte by byte.
func stringBlocksRef(p []byte, carry uint64) (done, chars int, out, stop, bslash, cont uint64) {
	for ; len(p)-done >= 64; done += 64 {
		blk := (*[64]byte)(p[done:])
		stop, bslash, cont = stringMasksRef(blk)
		var escaped uint64
		escaping := carry == 1
		ok := true
		for k, c := range blk {
			switch {
			case escaping:
				escaped |= 1 << k
				escaping = false
				ok = ok && strings.IndexByte(`"\/bfnrt`, c) >= 0
			case c == '\\':
				escaping = true
			}
		}
		if !ok || stop&^escaped != 0 {
			return done, chars, carry, stop, bslash, cont
		}
		chars += 64 - bits.OnesCount64(cont) - bits.OnesCount64(escaped)
		carry = 0
		if escaping {
			carry = 1
		}
	}
	return done, chars, carry, 0, 0, 0
}

func checkBlocks(t *testing.T, p []byte, carry uint64) {
	t.Helper()
	var first *byte
	if len(p) > 0 {
		first = &p[0]
	}
	d, c, o, s, b, n := StringBlocks(first, len(p), carry)
	wd, wc, wo, ws, wb, wn := stringBlocksRef(p, carry)
	if d != wd || c != wc || o != wo || s != ws || b != wb || n != wn {
		t.Fatalf("StringBlocks(%q, %d) = %d %d %d %x %x %x, want %d %d %d %x %x %x",
			p, carry, d, c, o, s, b, n, wd, wc, wo, ws, wb, wn)
	}
}

func check(t *testing.T, p *[64]byte) {
	t.Helper()
	var got [8]uint64
	Planes(p, &got)
	if want := planesRef(p); got != want {
		t.Fatalf("Planes(%q) = %x, want %x", p[:], got, want)
	}
	checkBlocks(t, p[:], 0)
	checkBlocks(t, p[:], 1)
}

// TestKernels checks the kernels against their definitions: every byte
// value at every position, and random blocks biased towards the bytes the
// masks pick out.
func TestKernels(t *testing.T) {
	if !Available {
		t.Skip("no AVX2 kernels on this machine or build")
	}
	var p [64]byte
	for v := range 256 {
		for k := range 64 {
			p = [64]byte{}
			p[k] = byte(v)
			check(t, &p)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	special := []byte{'"', '\\', 0, 0x1F, 0x20, 0x7F, 0x80, 0xBF, 0xC0, 0xFF, 'a'}
	for range 20000 {
		for k := range p {
			if rng.IntN(2) == 0 {
				p[k] = special[rng.IntN(len(special))]
			} else {
				p[k] = byte(rng.Uint32())
			}
		}
		check(t, &p)
	}
	// StringBlocks over runs of blocks: mostly plain text, with escapes
	// (two-byte, \u, malformed), quotes and control bytes here and there.
	text := []byte("plain text, and more 文字 of it; ")
	rare := []string{`\n`, `\"`, `\\`, `\/`, `\t`, `\u00e9`, `\x`, `\\\`, `\`, `"`, "\x01", "\xe2\x82\xac"}
	var buf []byte
	for r := range 20000 {
		buf = buf[:0]
		for n := rng.IntN(400); len(buf) < n; {
			if rng.IntN(12) == 0 {
				buf = append(buf, rare[rng.IntN(len(rare))]...)
			} else {
				buf = append(buf, text[rng.IntN(len(text))])
			}
		}
		checkBlocks(t, buf, uint64(r&1))
	}
}

// FuzzKernels compares the kernels with their definitions on any block.
func FuzzKernels(f *testing.F) {
	f.Add([]byte(`"a\"b\\c\u00e9` + "\x01\xe4\xbd\xa0 plain text, then more of it, to fill sixty-four bytes"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !Available {
			t.Skip("no AVX2 kernels on this machine or build")
		}
		var p [64]byte
		copy(p[:], b)
		check(t, &p)
		checkBlocks(t, b, 0)
		checkBlocks(t, b, 1)
	})
}
