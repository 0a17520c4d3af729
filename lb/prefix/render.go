package prefix

import (
	"encoding/binary"
	"math/bits"
	"strings"

	"github.com/tidwall/gjson"
)

// Prompt is a request's prompt as the index sees it: the chained hashes of
// its rendered text's full blocks, and the rendered length.
type Prompt struct {
	// Hashes[i] identifies the rendered prompt's first (i+1) × block_bytes
	// bytes together with the model and cache_salt: equal hashes mean equal
	// prefixes (up to 64-bit collisions).
	Hashes []uint64
	// Bytes is the rendered prompt's length; Hashes covers
	// len(Hashes) × block_bytes of it.
	Bytes int
}

// Renderer cuts request bodies into block hashes. It keeps a scratch buffer
// between calls (bounded by the largest body seen), so one Renderer serves
// one VM; it is not safe for concurrent use. The zero value is not usable:
// call [NewRenderer].
type Renderer struct {
	blockBytes int
	buf        []byte
}

// NewRenderer returns a Renderer for blocks of blockBytes bytes (> 0).
func NewRenderer(blockBytes int) *Renderer {
	return &Renderer{blockBytes: max(blockBytes, 8)}
}

// Render renders body (an OpenAI-style request to path) as the engine's
// prompt would read, in order, and hashes its full blocks into p (reusing
// p.Hashes' storage):
//
//   - the chain is seeded with the model and cache_salt, so two models (or two
//     salts) never share an entry;
//   - chat (/chat/completions): tool definitions first (the chat templates put
//     them in the system turn), then each message's role, content and tool
//     calls, as their raw JSON: equal text has equal JSON, so equal prefixes
//     hash equal without decoding a byte;
//   - /completions: the prompt; /generate: text or input_ids; /responses:
//     tools, instructions, then input.
//
// It reports false when the body has no prompt it can read (the caller then
// routes without the index).
func (r *Renderer) Render(body []byte, path string, p *Prompt) bool {
	p.Hashes, p.Bytes = p.Hashes[:0], 0
	if !gjson.ValidBytes(body) {
		return false
	}
	b := r.buf[:0]
	root := gjson.ParseBytes(body)
	path, _, _ = strings.Cut(path, "?")
	piece := func(tag byte, v gjson.Result) {
		if v.Exists() {
			b = append(b, tag)
			b = append(b, v.Raw...)
			b = append(b, 0x1f)
		}
	}
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		piece('T', root.Get("tools"))
		msgs := root.Get("messages")
		if !msgs.IsArray() {
			return false
		}
		msgs.ForEach(func(_, m gjson.Result) bool {
			piece('R', m.Get("role"))
			piece('C', m.Get("content"))
			piece('K', m.Get("tool_calls"))
			piece('I', m.Get("tool_call_id"))
			return true
		})
	case strings.HasSuffix(path, "/responses"):
		piece('T', root.Get("tools"))
		piece('S', root.Get("instructions"))
		piece('P', root.Get("input"))
	case strings.HasSuffix(path, "/completions"):
		piece('P', root.Get("prompt"))
	case strings.HasSuffix(path, "/generate"):
		piece('P', root.Get("text"))
		piece('D', root.Get("input_ids"))
	default:
		return false
	}
	r.buf = b
	if len(b) == 0 {
		return false
	}
	r.hash(seed(root.Get("model").Str, root.Get("cache_salt").Str), b, p)
	return true
}

// HashText hashes already rendered text (tests, simulators with their own
// rendering) into p the way Render does.
func (r *Renderer) HashText(model, salt string, text []byte, p *Prompt) {
	p.Hashes, p.Bytes = p.Hashes[:0], 0
	r.hash(seed(model, salt), text, p)
}

func (r *Renderer) hash(h uint64, text []byte, p *Prompt) {
	p.Bytes = len(text)
	n := len(text) / r.blockBytes
	for i := range n {
		h = blockHash(h, text[i*r.blockBytes:(i+1)*r.blockBytes])
		p.Hashes = append(p.Hashes, h)
	}
}

// seed starts the chain from the model and the salt.
func seed(model, salt string) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, s := range [...]string{model, salt} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 0x100000001b3
		}
		h = mix64(h ^ uint64(len(s)))
	}
	return h
}

// blockHash chains one block onto prev, 8 bytes at a time: a few
// nanoseconds per word, so a 200 KB prompt hashes in tens of microseconds
// in wasm. It is not cryptographic: a collision only misroutes.
func blockHash(prev uint64, block []byte) uint64 {
	h := prev
	for len(block) >= 8 {
		h = bits.RotateLeft64((h^binary.LittleEndian.Uint64(block))*0x9e3779b97f4a7c15, 27) * 0xc2b2ae3d27d4eb4f
		block = block[8:]
	}
	for _, c := range block {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	h = mix64(h ^ prev>>1)
	if h == 0 {
		h = 1
	}
	return h
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
