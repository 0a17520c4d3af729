package engine

import (
	"encoding/binary"
	"hash/fnv"
)

// BytesPerToken is how much prompt text one block-hash token covers. Hashing
// text in fixed-size pieces (BlockSize × BytesPerToken bytes) makes two
// prompts that share a text prefix share the hashes of the blocks inside it,
// whatever follows, which is what a token-level prefix cache sees.
const BytesPerToken = 5

// BlockHashes returns the chained hashes of text's full blocks: hash i covers
// bytes [0, (i+1) × blockSize × BytesPerToken), so equal hashes mean equal
// prefixes. At most maxBlocks are returned (the prompt's full token blocks;
// ≤ 0 means no limit).
func BlockHashes(text string, blockSize, maxBlocks int) []uint64 {
	piece := blockSize * BytesPerToken
	n := len(text) / piece
	if maxBlocks > 0 && n > maxBlocks {
		n = maxBlocks
	}
	out := make([]uint64, n)
	var prev [8]byte
	for i := range n {
		h := fnv.New64a()
		h.Write(prev[:])
		h.Write([]byte(text[i*piece : (i+1)*piece]))
		v := h.Sum64()
		if v == 0 {
			v = 1 // 0 marks "no hash"
		}
		out[i] = v
		binary.LittleEndian.PutUint64(prev[:], v)
	}
	return out
}

// block is one cached, hashed KV block.
type block struct {
	hash       uint64
	ref        int
	prev, next *block // LRU list of unreferenced blocks
}

// kvCache is the KV cache: capacity blocks, of which some hold a prompt
// block's hash (the prefix cache). A block is either free (anonymous), owned
// by running sequences (anonymous or hashed, with a reference count), or
// hashed and unreferenced: kept for reuse in LRU order and evicted, oldest
// first, when a free block is needed.
type kvCache struct {
	capacity int
	free     int               // anonymous free blocks
	byHash   map[uint64]*block // every hashed block
	lru      block             // sentinel: lru.next is the oldest unreferenced block
	lruLen   int
	// Counters.
	evictions int64
}

func newKVCache(capacity int) *kvCache {
	c := &kvCache{capacity: capacity, free: capacity, byHash: map[uint64]*block{}}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// available is how many blocks could be handed out now.
func (c *kvCache) available() int { return c.free + c.lruLen }

// used is how many blocks running sequences hold.
func (c *kvCache) used() int { return c.capacity - c.free - c.lruLen }

// match returns how many leading hashes are cached, and how many of those
// sit unreferenced in the LRU (taking them lowers what is available).
func (c *kvCache) match(hashes []uint64) (hits, inLRU int) {
	for _, h := range hashes {
		b := c.byHash[h]
		if b == nil {
			break
		}
		hits++
		if b.ref == 0 {
			inLRU++
		}
	}
	return hits, inLRU
}

// ref takes a reference on the cached blocks of hashes[:n] (all present).
func (c *kvCache) ref(hashes []uint64, n int) []*block {
	out := make([]*block, 0, len(hashes))
	for _, h := range hashes[:n] {
		b := c.byHash[h]
		if b.ref == 0 {
			c.unlink(b)
		}
		b.ref++
		out = append(out, b)
	}
	return out
}

// take hands out n anonymous blocks, evicting the oldest unreferenced hashed
// blocks when no free one is left. The caller checked available.
func (c *kvCache) take(n int) {
	for ; n > 0; n-- {
		if c.free > 0 {
			c.free--
			continue
		}
		b := c.lru.next
		c.unlink(b)
		delete(c.byHash, b.hash)
		c.evictions++
	}
}

// publish turns one anonymous block owned by a sequence into the cached
// block of hash h. It returns nil (the block stays anonymous) when h is
// already cached, computed meanwhile by another sequence.
func (c *kvCache) publish(h uint64) *block {
	if c.byHash[h] != nil {
		return nil
	}
	b := &block{hash: h, ref: 1}
	c.byHash[h] = b
	return b
}

// release gives back a sequence's blocks: anon anonymous ones and its hashed
// ones, which stay cached (most recently used last).
func (c *kvCache) release(anon int, hashed []*block) {
	c.free += anon
	for _, b := range hashed {
		b.ref--
		if b.ref == 0 {
			b.prev, b.next = c.lru.prev, &c.lru
			c.lru.prev.next = b
			c.lru.prev = b
			c.lruLen++
		}
	}
}

func (c *kvCache) unlink(b *block) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	c.lruLen--
}
