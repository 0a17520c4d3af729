//go:build amd64 && !purego && !noavx512

package simd

// avx512Allowed is false under the noavx512 build tag, which keeps the
// AVX2 kernels on a machine with AVX-512 (make test runs the tokenest
// suite so too).
const avx512Allowed = true
