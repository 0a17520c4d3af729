package simd

import (
	"math/rand/v2"
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

// stringMasksRef is the definition of StringMasks, byte by byte.
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

func check(t *testing.T, p *[64]byte) {
	t.Helper()
	var got [8]uint64
	Planes(p, &got)
	if want := planesRef(p); got != want {
		t.Fatalf("Planes(%q) = %x, want %x", p[:], got, want)
	}
	s, b, c := StringMasks(p)
	if ws, wb, wc := stringMasksRef(p); s != ws || b != wb || c != wc {
		t.Fatalf("StringMasks(%q) = %x %x %x, want %x %x %x", p[:], s, b, c, ws, wb, wc)
	}
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
	})
}
