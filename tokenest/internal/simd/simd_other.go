//go:build !amd64 || purego

package simd

// Available is false: there are no kernels on this architecture or in
// the purego build.
const Available = false

// Planes is not available here (see Available).
func Planes(p *[64]byte, out *[8]uint64) { panic("simd: no kernels") }

// StringBlocks is not available here (see Available).
func StringBlocks(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64) {
	panic("simd: no kernels")
}

// Force does nothing here: there are no kernels to turn on or off.
func Force(on bool) bool { return false }
