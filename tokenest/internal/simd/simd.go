// Package simd holds the few vector kernels of the estimator: amd64
// assembly (AVX2) for the two loops that dominate its time natively, the
// bit-plane transpose of the block reader and the scan of a JSON string's
// plain stretches and two-byte escapes. Each kernel has a pure-Go twin in the package that uses
// it, which is what runs elsewhere (wasm, where the filter runs, other
// architectures), on amd64 machines without AVX2, and under the purego
// build tag; the tests check that both give identical results.
//
// Callers test Available before calling a kernel: elsewhere the kernels are
// stubs that panic, and Available is a constant false there, so the
// compiler drops the calls.
package simd
