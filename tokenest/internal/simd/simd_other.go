//go:build !amd64 || purego

package simd

// Available is false: there are no kernels on this architecture or in
// the purego build.
const Available = false

// Available512 is false: there are no kernels on this architecture or in
// the purego build.
const Available512 = false

// AvailablePEXT is false: there is no PEXT kernel on this architecture or
// in the purego build.
const AvailablePEXT = false

// Compress is not available here (see AvailablePEXT).
func Compress(p *uint64, n int, keep uint64) { panic("simd: no kernels") }

// Deposit is not available here (see AvailablePEXT).
func Deposit(x, mask uint64) uint64 { panic("simd: no kernels") }

// Escapes3 is not available here (see Available).
func Escapes3(src *byte, n int, dst *byte, room int) (read, written int) {
	panic("simd: no kernels")
}

// ForcePEXT does nothing here: there is no kernel to turn on or off.
func ForcePEXT(on bool) bool { return false }

// Planes is not available here (see Available).
func Planes(p *[64]byte, out *[8]uint64) { panic("simd: no kernels") }

// StringBlocks is not available here (see Available).
func StringBlocks(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64) {
	panic("simd: no kernels")
}

// StringBlocks512 is not available here (see Available512).
func StringBlocks512(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64) {
	panic("simd: no kernels")
}

// Classify is not available here (see Available512).
func Classify(p *[72]byte, out *Masks) { panic("simd: no kernels") }

// Force512 does nothing here: there are no kernels to turn on or off.
func Force512(on bool) bool { return false }

// Force does nothing here: there are no kernels to turn on or off.
func Force(on bool) bool { return false }
