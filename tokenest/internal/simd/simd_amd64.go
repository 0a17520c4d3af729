//go:build amd64 && !purego

package simd

// Available reports whether the kernels may be called: the CPU has AVX2
// and POPCNT, and the operating system saves the YMM registers. Tests set it to false
// to run the pure-Go paths on the same machine.
var Available = hasAVX2()

// Available512 reports whether Classify and StringBlocks512 may be
// called: Available, and the CPU has AVX-512 F and BW, and the operating
// system saves the opmask and ZMM registers, and the build does not have
// the noavx512 tag. Tests set it to false to run the AVX2 path.
var Available512 = Available && avx512Allowed && hasAVX512()

// AvailablePEXT reports whether Compress may be called: the CPU has
// BMI2's PEXT, and runs it in hardware (not AMD's and Hygon's before
// family 0x19, Zen 3, which run it in microcode at tens of cycles an
// instruction). Tests set it to false to run the pure-Go compaction.
var AvailablePEXT = hasFastPEXT()

func hasFastPEXT() bool {
	maxLeaf, vendor1, vendor3, vendor2 := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	if _, ebx7, _, _ := cpuid(7, 0); ebx7&(1<<8) == 0 { // BMI2
		return false
	}
	amd := vendor1 == 0x68747541 && vendor2 == 0x69746e65 && vendor3 == 0x444d4163   // "AuthenticAMD"
	hygon := vendor1 == 0x6f677948 && vendor2 == 0x6e65476e && vendor3 == 0x656e6975 // "HygonGenuine"
	if !amd && !hygon {
		return true
	}
	eax1, _, _, _ := cpuid(1, 0)
	family := eax1 >> 8 & 0xF
	if family == 0xF {
		family += eax1 >> 20 & 0xFF
	}
	return family >= 0x19
}

// Compress replaces each of the n words from p by the bits of it that keep
// selects, packed towards bit 0, with zeros above them (PEXT; see
// AvailablePEXT).
//
//go:noescape
func Compress(p *uint64, n int, keep uint64)

// Deposit returns the low bits of x placed, in order, at the bits that
// mask sets, with zeros elsewhere (PDEP; see AvailablePEXT): the inverse
// of Compress's packing, taking a bit's place among the kept bits back to
// its place among all.
//
//go:noescape
func Deposit(x, mask uint64) uint64

// Escapes3 decodes JSON \u escapes of characters of three UTF-8 bytes
// (U+0800 to U+FFFF but the surrogates: the bulk of a string sent with
// every non-ASCII character escaped) from the n bytes at src into their
// UTF-8 at dst, which has room bytes, and returns the bytes read and
// written (6 and 3 an escape). It reads rounds of four six-byte places
// while src has 28 bytes and dst 22 left (a round's loads and stores reach
// that far), and stops at the first place that holds no such escape. See
// Available.
//
//go:noescape
func Escapes3(src *byte, n int, dst *byte, room int) (read, written int)

// ForcePEXT sets AvailablePEXT to on, if the machine has a fast PEXT, and
// returns the value it had.
func ForcePEXT(on bool) bool {
	prev := AvailablePEXT
	AvailablePEXT = on && hasFastPEXT()
	return prev
}

func hasAVX2() bool {
	_, _, ecx1, _ := cpuid(1, 0)
	const popcnt, osxsave, avx = 1 << 23, 1 << 27, 1 << 28
	if ecx1&popcnt == 0 || ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if eax, _ := xgetbv(); eax&6 != 6 { // XMM and YMM state enabled
		return false
	}
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}

func hasAVX512() bool {
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx512f, avx512bw = 1 << 16, 1 << 30
	if ebx7&avx512f == 0 || ebx7&avx512bw == 0 {
		return false
	}
	eax, _ := xgetbv()
	return eax&0xE6 == 0xE6 // XMM, YMM, opmask, ZMM 0–15 upper halves, ZMM 16–31
}

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// Planes sets out[j] to bit j of each of the 64 bytes at p (bit k of
// out[j]: byte k).
//
//go:noescape
func Planes(p *[64]byte, out *[8]uint64)

// StringBlocks counts the characters of a JSON string's body from p, n
// bytes of which may be read, 64 bytes at a time: the blocks with no quote
// or control byte that is not escaped and no escape but two-byte ones
// (\n, \", …), each counted as jsonraw's CountString counts (every byte
// that is not a UTF-8 continuation byte, less the escaped bytes). carry is
// 1 when the first byte is escaped by a backslash before p. It stops
// before the first block that is not such a block, or when fewer than 64
// bytes are left, and returns the bytes it counted (a multiple of 64), the
// characters, the carry into the next block, and that block's bitmaps (bit
// k: byte k) of quotes and control bytes, of backslashes and of UTF-8
// continuation bytes (0x80–0xBF), all zero when fewer than 64 bytes are
// left.
//
//go:noescape
func StringBlocks(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64)

// StringBlocks512 is StringBlocks with AVX-512 (see Available512).
//
//go:noescape
func StringBlocks512(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64)

// Classify sets the masks of the 64 bytes at p (see Masks) in out. It
// reads the 65th and 66th bytes too, as the successors of the last ones.
//
//go:noescape
func Classify(p *[72]byte, out *Masks)

// Force sets Available to on, if the machine has the kernels, and
// Available512 and AvailablePEXT with it, and returns the value Available had: tests run
// the pure-Go paths with defer simd.Force(simd.Force(false)).
func Force(on bool) bool {
	prev := Available
	Available = on && hasAVX2()
	Available512 = Available && avx512Allowed && hasAVX512()
	AvailablePEXT = on && hasFastPEXT()
	return prev
}

// Force512 sets Available512 to on, if Available and the machine has
// AVX-512, and returns the value it had: tests run the AVX2 path with
// defer simd.Force512(simd.Force512(false)).
func Force512(on bool) bool {
	prev := Available512
	Available512 = on && Available && avx512Allowed && hasAVX512()
	return prev
}
