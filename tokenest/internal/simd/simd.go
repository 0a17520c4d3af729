// Package simd holds the few vector kernels of the estimator: amd64
// assembly for the loops that dominate its time natively. With AVX2, the
// bit-plane transpose of the block reader (Planes) and the scan of a JSON
// string's plain stretches and two-byte escapes (StringBlocks), and the
// decoding of runs of \u escapes of three-byte characters (Escapes3); with
// AVX-512 (F and BW), the block reader's byte classes straight from
// compares into opmask registers (Classify), in place of the transpose
// and the arithmetic on its planes; with BMI2, the compaction of the
// bitmaps by PEXT (Compress) and its inverse for one word (Deposit). Each
// kernel has a pure-Go twin in the package that uses it, which is what
// runs elsewhere (wasm, where the filter runs, other architectures), on
// amd64 machines without AVX2, and under the purego build tag; the tests
// check that all paths give identical results.
//
// Callers test Available (Available512 for Classify, AvailablePEXT for
// Compress and Deposit) before calling a kernel: elsewhere the kernels are
// stubs that panic, and the three are constant false there, so the
// compiler drops the calls.
package simd

// Masks are the byte classes of a 64-byte window that Classify sets: bit
// k of each describes byte k. The field order is the assembly's
// (TestMasksLayout).
type Masks struct {
	Letter, Upper, Digit uint64 // ASCII letters, capitals, digits
	Ctrl                 uint64 // 0x00–0x1F
	Newline              uint64 // \n \r
	Blank                uint64 // \t \v \f
	Tab                  uint64 // \t
	Space                uint64 // ' '
	Quote                uint64 // "
	Backslash            uint64 // \
	Slash                uint64 // / (see NR)
	High                 uint64 // 0x80–0xFF
	Cont                 uint64 // 0x80–0xBF
	Lead                 uint64 // 0xE0–0xEF
	// Han: lead bytes of Han ideographs of U+3400–U+9FFF, judged from
	// the byte after: 0xE4–0xE9 but 0xE4 before 0xB7 (U+4DC0–U+4DFF), and
	// 0xE3 before a byte ≥ 0x90.
	Han uint64
	// Letters that name an escape after a backslash: n or r, t or f, t, b.
	// These four and Slash are zero when Backslash is.
	NR, TF, T, B uint64
	// Kana: lead bytes of kana letters, judged from the two bytes after:
	// 0xE3 before 0x81–0x83 (U+3040–U+30FF) but U+3040 (0x81 0x80),
	// U+3097–U+309C (0x82 0x97–0x9C), U+30A0 (0x82 0xA0) and U+30FB (0x83
	// 0xBB). Hangul: lead bytes of Hangul syllables of U+AC00–U+D77F,
	// judged from the byte after: 0xEB, 0xEC, 0xEA before a byte ≥ 0xB0,
	// 0xED before a byte < 0x9E.
	Kana, Hangul uint64
}
