package prefix

import (
	"bytes"
	"math/bits"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/lb"
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
	var f fields
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		f.set(k.Str, v.Raw)
		return true
	})
	return r.render(&f, path, p)
}

// Member is a top-level member of a request body, as offsets into it: the
// key with its quotes at [Start, KeyEnd), the value at [Val, End) (the
// layout of tokenest.Member).
type Member struct{ Start, KeyEnd, Val, End int }

// RenderMembers is [Renderer.Render] for a caller that has already found
// the body's top-level members (the filter's estimate does, validating the
// body): it spares reading the whole body again to find them, which in
// wasm costs more than the hashing (~1.6 ns a byte). members must describe
// body, in document order, repeated keys included; the result is Render's.
func (r *Renderer) RenderMembers(body []byte, members []Member, path string, p *Prompt) bool {
	p.Hashes, p.Bytes = p.Hashes[:0], 0
	var f fields
	for _, m := range members {
		key := body[m.Start:m.KeyEnd]
		if len(key) < 2 || bytes.IndexByte(key, '\\') >= 0 {
			return r.Render(body, path, p) // an escaped key: decoded as Render does
		}
		f.set(unsafe.String(unsafe.SliceData(key[1:]), len(key)-2), unsafe.String(unsafe.SliceData(body[m.Val:]), m.End-m.Val))
	}
	return r.render(&f, path, p)
}

// The parts of a request Render reads, by kind.
const (
	partTools = iota
	partInstructions
	partMessages
	partPrompt
	partInput
	partText
	numParts
)

// fields are the members Render reads, as raw JSON (the last of repeated
// keys counts, as in every engine's parser).
type fields struct {
	model, salt string // raw JSON values
	part        [numParts]string
	ids         string
}

func (f *fields) set(key, raw string) {
	switch key {
	case "model":
		f.model = raw
	case "cache_salt":
		f.salt = raw
	case "tools":
		f.part[partTools] = raw
	case "instructions":
		f.part[partInstructions] = raw
	case "messages":
		f.part[partMessages] = raw
	case "prompt":
		f.part[partPrompt] = raw
	case "input":
		f.part[partInput] = raw
	case "text":
		f.part[partText] = raw
	case "input_ids":
		f.ids = raw
	}
}

// Orders of the parts per API (tools first: the chat templates put them in
// the system turn).
var (
	orderChat      = []int{partTools, partMessages}
	orderResponses = []int{partTools, partInstructions, partInput}
	orderPrompt    = []int{partPrompt}
	orderText      = []int{partText}
)

func (r *Renderer) render(f *fields, path string, p *Prompt) bool {
	path, _, _ = strings.Cut(path, "?")
	var order []int
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		order = orderChat
	case strings.HasSuffix(path, "/responses"):
		order = orderResponses
	case strings.HasSuffix(path, "/completions"):
		order = orderPrompt
	case strings.HasSuffix(path, "/generate"):
		if f.part[partText] == "" {
			f.part[partText] = f.ids
		}
		order = orderText
	default:
		return false
	}
	b := r.buf[:0]
	for _, i := range order {
		if f.part[i] != "" {
			b = append(b, byte('A'+i))
			b = append(b, f.part[i]...)
		}
	}
	r.buf = b
	if len(b) == 0 || f.part[order[len(order)-1]] == "" {
		return false
	}
	// the model and the salt as strings, as gjson reads them ("" for
	// anything but a string)
	r.hash(seed(gjson.Parse(f.model).Str, gjson.Parse(f.salt).Str), b, p)
	return true
}

// HashText hashes already rendered text (tests, simulators with their own
// rendering) into p the way Render does.
func (r *Renderer) HashText(model, salt string, text []byte, p *Prompt) {
	p.Hashes, p.Bytes = p.Hashes[:0], 0
	r.hash(seed(model, salt), text, p)
}

// hash chains the full blocks of text onto h, one hash per block, 8
// bytes at a time: each word is xored in, multiplied, rotated and
// multiplied again, the block's rest taken byte by byte (FNV-1a steps), and
// the result finalised with the previous block's hash (splitmix64), never 0.
// A few nanoseconds a word, so a 200 KB prompt hashes in tens of
// microseconds in wasm; one loop for every block (a call per block costs
// in wasm). It is not cryptographic: a collision only misroutes.
func (r *Renderer) hash(h uint64, text []byte, p *Prompt) {
	p.Bytes = len(text)
	bb := r.blockBytes
	for len(text) >= bb {
		block := text[:bb:bb]
		text = text[bb:]
		prev := h
		i := 0
		for ; i+8 <= len(block); i += 8 {
			h = bits.RotateLeft64((h^word(block, i))*0x9e3779b97f4a7c15, 27) * 0xc2b2ae3d27d4eb4f
		}
		for ; i < len(block); i++ {
			h = (h ^ uint64(block[i])) * 0x100000001b3
		}
		h = lb.Mix64(h ^ prev>>1)
		if h == 0 {
			h = 1
		}
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
		h = lb.Mix64(h ^ uint64(len(s)))
	}
	return h
}
