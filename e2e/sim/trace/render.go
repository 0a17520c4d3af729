package trace

import (
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// words is the rendering vocabulary: common English words, each one token
// (with its leading space) for byte-level BPE tokenizers and for tokenest.
var words = strings.Fields(`the of and to in is that for it as was with be by on not he this are or
his from at which but have an they you were her she there can all their has been one would
more will other time new some could these two may first then do any like my now over such our
man me even most made after also did many before must through back years where much your way
well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know
while last might us great old year off come since against go came right used take three
states himself few house use during without again place around however home small found
thought went say part once general high upon school every don does got united left number
course war until always away something fact though water less public put think almost hand
enough far took head yet government system better set told nothing night end why called
didn find look going point knew city next program business give group toward young days let
room president side social present given several order national possible rather second face
per among form important often things looked early white case john become large big need four
within felt along children saw best church ever least power development light thing seemed
family interest want members mind country area others done turned although open god service
certain kind problem began different door thus help sense means whole matter perhaps itself
york times law human line above name example action company hands local show five history
whether act either gave today feet across taken past quite anything seen having death week
experience body word half really field am car words already themselves information tell
together shall money period held keep sure probably free seems real behind cannot miss
political air question making office brought whose special heard major problems ago became
federal moment study available known result street economic boy position reason change south
board individual job society areas west close turn love community true court force full seem
value front`)

// Renderer turns segments into text and requests into bodies. Rendering is
// deterministic: a segment id always gives the same text, of about its
// token count as tokenest's default method counts it. A Renderer caches
// segment texts; it is not safe for concurrent use.
type Renderer struct {
	texts map[string]string
}

// NewRenderer returns an empty renderer.
func NewRenderer() *Renderer { return &Renderer{texts: map[string]string{}} }

// Text is segment s's text: sentences of words drawn from a generator seeded
// by the id. Each word and each sentence's full stop is about one token.
func (r *Renderer) Text(s Segment) string {
	key := s.ID + "\x00" + itoa(s.Tokens)
	if t, ok := r.texts[key]; ok {
		return t
	}
	h := fnv.New64a()
	h.Write([]byte(s.ID))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(s.Tokens)))
	var b strings.Builder
	b.Grow(s.Tokens * 6)
	b.WriteString("[" + s.ID + "]")
	// The id tag costs a few tokens; the words make up the rest. A word is
	// 1.09 tokens on average by tokenest's default method.
	n := int(float64(s.Tokens)/1.09) - 2 - len(s.ID)/3
	sentence := 0
	for i := 0; i < n; i++ {
		w := words[rng.IntN(len(words))]
		b.WriteByte(' ')
		if sentence == 0 {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		} else {
			b.WriteString(w)
		}
		sentence++
		if sentence >= 11 && i+1 < n {
			b.WriteByte('.')
			sentence = 0
			i++
		}
	}
	b.WriteByte('.')
	t := b.String()
	r.texts[key] = t
	return t
}

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(buf[i:])
}

// Path is the request path for the request's API.
func Path(req *Request) string {
	if req.API == "completions" {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}

// Model is the model name rendered into bodies.
const Model = "sim-model"

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatBody struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	MaxTokens int           `json:"max_tokens"`
	IgnoreEOS bool          `json:"ignore_eos"`
	Stream    bool          `json:"stream"`
}

type completionBody struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	IgnoreEOS bool   `json:"ignore_eos"`
	Stream    bool   `json:"stream"`
}

// Body renders the request as a client sends it: a streaming chat request
// with one message per segment, or a completion whose prompt is the
// segments joined by newlines. ignore_eos (vLLM's sampling parameter) makes
// the answer exactly output_tokens long, as benchmark clients do.
func (r *Renderer) Body(req *Request) []byte {
	var v any
	if req.API == "completions" {
		parts := make([]string, len(req.Segments))
		for i, s := range req.Segments {
			parts[i] = r.Text(s)
		}
		v = completionBody{Model: Model, Prompt: strings.Join(parts, "\n"), MaxTokens: req.OutputTokens, IgnoreEOS: true, Stream: true}
	} else {
		msgs := make([]chatMessage, len(req.Segments))
		for i, s := range req.Segments {
			msgs[i] = chatMessage{Role: s.Role, Content: r.Text(s)}
		}
		v = chatBody{Model: Model, Messages: msgs, MaxTokens: req.OutputTokens, IgnoreEOS: true, Stream: true}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and ints only
	}
	return b
}

// PromptText is the prompt as the engine sees it: the messages in a simple
// chat template (role markers and contents), or the completion prompt. The
// engines hash it into blocks for the prefix cache.
func (r *Renderer) PromptText(req *Request) string {
	var b strings.Builder
	for i, s := range req.Segments {
		if req.API == "completions" {
			if i > 0 {
				b.WriteByte('\n')
			}
		} else {
			b.WriteString("<|" + s.Role + "|>\n")
		}
		b.WriteString(r.Text(s))
	}
	return b.String()
}

// Forget drops cached texts (between traces).
func (r *Renderer) Forget() { clear(r.texts) }
