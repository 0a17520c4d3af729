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

// The parts StringBlocks and StringBlocks512 share, on the registers
// described at StringBlocks.
//
// STRINGSTART loads the arguments: SI the block, CX the bytes left, DX the
// carry; DI the start, R11 the characters (none yet).
#define STRINGSTART \
	MOVQ p+0(FP), SI \
	MOVQ n+8(FP), CX \
	MOVQ carry+16(FP), DX \
	MOVQ SI, DI \
	XORQ R11, R11

// PLAINBLOCK goes on at esc for a block with a backslash (R9) or a carried
// escape (DX), stops at stop for one with a quote or control byte (R8), and
// otherwise counts the block (R10: continuation bytes) and goes back to loop.
#define PLAINBLOCK(esc, stop, loop) \
	MOVQ R9, AX \
	ORQ DX, AX \
	JNZ esc \
	TESTQ R8, R8 \
	JNZ stop \
	POPCNTQ R10, AX \
	ADDQ $64, R11 \
	SUBQ AX, R11 \
	ADDQ $64, SI \
	SUBQ $64, CX \
	JMP loop

// NOMASKS clears the stop, backslash and continuation masks (fewer than 64
// bytes left).
#define NOMASKS \
	XORQ R8, R8 \
	XORQ R9, R9 \
	XORQ R10, R10

// ESCAPED sets R13 to the block's escaped bytes, as jsonraw.EscapedBytes
// finds them, of the backslashes (R9) less one escaped by the last block
// (DX), and AX to the carry into the next block; then BX to the quotes and
// control bytes (R8) that are not escaped, setting the flags (nonzero:
// the run ends here).
#define ESCAPED \
	MOVQ DX, AX \
	NOTQ AX \
	ANDQ R9, AX \
	MOVQ AX, BX \
	SHLQ $1, BX \
	MOVQ BX, R13 \
	NOTQ R13 \
	ANDQ AX, R13 \
	MOVQ $0xAAAAAAAAAAAAAAAA, R12 \
	ANDQ R12, R13 \
	ADDQ AX, R13 \
	SETCS AL \
	MOVBQZX AL, AX \
	SHLQ $1, R13 \
	MOVQ $0x5555555555555555, R12 \
	XORQ R12, R13 \
	ANDQ BX, R13 \
	ORQ DX, R13 \
	MOVQ R13, BX \
	NOTQ BX \
	ANDQ R8, BX

// NEXTBLOCK counts a block with escapes (R10: continuation bytes, R13:
// escaped bytes), takes the carry out (AX) and moves to the next block.
#define NEXTBLOCK \
	POPCNTQ R10, BX \
	SUBQ BX, R11 \
	POPCNTQ R13, BX \
	SUBQ BX, R11 \
	ADDQ $64, R11 \
	MOVQ AX, DX \
	ADDQ $64, SI \
	SUBQ $64, CX

// STRINGRETURN stores the results and returns.
#define STRINGRETURN \
	SUBQ DI, SI \
	MOVQ SI, done+24(FP) \
	MOVQ R11, chars+32(FP) \
	MOVQ DX, carryOut+40(FP) \
	MOVQ R8, stop+48(FP) \
	MOVQ R9, bslash+56(FP) \
	MOVQ R10, cont+64(FP) \
	VZEROUPPER \
	RET

// func StringBlocks(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64)
//
// Registers: SI the block, CX the bytes left, DX the carry, DI the start,
// R11 the characters, R8/R9/R10 the block's stop, backslash and
// continuation masks, Y8–Y12 the byte constants above.
TEXT ·StringBlocks(SB), NOSPLIT, $0-72
	STRINGSTART
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

	PLAINBLOCK(escapes, stopped, loop)

escapes:
	// The escaped bytes; a quote or control byte that is not escaped
	// ends the run
	ESCAPED
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

	NEXTBLOCK
	JMP loop

short:
	NOMASKS

stopped:
	STRINGRETURN

// ROW64 defines name<> as 64 copies of the byte in the word v (eight
// copies of it), for the AVX-512 kernel's compares.
#define ROW64(name, v) \
	DATA name<>+0(SB)/8, v \
	DATA name<>+8(SB)/8, v \
	DATA name<>+16(SB)/8, v \
	DATA name<>+24(SB)/8, v \
	DATA name<>+32(SB)/8, v \
	DATA name<>+40(SB)/8, v \
	DATA name<>+48(SB)/8, v \
	DATA name<>+56(SB)/8, v \
	GLOBL name<>(SB), (NOPTR+RODATA), $64

ROW64(b02, $0x0202020202020202)
ROW64(b03, $0x0303030303030303)
ROW64(b04, $0x0404040404040404)
ROW64(b06, $0x0606060606060606)
ROW64(b09, $0x0909090909090909)
ROW64(b0a, $0x0A0A0A0A0A0A0A0A)
ROW64(b0d, $0x0D0D0D0D0D0D0D0D)
ROW64(b1a, $0x1A1A1A1A1A1A1A1A)
ROW64(b20, $0x2020202020202020)
ROW64(b22, $0x2222222222222222)
ROW64(b2f, $0x2F2F2F2F2F2F2F2F)
ROW64(b30, $0x3030303030303030)
ROW64(b41, $0x4141414141414141)
ROW64(b5c, $0x5C5C5C5C5C5C5C5C)
ROW64(b61, $0x6161616161616161)
ROW64(b62, $0x6262626262626262)
ROW64(b66, $0x6666666666666666)
ROW64(b6e, $0x6E6E6E6E6E6E6E6E)
ROW64(b72, $0x7272727272727272)
ROW64(b74, $0x7474747474747474)
ROW64(b80, $0x8080808080808080)
ROW64(b81, $0x8181818181818181)
ROW64(b82, $0x8282828282828282)
ROW64(b83, $0x8383838383838383)
ROW64(b90, $0x9090909090909090)
ROW64(b97, $0x9797979797979797)
ROW64(b9e, $0x9E9E9E9E9E9E9E9E)
ROW64(ba0, $0xA0A0A0A0A0A0A0A0)
ROW64(bb0, $0xB0B0B0B0B0B0B0B0)
ROW64(bb7, $0xB7B7B7B7B7B7B7B7)
ROW64(bbb, $0xBBBBBBBBBBBBBBBB)
ROW64(bc0, $0xC0C0C0C0C0C0C0C0)
ROW64(be0, $0xE0E0E0E0E0E0E0E0)
ROW64(be3, $0xE3E3E3E3E3E3E3E3)
ROW64(be4, $0xE4E4E4E4E4E4E4E4)
ROW64(bea, $0xEAEAEAEAEAEAEAEA)
ROW64(beb, $0xEBEBEBEBEBEBEBEB)
ROW64(bed, $0xEDEDEDEDEDEDEDED)
ROW64(bf0, $0xF0F0F0F0F0F0F0F0)

// Offsets of the fields of Masks (TestMasksLayout checks them).
#define M_LETTER 0
#define M_UPPER 8
#define M_DIGIT 16
#define M_CTRL 24
#define M_NEWLINE 32
#define M_BLANK 40
#define M_TAB 48
#define M_SPACE 56
#define M_QUOTE 64
#define M_BACKSLASH 72
#define M_SLASH 80
#define M_HIGH 88
#define M_CONT 96
#define M_LEAD 104
#define M_HAN 112
#define M_NR 120
#define M_TF 128
#define M_T 136
#define M_B 144
#define M_KANA 152
#define M_HANGUL 160

// func Classify(p *[72]byte, out *Masks)
//
// Z0 holds bytes 0–63. Every mask is one compare (or two, or a compare
// under another's mask) into an opmask register, stored as is; the masks
// of multi-byte characters and of escapes are skipped (left as they are,
// zero) when the window has no byte ≥ 0x80 or no backslash. Comparisons:
// $0 equal, $1 less than, $5 not less than (unsigned).
TEXT ·Classify(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ out+8(FP), DI
	VMOVDQU8 0(SI), Z0

	// Bytes ≥ 0x80; of them, continuation bytes (< 0xC0) and lead bytes
	// of three-byte characters (0xE0–0xEF); Han leads: 0xE4–0xE9 but
	// 0xE4 before 0xB7, and 0xE3 before a byte ≥ 0x90 (Z1 holds bytes
	// 1–64, each byte's successor).
	VPMOVB2M Z0, K1
	KMOVQ K1, M_HIGH(DI)
	KORTESTQ K1, K1
	JNZ multibyte
	MOVQ $0, M_CONT(DI)
	MOVQ $0, M_LEAD(DI)
	MOVQ $0, M_HAN(DI)
	MOVQ $0, M_KANA(DI)
	MOVQ $0, M_HANGUL(DI)
	JMP ascii

multibyte:
	VMOVDQU8 1(SI), Z1
	VPCMPUB $1, bc0<>(SB), Z0, K1, K2
	KMOVQ K2, M_CONT(DI)
	VPCMPUB $5, be0<>(SB), Z0, K1
	VPCMPUB $1, bf0<>(SB), Z0, K1, K1
	KMOVQ K1, M_LEAD(DI)
	VPSUBB be4<>(SB), Z0, Z2
	VPCMPUB $1, b06<>(SB), Z2, K1
	VPCMPEQB be4<>(SB), Z0, K2
	VPCMPEQB bb7<>(SB), Z1, K2, K2
	KANDNQ K1, K2, K1
	VPCMPEQB be3<>(SB), Z0, K2
	VPCMPUB $5, b90<>(SB), Z1, K2, K2
	KORQ K1, K2, K1
	KMOVQ K1, M_HAN(DI)

	// Kana leads: 0xE3 before 0x81 but before 0x80 after that, before
	// 0x82 but before 0x97–0x9C or 0xA0, before 0x83 but before 0xBB (Z3
	// holds bytes 2–65, each byte's second successor); K2, 0xE3 before
	// 0x81–0x83, skips the rest where there is none (Chinese text's 0xE3
	// characters are punctuation, 0xE3 0x80).
	VPCMPEQB be3<>(SB), Z0, K2
	VPSUBB b81<>(SB), Z1, Z2
	VPCMPUB $1, b03<>(SB), Z2, K2, K2
	KORTESTQ K2, K2
	JNZ kana
	MOVQ $0, M_KANA(DI)
	JMP hangul

kana:
	VMOVDQU8 2(SI), Z3
	VPCMPEQB b81<>(SB), Z1, K2, K3
	VPCMPEQB b80<>(SB), Z3, K4
	KANDNQ K3, K4, K3
	VPCMPEQB b82<>(SB), Z1, K2, K4
	VPSUBB b97<>(SB), Z3, Z2
	VPCMPUB $1, b06<>(SB), Z2, K5
	VPCMPEQB ba0<>(SB), Z3, K6
	KORQ K5, K6, K5
	KANDNQ K4, K5, K4
	KORQ K3, K4, K3
	VPCMPEQB b83<>(SB), Z1, K2, K4
	VPCMPEQB bbb<>(SB), Z3, K5
	KANDNQ K4, K5, K4
	KORQ K3, K4, K3
	KMOVQ K3, M_KANA(DI)

hangul:
	// Hangul leads: 0xEB, 0xEC; 0xEA before a byte ≥ 0xB0; 0xED before a
	// byte < 0x9E.
	VPSUBB bea<>(SB), Z0, Z2
	VPCMPUB $1, b04<>(SB), Z2, K2
	KORTESTQ K2, K2
	JNZ syllables
	MOVQ $0, M_HANGUL(DI)
	JMP ascii

syllables:
	VPSUBB beb<>(SB), Z0, Z2
	VPCMPUB $1, b02<>(SB), Z2, K3
	VPCMPEQB bea<>(SB), Z0, K4
	VPCMPUB $5, bb0<>(SB), Z1, K4, K4
	KORQ K3, K4, K3
	VPCMPEQB bed<>(SB), Z0, K4
	VPCMPUB $1, b9e<>(SB), Z1, K4, K4
	KORQ K3, K4, K3
	KMOVQ K3, M_HANGUL(DI)

ascii:
	// ASCII letters: (x | 0x20) - 'a' < 26; capitals: x - 'A' < 26;
	// digits: x - '0' < 10.
	VPORD b20<>(SB), Z0, Z2
	VPSUBB b61<>(SB), Z2, Z2
	VPCMPUB $1, b1a<>(SB), Z2, K1
	KMOVQ K1, M_LETTER(DI)
	VPSUBB b41<>(SB), Z0, Z2
	VPCMPUB $1, b1a<>(SB), Z2, K1
	KMOVQ K1, M_UPPER(DI)
	VPSUBB b30<>(SB), Z0, Z2
	VPCMPUB $1, b0a<>(SB), Z2, K1
	KMOVQ K1, M_DIGIT(DI)

	// Control bytes and white space: < 0x20; \n \r; 0x09–0x0C but \n;
	// \t; ' '.
	VPCMPUB $1, b20<>(SB), Z0, K1
	KMOVQ K1, M_CTRL(DI)
	VPCMPEQB b0a<>(SB), Z0, K1
	VPCMPEQB b0d<>(SB), Z0, K2
	KORQ K1, K2, K2
	KMOVQ K2, M_NEWLINE(DI)
	VPSUBB b09<>(SB), Z0, Z2
	VPCMPUB $1, b04<>(SB), Z2, K2
	KANDNQ K2, K1, K2
	KMOVQ K2, M_BLANK(DI)
	VPCMPEQB b09<>(SB), Z0, K1
	KMOVQ K1, M_TAB(DI)
	VPCMPEQB b20<>(SB), Z0, K1
	KMOVQ K1, M_SPACE(DI)

	// The bytes JSON strings end at and escape with, and the characters
	// two-byte escapes name.
	VPCMPEQB b22<>(SB), Z0, K1
	KMOVQ K1, M_QUOTE(DI)
	VPCMPEQB b5c<>(SB), Z0, K1
	KMOVQ K1, M_BACKSLASH(DI)
	KORTESTQ K1, K1
	JNZ escapes
	MOVQ $0, M_SLASH(DI)
	MOVQ $0, M_NR(DI)
	MOVQ $0, M_TF(DI)
	MOVQ $0, M_T(DI)
	MOVQ $0, M_B(DI)
	VZEROUPPER
	RET

escapes:
	VPCMPEQB b2f<>(SB), Z0, K1
	KMOVQ K1, M_SLASH(DI)
	VPCMPEQB b6e<>(SB), Z0, K1
	VPCMPEQB b72<>(SB), Z0, K2
	KORQ K1, K2, K2
	KMOVQ K2, M_NR(DI)
	VPCMPEQB b74<>(SB), Z0, K1
	KMOVQ K1, M_T(DI)
	VPCMPEQB b66<>(SB), Z0, K2
	KORQ K1, K2, K2
	KMOVQ K2, M_TF(DI)
	VPCMPEQB b62<>(SB), Z0, K1
	KMOVQ K1, M_B(DI)
	VZEROUPPER
	RET

// The nibble tables of StringBlocks' check of escapes, four times (one
// per 128-bit lane of a ZMM register).
#define ROW64x2(name, lo, hi) \
	DATA name<>+0(SB)/8, lo \
	DATA name<>+8(SB)/8, hi \
	DATA name<>+16(SB)/8, lo \
	DATA name<>+24(SB)/8, hi \
	DATA name<>+32(SB)/8, lo \
	DATA name<>+40(SB)/8, hi \
	DATA name<>+48(SB)/8, lo \
	DATA name<>+56(SB)/8, hi \
	GLOBL name<>(SB), (NOPTR+RODATA), $64

ROW64x2(esclo4, $0x00040008000D0000, $0x0104000200000000)
ROW64x2(eschi4, $0x0804020000010000, $0x0000000000000000)
ROW64(b0f, $0x0F0F0F0F0F0F0F0F)

// func StringBlocks512(p *byte, n int, carry uint64) (done, chars int, carryOut, stop, bslash, cont uint64)
//
// StringBlocks with AVX-512 compares into opmask registers: the same
// registers, and Z8–Z11 the byte constants (quote, 0x20, backslash, 0xC0,
// the last compared signed: continuation bytes are the bytes below -64).
TEXT ·StringBlocks512(SB), NOSPLIT, $0-72
	STRINGSTART
	VMOVDQU64 b22<>(SB), Z8
	VMOVDQU64 b20<>(SB), Z9
	VMOVDQU64 b5c<>(SB), Z10
	VMOVDQU64 bc0<>(SB), Z11

loop512:
	CMPQ CX, $64
	JLT short512
	VMOVDQU64 0(SI), Z0
	VPCMPUB $1, Z9, Z0, K1
	VPCMPEQB Z8, Z0, K2
	KORQ K1, K2, K1
	KMOVQ K1, R8
	VPCMPEQB Z10, Z0, K2
	KMOVQ K2, R9
	VPCMPB $1, Z11, Z0, K3
	KMOVQ K3, R10
	PLAINBLOCK(escapes512, stopped512, loop512)

escapes512:
	// The escaped bytes; a quote or control byte that is not escaped
	// ends the run
	ESCAPED
	JNZ stopped512

	// so does an escape other than a two-byte one (\u, or an error)
	VMOVDQU64 b0f<>(SB), Z7
	VPANDD Z7, Z0, Z2
	VPSRLW $4, Z0, Z4
	VPANDD Z7, Z4, Z4
	VMOVDQU64 esclo4<>(SB), Z6
	VPSHUFB Z2, Z6, Z2
	VMOVDQU64 eschi4<>(SB), Z6
	VPSHUFB Z4, Z6, Z4
	VPTESTMB Z2, Z4, K1
	KMOVQ K1, R12
	NOTQ R12                       // R12: bytes no two-byte escape names
	ANDQ R13, R12
	JNZ stopped512

	NEXTBLOCK
	JMP loop512

short512:
	NOMASKS

stopped512:
	STRINGRETURN

// func Compress(p *uint64, n int, keep uint64)
// Two words per iteration, then the odd one.
TEXT ·Compress(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ keep+16(FP), DX
	SUBQ $2, CX
	JLT  compressTail

compressPair:
	MOVQ  (SI), AX
	MOVQ  8(SI), BX
	PEXTQ DX, AX, AX
	PEXTQ DX, BX, BX
	MOVQ  AX, (SI)
	MOVQ  BX, 8(SI)
	ADDQ  $16, SI
	SUBQ  $2, CX
	JGE   compressPair

compressTail:
	CMPQ  CX, $-1 // one word left (n odd)
	JNE   compressDone
	MOVQ  (SI), AX
	PEXTQ DX, AX, AX
	MOVQ  AX, (SI)

compressDone:
	RET

// func Deposit(x, mask uint64) uint64
TEXT ·Deposit(SB), NOSPLIT, $0-24
	MOVQ  x+0(FP), AX
	MOVQ  mask+8(FP), BX
	PDEPQ BX, AX, AX
	MOVQ  AX, ret+16(FP)
	RET

// ESC3 defines a 32-byte constant: the 16 bytes lo, hi in both lanes.
#define ESC3(name, lo, hi) \
	DATA name+0(SB)/8, lo \
	DATA name+8(SB)/8, hi \
	DATA name+16(SB)/8, lo \
	DATA name+24(SB)/8, hi \
	GLOBL name(SB), (NOPTR+RODATA), $32

// Each lane holds two escapes, bytes 0-11: "\uXXXX\uXXXX".
ESC3(esc3prefix<>, $0x755C00000000755C, $0)                  // "\u" at 0 and 6
ESC3(esc3gather<>, $0x0B0A090805040302, $-0x7F7F7F7F7F7F7F80) // hex digits to 0-7, zero above
ESC3(esc3pack<>, $-0x7F7FF9FAFBFDFF00, $-0x7F7F7F7F7F7F7F80)  // bytes 0-2 and 4-6 to 0-5
ESC3(esc3letters<>, $0x0009000900000000, $0)                  // by high nibble: 9 for 4x and 6x
ESC3(esc3nibble<>, $0x0F0F0F0F0F0F0F0F, $0x0F0F0F0F0F0F0F0F)
ESC3(esc3lower<>, $0x2020202020202020, $0x2020202020202020)
ESC3(esc3x2f<>, $0x2F2F2F2F2F2F2F2F, $0x2F2F2F2F2F2F2F2F)
ESC3(esc3x3a<>, $0x3A3A3A3A3A3A3A3A, $0x3A3A3A3A3A3A3A3A)
ESC3(esc3x60<>, $0x6060606060606060, $0x6060606060606060)
ESC3(esc3x67<>, $0x6767676767676767, $0x6767676767676767)
ESC3(esc3w16<>, $0x0110011001100110, $0x0110011001100110)     // bytes 16, 1
ESC3(esc3w256<>, $0x0001010000010100, $0x0001010000010100)    // words 256, 1
ESC3(esc3top<>, $0x0000F8000000F800, $0x0000F8000000F800)
ESC3(esc3surr<>, $0x0000D8000000D800, $0x0000D8000000D800)
ESC3(esc3mid<>, $0x00003F0000003F00, $0x00003F0000003F00)
ESC3(esc3low<>, $0x003F0000003F0000, $0x003F0000003F0000)
ESC3(esc3marks<>, $0x008080E0008080E0, $0x008080E0008080E0)  // 1110xxxx 10xxxxxx 10xxxxxx
// esc3places: the places before a wrong byte at bit k of esc3Part's mask
DATA esc3places<>+0(SB)/8, $0x0101000000000000
DATA esc3places<>+8(SB)/8, $0x0101010101010101
DATA esc3places<>+16(SB)/8, $0x0303020202020202
DATA esc3places<>+24(SB)/8, $0x0303030303030303
GLOBL esc3places<>(SB), (NOPTR+RODATA), $32

// ESC3STORE encodes the round's four values (dwords 0 and 1 of each lane
// of Y1) as 1110xxxx 10xxxxxx 10xxxxxx, three bytes a dword, packs them and
// stores them: six bytes at dst+w, six at dst+w+6 (16-byte stores).
#define ESC3STORE \
	VPSRLD       $12, Y1, Y2 \
	VPSLLD       $2, Y1, Y3 \
	VPAND        esc3mid<>(SB), Y3, Y3 \
	VPSLLD       $16, Y1, Y4 \
	VPAND        esc3low<>(SB), Y4, Y4 \
	VPOR         Y3, Y2, Y2 \
	VPOR         Y4, Y2, Y2 \
	VPOR         esc3marks<>(SB), Y2, Y2 \
	VPSHUFB      esc3pack<>(SB), Y2, Y2 \
	VMOVDQU      X2, (DI)(BX*1) \
	VEXTRACTI128 $1, Y2, X3 \
	VMOVDQU      X3, 6(DI)(BX*1)

// func Escapes3(src *byte, n int, dst *byte, room int) (read, written int)
//
// Four places a round: two per lane (src+r and src+r+12), checked all at
// once. A round whose places are not all escapes of three-byte characters
// decodes those before the first that is not, and ends the call. A round's
// UTF-8 is stored as two 16-byte stores (six bytes each, at dst+w and
// dst+w+6), which is why it wants 22 bytes of room, and its loads 28 of src.
TEXT ·Escapes3(SB), NOSPLIT, $0-48
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ room+24(FP), DX
	XORQ AX, AX
	XORQ BX, BX
	SUBQ $28, CX // rounds run while r <= n-28
	SUBQ $22, DX // and w <= room-22
	VPXOR Y15, Y15, Y15

esc3Round:
	CMPQ AX, CX
	JGT  esc3Done
	CMPQ BX, DX
	JGT  esc3Done
	VMOVDQU     (SI)(AX*1), X0
	VINSERTI128 $1, 12(SI)(AX*1), Y0, Y0

	// R8: the bytes that are right, "\u" at bytes 0, 1, 6 and 7 of
	// each lane and hex digits at bytes 2-5 and 8-11: '0'-'9', or 'a'-'f'
	// once folded to lower case (signed compares: bytes from 0x80 fail)
	VPCMPEQB  esc3prefix<>(SB), Y0, Y1
	VPMOVMSKB Y1, R8
	ANDL      $0x00C300C3, R8
	VPCMPGTB  esc3x2f<>(SB), Y0, Y1 // c > '/'
	VMOVDQU   esc3x3a<>(SB), Y2
	VPCMPGTB  Y0, Y2, Y2            // ':' > c
	VPAND     Y2, Y1, Y1
	VPOR      esc3lower<>(SB), Y0, Y3
	VPCMPGTB  esc3x60<>(SB), Y3, Y4 // l > '`'
	VMOVDQU   esc3x67<>(SB), Y5
	VPCMPGTB  Y3, Y5, Y5            // 'g' > l
	VPAND     Y5, Y4, Y4
	VPOR      Y4, Y1, Y1
	VPMOVMSKB Y1, R9
	ANDL      $0x0F3C0F3C, R9
	ORL       R9, R8

	// values: low nibble, plus 9 for a letter (high nibble 4 or 6);
	// the four digits of an escape into one 32-bit value (dwords 0 and
	// 1 of each lane)
	VPSRLW     $4, Y0, Y1
	VPAND      esc3nibble<>(SB), Y1, Y1
	VMOVDQU    esc3letters<>(SB), Y2
	VPSHUFB    Y1, Y2, Y2
	VPAND      esc3nibble<>(SB), Y0, Y1
	VPADDB     Y2, Y1, Y1
	VPSHUFB    esc3gather<>(SB), Y1, Y1
	VPMADDUBSW esc3w16<>(SB), Y1, Y1
	VPMADDWD   esc3w256<>(SB), Y1, Y1

	// R10: the values' bytes out of range, below U+0800 or surrogates
	// (top five bits 0 or 11011)
	VPAND     esc3top<>(SB), Y1, Y2
	VPCMPEQD  Y15, Y2, Y3
	VPCMPEQD  esc3surr<>(SB), Y2, Y2
	VPOR      Y3, Y2, Y2
	VPMOVMSKB Y2, R10
	ANDL      $0x00FF00FF, R10

	CMPL R8, $0x0FFF0FFF
	JNE  esc3Part
	TESTL R10, R10
	JNE  esc3Part
	ESC3STORE
	ADDQ $24, AX
	ADDQ $12, BX
	JMP  esc3Round

esc3Part:
	// the places before the first that is wrong, without a branch: the
	// wrong bytes of R8 and R10 in one mask, places at bits 0-5, 6-11
	// (lane 0), 16-21, 22-27 (lane 1; R10's bits of places 1 and 3
	// moved up by 2 into theirs), its lowest set bit's place by table
	NOTL R8
	ANDL $0x0FFF0FFF, R8
	MOVL R10, R9
	ANDL $0x000F000F, R9
	ORL  R9, R8
	ANDL $0x00F000F0, R10
	SHLL $2, R10
	ORL  R10, R8
	BSFL R8, R8 // R8 != 0: some place is wrong
	LEAQ esc3places<>(SB), R9
	MOVBQZX (R9)(R8*1), R11
	ESC3STORE
	LEAQ (R11)(R11*2), R11
	ADDQ R11, BX // 3 bytes each
	ADDQ R11, AX
	ADDQ R11, AX // from 6

esc3Done:
	VZEROUPPER
	MOVQ AX, read+32(FP)
	MOVQ BX, written+40(FP)
	RET
