package prefix

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"unsafe"

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
//   - chat (/chat/completions): the tool definitions first (the chat
//     templates put them in the system turn), then the messages, each with
//     its role, content and tool calls;
//   - /completions: the prompt; /generate: text or input_ids; /responses:
//     tools, instructions, then input.
//
// Each part is taken as its raw JSON: equal text has equal JSON from one
// client, so equal prefixes hash equal without decoding a byte, and the
// body is read in one pass (it finds the top-level members) plus one over
// the parts it keeps. The body must be valid JSON (the filter's estimate
// has validated it); Render never fails on one that is not, it just hashes
// what it finds. It reports false when the body has no prompt it reads (the
// caller then routes without the index). body must not change during the
// call.
func (r *Renderer) Render(body []byte, path string, p *Prompt) bool {
	p.Hashes, p.Bytes = p.Hashes[:0], 0
	if len(body) == 0 {
		return false
	}
	var model, salt string
	var part [6]string // tools, instructions, messages/prompt/input/text, input_ids
	const (
		tools = iota
		instructions
		messages
		prompt
		input
		text
	)
	var ids string
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			model = v.Str
		case "cache_salt":
			salt = v.Str
		case "tools":
			part[tools] = v.Raw
		case "instructions":
			part[instructions] = v.Raw
		case "messages":
			part[messages] = v.Raw
		case "prompt":
			part[prompt] = v.Raw
		case "input":
			part[input] = v.Raw
		case "text":
			part[text] = v.Raw
		case "input_ids":
			ids = v.Raw
		}
		return true
	})
	path, _, _ = strings.Cut(path, "?")
	var order []int
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		order = []int{tools, messages}
	case strings.HasSuffix(path, "/responses"):
		order = []int{tools, instructions, input}
	case strings.HasSuffix(path, "/completions"):
		order = []int{prompt}
	case strings.HasSuffix(path, "/generate"):
		if part[text] == "" {
			part[text] = ids
		}
		order = []int{text}
	default:
		return false
	}
	b := r.buf[:0]
	for _, i := range order {
		if part[i] != "" {
			b = append(b, byte('A'+i))
			b = append(b, part[i]...)
		}
	}
	r.buf = b
	if len(b) == 0 || part[order[len(order)-1]] == "" {
		return false
	}
	r.hash(seed(model, salt), b, p)
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
