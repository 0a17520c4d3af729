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

// Byte constants for StringBlocks, 32 of each (loaded with VEX
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

// Constants for StringBlocks' check of escapes: a byte is one of the
// characters a two-byte escape may name (" \ / b f n r t) when the entry
// of its low nibble in esclo and that of its high nibble in eschi share a
// bit (high nibbles 2, 5, 6, 7 are bits 0–3; both tables twice, one per
// 128-bit lane, as VPSHUFB looks up within lanes).
DATA nibble<>+0(SB)/8, $0x0F0F0F0F0F0F0F0F
DATA nibble<>+8(SB)/8, $0x0F0F0F0F0F0F0F0F
DATA nibble<>+16(SB)/8, $0x0F0F0F0F0F0F0F0F
DATA nibble<>+24(SB)/8, $0x0F0F0F0F0F0F0F0F
GLOBL nibble<>(SB), (NOPTR+RODATA), $32
// low nibble 2: '"' 'b' 'r'; 4: 't'; 6: 'f'; C: '\'; E: 'n'; F: '/'
DATA esclo<>+0(SB)/8, $0x00040008000D0000
DATA esclo<>+8(SB)/8, $0x0104000200000000
DATA esclo<>+16(SB)/8, $0x00040008000D0000
DATA esclo<>+24(SB)/8, $0x0104000200000000
GLOBL esclo<>(SB), (NOPTR+RODATA), $32
DATA eschi<>+0(SB)/8, $0x0804020000010000
DATA eschi<>+8(SB)/8, $0x0000000000000000
DATA eschi<>+16(SB)/8, $0x0804020000010000
DATA eschi<>+24(SB)/8, $0x0000000000000000
GLOBL eschi<>(SB), (NOPTR+RODATA), $32

// func StringBlocks(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64)
//
// Registers: SI the block, CX the bytes left, DX the carry, DI the start,
// R11 the characters, R8/R9/R10 the block's stop, backslash and
// continuation masks, Y8–Y12 the byte constants above.
TEXT ·StringBlocks(SB), NOSPLIT, $0-72
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ carry+16(FP), DX
	MOVQ SI, DI
	XORQ R11, R11
	VMOVDQU quotes<>(SB), Y8
	VMOVDQU ctrlmax<>(SB), Y9
	VMOVDQU bslashes<>(SB), Y10
	VMOVDQU highs2<>(SB), Y11
	VMOVDQU high1<>(SB), Y12

loop:
	CMPQ CX, $64
	JLT short
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1

	// quotes and control bytes
	VPCMPEQB Y8, Y0, Y2
	VPCMPEQB Y8, Y1, Y3
	VPMINUB Y9, Y0, Y4
	VPMINUB Y9, Y1, Y5
	VPCMPEQB Y4, Y0, Y4
	VPCMPEQB Y5, Y1, Y5
	VPOR Y4, Y2, Y2
	VPOR Y5, Y3, Y3
	MASK64(R8)

	// backslashes
	VPCMPEQB Y10, Y0, Y2
	VPCMPEQB Y10, Y1, Y3
	MASK64(R9)

	// continuation bytes
	VPAND Y11, Y0, Y2
	VPAND Y11, Y1, Y3
	VPCMPEQB Y12, Y2, Y2
	VPCMPEQB Y12, Y3, Y3
	MASK64(R10)

	MOVQ R9, AX
	ORQ DX, AX
	JNZ escapes
	TESTQ R8, R8
	JNZ stopped
	POPCNTQ R10, AX
	ADDQ $64, R11
	SUBQ AX, R11
	ADDQ $64, SI
	SUBQ $64, CX
	JMP loop

escapes:
	// The escaped bytes, as jsonraw.EscapedBytes finds them, of the
	// backslashes less one escaped by the last block (AX: bs).
	MOVQ DX, AX
	NOTQ AX
	ANDQ R9, AX
	MOVQ AX, BX
	SHLQ $1, BX                    // BX: follows
	MOVQ BX, R13
	NOTQ R13
	ANDQ AX, R13
	MOVQ $0xAAAAAAAAAAAAAAAA, R12
	ANDQ R12, R13                  // R13: odd starts
	ADDQ AX, R13                   // even ends; CF: a backslash escapes the next block
	SETCS AL
	MOVBQZX AL, AX                 // AX: the carry out
	SHLQ $1, R13
	MOVQ $0x5555555555555555, R12
	XORQ R12, R13
	ANDQ BX, R13
	ORQ DX, R13                    // R13: escaped

	// a quote or control byte that is not escaped ends the run
	MOVQ R13, BX
	NOTQ BX
	ANDQ R8, BX
	JNZ stopped

	// so does an escape other than a two-byte one (\u, or an error)
	VMOVDQU nibble<>(SB), Y7
	VPAND Y7, Y0, Y2
	VPAND Y7, Y1, Y3
	VPSRLW $4, Y0, Y4
	VPSRLW $4, Y1, Y5
	VPAND Y7, Y4, Y4
	VPAND Y7, Y5, Y5
	VMOVDQU esclo<>(SB), Y6
	VPSHUFB Y2, Y6, Y2
	VPSHUFB Y3, Y6, Y3
	VMOVDQU eschi<>(SB), Y6
	VPSHUFB Y4, Y6, Y4
	VPSHUFB Y5, Y6, Y5
	VPAND Y4, Y2, Y2
	VPAND Y5, Y3, Y3
	VPXOR Y6, Y6, Y6
	VPCMPEQB Y6, Y2, Y2
	VPCMPEQB Y6, Y3, Y3
	MASK64(R12)                    // R12: bytes no two-byte escape names
	ANDQ R13, R12
	JNZ stopped

	POPCNTQ R10, BX
	SUBQ BX, R11
	POPCNTQ R13, BX
	SUBQ BX, R11
	ADDQ $64, R11
	MOVQ AX, DX
	ADDQ $64, SI
	SUBQ $64, CX
	JMP loop

short:
	XORQ R8, R8
	XORQ R9, R9
	XORQ R10, R10

stopped:
	SUBQ DI, SI
	MOVQ SI, done+24(FP)
	MOVQ R11, chars+32(FP)
	MOVQ DX, carryOut+40(FP)
	MOVQ R8, stop+48(FP)
	MOVQ R9, bslash+56(FP)
	MOVQ R10, cont+64(FP)
	VZEROUPPER
	RET
