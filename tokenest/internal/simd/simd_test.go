package simd

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
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
	if !Available512 {
		return
	}
	d, c, o, s, b, n = StringBlocks512(first, len(p), carry)
	if d != wd || c != wc || o != wo || s != ws || b != wb || n != wn {
		t.Fatalf("StringBlocks512(%q, %d) = %d %d %d %x %x %x, want %d %d %d %x %x %x",
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
		if Available512 {
			var w [72]byte
			copy(w[:], b)
			checkClassify(t, &w)
		}
		checkBlocks(t, b, 0)
		checkBlocks(t, b, 1)
	})
}

// classifyRef is the definition of Classify, byte by byte.
func classifyRef(p *[72]byte) (m Masks) {
	for k, c := range p[:64] {
		next, third := p[k+1], p[k+2]
		set := func(mask *uint64, on bool) {
			if on {
				*mask |= 1 << k
			}
		}
		set(&m.Letter, c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
		set(&m.Upper, c >= 'A' && c <= 'Z')
		set(&m.Digit, c >= '0' && c <= '9')
		set(&m.Ctrl, c < 0x20)
		set(&m.Newline, c == '\n' || c == '\r')
		set(&m.Blank, c == '\t' || c == '\v' || c == '\f')
		set(&m.Tab, c == '\t')
		set(&m.Space, c == ' ')
		set(&m.Quote, c == '"')
		set(&m.Backslash, c == '\\')
		set(&m.Slash, c == '/')
		set(&m.High, c >= 0x80)
		set(&m.Cont, c >= 0x80 && c < 0xC0)
		set(&m.Lead, c >= 0xE0 && c < 0xF0)
		set(&m.Han, c >= 0xE4 && c <= 0xE9 && !(c == 0xE4 && next == 0xB7) || c == 0xE3 && next >= 0x90)
		set(&m.NR, c == 'n' || c == 'r')
		set(&m.TF, c == 't' || c == 'f')
		set(&m.T, c == 't')
		set(&m.B, c == 'b')
		set(&m.Kana, c == 0xE3 && (next == 0x81 && third != 0x80 ||
			next == 0x82 && (third < 0x97 || third > 0x9C) && third != 0xA0 || next == 0x83 && third != 0xBB))
		set(&m.Hangul, c == 0xEB || c == 0xEC || c == 0xEA && next >= 0xB0 || c == 0xED && next < 0x9E)
	}
	if m.Backslash == 0 {
		m.Slash, m.NR, m.TF, m.T, m.B = 0, 0, 0, 0, 0
	}
	return m
}

func checkClassify(t *testing.T, p *[72]byte) {
	t.Helper()
	got := Masks{Cont: 1, Lead: 1, Han: 1, Slash: 1, NR: 1, TF: 1, T: 1, B: 1, Kana: 1, Hangul: 1} // not left as they were
	Classify(p, &got)
	if want := classifyRef(p); got != want {
		t.Fatalf("Classify(% x) = %+v, want %+v", p[:], got, want)
	}
}

// TestClassify checks Classify against its definition: every pair of
// byte values (a byte and its successor) at every position, and random
// windows.
func TestClassify(t *testing.T) {
	if !Available512 {
		t.Skip("no AVX-512 kernel on this machine or build")
	}
	var p [72]byte
	for v := range 256 {
		for w := range 256 {
			k := (v*7 + w) % 64
			p = [72]byte{}
			p[k], p[k+1] = byte(v), byte(w)
			checkClassify(t, &p)
		}
	}
	// Kana judges a byte by the two after it: every third byte after 0xE3
	// and each second byte near 0x81–0x83.
	for w := 0x7F; w <= 0x84; w++ {
		for x := range 256 {
			k := (w + x) % 64
			p = [72]byte{}
			p[k], p[k+1], p[k+2] = 0xE3, byte(w), byte(x)
			checkClassify(t, &p)
		}
	}
	const special = "\"\\/nrtfb \t\n\r\v\f\x00\x1f09AZaz\x80\xbf\xc0\xe0\xe3\xe4\xe9\xea\xef\xf0\x90\xb7" +
		"\x81\x82\x83\x97\x9c\x9d\x9e\xa0\xb0\xbb\xeb\xec\xed"
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		for k := range p {
			p[k] = byte(rng.Uint32())
			if rng.IntN(2) == 0 {
				p[k] = special[rng.IntN(len(special))]
			}
		}
		checkClassify(t, &p)
	}
}

// TestMasksLayout checks the field offsets the assembly writes.
func TestMasksLayout(t *testing.T) {
	var m Masks
	fields := []*uint64{&m.Letter, &m.Upper, &m.Digit, &m.Ctrl, &m.Newline, &m.Blank, &m.Tab, &m.Space,
		&m.Quote, &m.Backslash, &m.Slash, &m.High, &m.Cont, &m.Lead, &m.Han, &m.NR, &m.TF, &m.T, &m.B, &m.Kana, &m.Hangul}
	if len(fields)*8 != int(unsafe.Sizeof(m)) {
		t.Fatalf("Masks has %d bytes, the list %d fields", unsafe.Sizeof(m), len(fields))
	}
	for i, f := range fields {
		if off := uintptr(unsafe.Pointer(f)) - uintptr(unsafe.Pointer(&m)); off != uintptr(8*i) {
			t.Errorf("field %d at offset %d, the assembly writes it at %d", i, off, 8*i)
		}
	}
}

// compressRef is the definition of Compress for one word, bit by bit.
func compressRef(x, keep uint64) (out uint64) {
	k := 0
	for i := range 64 {
		if keep>>i&1 != 0 {
			out |= (x >> i & 1) << k
			k++
		}
	}
	return out
}

func TestCompress(t *testing.T) {
	if !AvailablePEXT {
		t.Skip("no fast PEXT on this machine or build")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		var p, want [27]uint64              // unescape compacts up to 25
		keep := rng.Uint64() | rng.Uint64() // mostly kept, as escapes are dropped
		if rng.IntN(4) == 0 {
			keep = ^uint64(0) << rng.IntN(64)
		}
		n := rng.IntN(len(p) + 1)
		for i := range p {
			p[i] = rng.Uint64()
			want[i] = p[i]
			if i < n {
				want[i] = compressRef(p[i], keep)
			}
		}
		Compress(&p[0], n, keep)
		if p != want {
			t.Fatalf("keep %#x n %d: %#x, want %#x", keep, n, p, want)
		}
	}
}

// TestDeposit checks Deposit against its definition, bit by bit, and
// that it undoes Compress's packing of the kept bits.
func TestDeposit(t *testing.T) {
	if !AvailablePEXT {
		t.Skip("no fast PEXT on this machine or build")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10000 {
		x, mask := rng.Uint64(), rng.Uint64()|rng.Uint64()
		if rng.IntN(4) == 0 {
			mask = ^uint64(0) << rng.IntN(64)
		}
		var want uint64
		k := 0
		for i := range 64 {
			if mask>>i&1 != 0 {
				want |= (x >> k & 1) << i
				k++
			}
		}
		if got := Deposit(x, mask); got != want {
			t.Fatalf("x %#x mask %#x: %#x, want %#x", x, mask, got, want)
		}
		if got := compressRef(Deposit(x, mask), mask); got != x&(1<<k-1) {
			t.Fatalf("x %#x mask %#x: compress(deposit) %#x, want %#x", x, mask, got, x&(1<<k-1))
		}
	}
}

// escapes3Ref is the definition of Escapes3: rounds of four places while
// src has 28 bytes and dst 22 left, up to the first place that is not a \u
// escape of a character of three UTF-8 bytes.
func escapes3Ref(src []byte, room int) (read int, out []byte) {
	for len(src)-read >= 28 && room-len(out) >= 22 {
		for range 4 {
			e := src[read:]
			if e[0] != '\\' || e[1] != 'u' {
				return read, out
			}
			v, err := strconv.ParseUint(string(e[2:6]), 16, 32)
			if err != nil || v < 0x800 || v >= 0xD800 && v < 0xE000 {
				return read, out
			}
			out = utf8.AppendRune(out, rune(v))
			read += 6
		}
	}
	return read, out
}

// checkEscapes3 runs Escapes3 on src with room bytes of dst, against its
// definition, and checks that it stores nothing past dst's room.
func checkEscapes3(t *testing.T, src []byte, room int) {
	t.Helper()
	dst := make([]byte, room+32)
	for k := range dst {
		dst[k] = 0xA5
	}
	var p *byte
	if len(src) > 0 {
		p = &src[0]
	}
	read, written := Escapes3(p, len(src), &dst[0], room)
	wantRead, want := escapes3Ref(src, room)
	if read != wantRead || written != len(want) || string(dst[:written]) != string(want) {
		t.Fatalf("Escapes3(%q, room %d) = %d, %d, % x; want %d, %d, % x", src, room, read, written, dst[:written], wantRead, len(want), want)
	}
	for k := room; k < len(dst); k++ {
		if dst[k] != 0xA5 {
			t.Fatalf("Escapes3(%q, room %d) stored at dst[%d], past its room", src, room, k)
		}
	}
}

// escape writes the \u escape of v, its hex digits upper case if upper.
func escape(v int, upper bool) string {
	if upper {
		return fmt.Sprintf(`\u%04X`, v)
	}
	return fmt.Sprintf(`\u%04x`, v)
}

// TestEscapes3 checks Escapes3 against its definition: every \u value in
// each of a round's four places, in both cases; every byte value at every
// byte of a round; runs of escapes ended in each way, with room and source
// lengths around a round's limits.
func TestEscapes3(t *testing.T) {
	if !Available {
		t.Skip("no AVX2 kernels on this machine or build")
	}
	const good = `\u4f60`
	for v := range 0x10000 {
		for place := range 4 {
			for _, upper := range []bool{false, true} {
				src := []byte(strings.Repeat(good, place) + escape(v, upper) + strings.Repeat(good, 3-place) + "tail")
				checkEscapes3(t, src, 64)
			}
		}
	}
	base := []byte(strings.Repeat(`\u4F60\uFFFF\u0800\uE000`, 2) + "tail")
	for k := range 24 {
		for c := range 256 {
			src := append([]byte(nil), base...)
			src[k] = byte(c)
			checkEscapes3(t, src, 64)
		}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	enders := []string{`\u07ff`, `\u0080`, `\ud800`, `\udfff`, `\uD83D\uDE00`, `\n`, `\"`, `"`, "a", "\xe4\xbd\xa0", `\u4f6`, `\U4f60`, `/u4f60`, `\\u4f60`, `\u4g60`, `\u4f6:`, `\u 4f6`}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(escape(0x800+rng.IntN(0xF800), rng.IntN(2) == 0))
			if b.Len() > 0 && rng.IntN(4) == 0 {
				b.WriteString(escape(0xD800+rng.IntN(0x800), false)) // surrogate: not taken
			}
		}
		b.WriteString(enders[rng.IntN(len(enders))])
		b.WriteString(strings.Repeat("x", rng.IntN(30)))
		src := []byte(b.String())
		src = src[:rng.IntN(len(src)+1)]
		checkEscapes3(t, src, rng.IntN(80))
	}
}

func FuzzEscapes3(f *testing.F) {
	f.Add([]byte(`\u4f60\u597D\uffff\u0800\u4f60\u597d"tail of the string`), uint8(40))
	f.Add([]byte(`\u4f60\ud83d\ude00\u4f60\u597d\u4f60\u597d\u4f60\u597d`), uint8(22))
	f.Fuzz(func(t *testing.T, src []byte, room uint8) {
		if !Available {
			t.Skip("no AVX2 kernels on this machine or build")
		}
		checkEscapes3(t, src, int(room))
	})
}
