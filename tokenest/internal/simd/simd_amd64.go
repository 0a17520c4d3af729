//go:build amd64 && !purego

package simd

// Available reports whether the kernels may be called: the CPU has AVX2
// and the operating system saves the YMM registers. Tests set it to false
// to run the pure-Go paths on the same machine.
var Available = hasAVX2()

func hasAVX2() bool {
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
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

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// Planes sets out[j] to bit j of each of the 64 bytes at p (bit k of
// out[j]: byte k).
//
//go:noescape
func Planes(p *[64]byte, out *[8]uint64)

// StringMasks describes the 64 bytes at p as a JSON string's body:
// bitmaps (bit k: byte k) of the bytes that stop a plain stretch (quotes
// and control bytes), of the backslashes, and of the UTF-8 continuation
// bytes (0x80–0xBF).
//
//go:noescape
func StringMasks(p *[64]byte) (stop, bslash, cont uint64)

// Force sets Available to on, if the machine has the kernels, and returns
// the value it had: tests run the pure-Go paths with
// defer simd.Force(simd.Force(false)).
func Force(on bool) bool {
	prev := Available
	Available = on && hasAVX2()
	return prev
}
