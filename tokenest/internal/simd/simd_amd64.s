//go:build amd64 && !purego

#include "textflag.h"

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// PLANE stores the top bits of the bytes of Y2 (low 32 bytes) and Y3 (high
// 32) as one 64-bit bitmap at off(DI).
#define PLANE(off) \
	VPMOVMSKB Y2, AX \
	VPMOVMSKB Y3, BX \
	SHLQ $32, BX \
	ORQ BX, AX \
	MOVQ AX, off(DI)

// func Planes(p *[64]byte, out *[8]uint64)
//
// Plane 7 is the bytes' top bits; doubling every byte (VPADDB of itself,
// no carry between bytes) moves bit 6 to the top, and so on down.
TEXT ·Planes(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ out+8(FP), DI
	VMOVDQU 0(SI), Y2
	VMOVDQU 32(SI), Y3
	PLANE(56)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(48)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(40)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(32)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(24)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(16)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(8)
	VPADDB Y2, Y2, Y2
	VPADDB Y3, Y3, Y3
	PLANE(0)
	VZEROUPPER
	RET

// Byte constants for StringMasks, 32 of each (loaded with VEX
// instructions only: mixing in a legacy SSE one, such as MOVQ to an X
// register, costs a state transition of hundreds of nanoseconds on some
// virtual machines).
DATA quotes<>+0(SB)/8, $0x2222222222222222
DATA quotes<>+8(SB)/8, $0x2222222222222222
DATA quotes<>+16(SB)/8, $0x2222222222222222
DATA quotes<>+24(SB)/8, $0x2222222222222222
GLOBL quotes<>(SB), (NOPTR+RODATA), $32
DATA ctrlmax<>+0(SB)/8, $0x1F1F1F1F1F1F1F1F
DATA ctrlmax<>+8(SB)/8, $0x1F1F1F1F1F1F1F1F
DATA ctrlmax<>+16(SB)/8, $0x1F1F1F1F1F1F1F1F
DATA ctrlmax<>+24(SB)/8, $0x1F1F1F1F1F1F1F1F
GLOBL ctrlmax<>(SB), (NOPTR+RODATA), $32
DATA bslashes<>+0(SB)/8, $0x5C5C5C5C5C5C5C5C
DATA bslashes<>+8(SB)/8, $0x5C5C5C5C5C5C5C5C
DATA bslashes<>+16(SB)/8, $0x5C5C5C5C5C5C5C5C
DATA bslashes<>+24(SB)/8, $0x5C5C5C5C5C5C5C5C
GLOBL bslashes<>(SB), (NOPTR+RODATA), $32
DATA highs2<>+0(SB)/8, $0xC0C0C0C0C0C0C0C0
DATA highs2<>+8(SB)/8, $0xC0C0C0C0C0C0C0C0
DATA highs2<>+16(SB)/8, $0xC0C0C0C0C0C0C0C0
DATA highs2<>+24(SB)/8, $0xC0C0C0C0C0C0C0C0
GLOBL highs2<>(SB), (NOPTR+RODATA), $32
DATA high1<>+0(SB)/8, $0x8080808080808080
DATA high1<>+8(SB)/8, $0x8080808080808080
DATA high1<>+16(SB)/8, $0x8080808080808080
DATA high1<>+24(SB)/8, $0x8080808080808080
GLOBL high1<>(SB), (NOPTR+RODATA), $32

// MASK64 combines the byte masks Y2 (low half) and Y3 (high half) into a
// 64-bit bitmap in R.
#define MASK64(R) \
	VPMOVMSKB Y2, R \
	VPMOVMSKB Y3, BX \
	SHLQ $32, BX \
	ORQ BX, R

// func StringMasks(p *[64]byte) (stop, bslash, cont uint64)
TEXT ·StringMasks(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1

	// quotes, and bytes ≤ 0x1F (unsigned: min(x, 0x1F) == x)
	VMOVDQU quotes<>(SB), Y4
	VMOVDQU ctrlmax<>(SB), Y5
	VPCMPEQB Y4, Y0, Y2
	VPCMPEQB Y4, Y1, Y3
	VPMINUB Y5, Y0, Y6
	VPMINUB Y5, Y1, Y7
	VPCMPEQB Y6, Y0, Y6
	VPCMPEQB Y7, Y1, Y7
	VPOR Y6, Y2, Y2
	VPOR Y7, Y3, Y3
	MASK64(CX)
	MOVQ CX, stop+8(FP)

	// backslashes
	VMOVDQU bslashes<>(SB), Y4
	VPCMPEQB Y4, Y0, Y2
	VPCMPEQB Y4, Y1, Y3
	MASK64(CX)
	MOVQ CX, bslash+16(FP)

	// continuation bytes: x & 0xC0 == 0x80
	VMOVDQU highs2<>(SB), Y4
	VMOVDQU high1<>(SB), Y5
	VPAND Y4, Y0, Y2
	VPAND Y4, Y1, Y3
	VPCMPEQB Y5, Y2, Y2
	VPCMPEQB Y5, Y3, Y3
	MASK64(CX)
	MOVQ CX, cont+24(FP)
	VZEROUPPER
	RET
