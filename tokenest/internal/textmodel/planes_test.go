package textmodel

import "github.com/pdroute/pdroute/tokenest/internal/jsonraw"

// planes turns the first 64 bytes of b into eight bit planes: plane j
// holds bit j of every byte (bit k of the plane: byte k). Two
// transpositions of 8×8 matrices: the bits within each 8-byte word, then
// the bytes across words. It is classify's transposition as a function,
// for the tests (TestPlanes checks it bit by bit; the others take their
// planes from it). classify keeps it in line: in wasm a call whose eight
// results go through memory cost 8 % of the block reader's time. The
// differential tests and fuzz targets (FuzzBlocksMatchStep) guard
// classify's copy.
func planes(b []byte) (b0, b1, b2, b3, b4, b5, b6, b7 uint64) {
	b = b[:64]
	// The three byte stages commute; interleaving them with the bit
	// transposes keeps fewer values live at once.
	b0, b1 = swapBytes(transposeBits(jsonraw.Word(b, 0)), transposeBits(jsonraw.Word(b, 8)), 8, 0x00FF00FF00FF00FF)
	b2, b3 = swapBytes(transposeBits(jsonraw.Word(b, 16)), transposeBits(jsonraw.Word(b, 24)), 8, 0x00FF00FF00FF00FF)
	b0, b2 = swapBytes(b0, b2, 16, 0x0000FFFF0000FFFF)
	b1, b3 = swapBytes(b1, b3, 16, 0x0000FFFF0000FFFF)
	b4, b5 = swapBytes(transposeBits(jsonraw.Word(b, 32)), transposeBits(jsonraw.Word(b, 40)), 8, 0x00FF00FF00FF00FF)
	b6, b7 = swapBytes(transposeBits(jsonraw.Word(b, 48)), transposeBits(jsonraw.Word(b, 56)), 8, 0x00FF00FF00FF00FF)
	b4, b6 = swapBytes(b4, b6, 16, 0x0000FFFF0000FFFF)
	b5, b7 = swapBytes(b5, b7, 16, 0x0000FFFF0000FFFF)
	b0, b4 = swapBytes(b0, b4, 32, 0x00000000FFFFFFFF)
	b1, b5 = swapBytes(b1, b5, 32, 0x00000000FFFFFFFF)
	b2, b6 = swapBytes(b2, b6, 32, 0x00000000FFFFFFFF)
	b3, b7 = swapBytes(b3, b7, 32, 0x00000000FFFFFFFF)
	return
}
