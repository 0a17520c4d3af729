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

// BenchmarkStringBlocks reads 4 KiB of plain text with a \n escape every
// 32 bytes.
func BenchmarkStringBlocks(b *testing.B) {
	if !Available {
		b.Skip("no kernels")
	}
	p := make([]byte, 4096)
	for i := range p {
		switch i % 32 {
		case 30:
			p[i] = '\\'
		case 31:
			p[i] = 'n'
		default:
			p[i] = 'a'
		}
	}
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if done, _, _, _, _, _ := StringBlocks(&p[0], len(p), 0); done != len(p) {
			b.Fatalf("stopped at %d", done)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	if !Available512 {
		b.Skip("no AVX-512 kernel")
	}
	var p [72]byte
	var out Masks
	b.SetBytes(64)
	for b.Loop() {
		Classify(&p, &out)
	}
}

func BenchmarkClassifyCJK(b *testing.B) {
	if !Available512 {
		b.Skip("no AVX-512 kernel")
	}
	var p [72]byte
	copy(p[:], "这条命令开始一个新的事务。如果声明了隔离级别或者读写模式， 那么新事务就使用这个特性\\n")
	var out Masks
	b.SetBytes(64)
	for b.Loop() {
		Classify(&p, &out)
	}
}
