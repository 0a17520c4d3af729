package simd

import "testing"

func BenchmarkPlanes(b *testing.B) {
	if !Available {
		b.Skip("no kernels")
	}
	var p [64]byte
	var out [8]uint64
	b.SetBytes(64)
	for b.Loop() {
		Planes(&p, &out)
	}
}

func BenchmarkStringMasks(b *testing.B) {
	if !Available {
		b.Skip("no kernels")
	}
	var p [64]byte
	b.SetBytes(64)
	for b.Loop() {
		StringMasks(&p)
	}
}
