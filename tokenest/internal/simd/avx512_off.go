//go:build amd64 && !purego && noavx512

package simd

// avx512Allowed is false under the noavx512 build tag (see avx512_on.go).
const avx512Allowed = false
