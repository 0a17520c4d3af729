package mocks

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
)

// The toy vocabulary: a few special ids, 64 output words the generator emits, and
// hashed prompt pieces above them.
const (
	eosToken        = 2
	outputVocabBase = 100
	promptVocabBase = 1000
	vocabSize       = 32000
	// eosOneIn makes the generator sample end-of-sequence about once in this many steps
	// (unless min_tokens or ignore_eos holds it back), so natural outputs vary in length.
	eosOneIn = 24
)

var outputWords = [...]string{
	"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
	"india", "juliett", "kilo", "lima", "mike", "november", "oscar", "papa",
	"quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray",
	"yankee", "zulu", "amber", "azure", "coral", "ivory", "jade", "olive",
	"pearl", "ruby", "sable", "teal", "umber", "violet", "cobalt", "copper",
	"silver", "golden", "crimson", "scarlet", "indigo", "maroon", "ochre", "cyan",
	"river", "stone", "cloud", "ember", "frost", "grove", "harbor", "meadow",
	"summit", "valley", "canyon", "prairie", "tundra", "lagoon", "glacier", "willow",
}

var outputIDs = func() map[string]int {
	m := make(map[string]int, len(outputWords))
	for i, w := range outputWords {
		m[w] = outputVocabBase + i
	}
	return m
}()

// Tokenize maps text to token ids the same way in every mock, so a prefiller, a decoder
// and a test agree on a prompt's ids. Words (runs of non-space characters) are cut into
// pieces of at most 4 bytes and each piece hashes to a fixed id in [1000, 32000), about
// one token per 4 characters like a real tokenizer. A word that is one of the
// generator's output words maps to that word's id, so generated text tokenizes back to
// the ids that produced it.
func Tokenize(text string) []int {
	ids := make([]int, 0, len(text)/4+1)
	for _, w := range strings.Fields(text) {
		if id, ok := outputIDs[w]; ok {
			ids = append(ids, id)
			continue
		}
		for len(w) > 0 {
			n := min(4, len(w))
			h := uint32(2166136261) // FNV-1a, 32 bit
			for i := range n {
				h = (h ^ uint32(w[i])) * 16777619
			}
			ids = append(ids, promptVocabBase+int(h%(vocabSize-promptVocabBase)))
			w = w[n:]
		}
	}
	return ids
}

// tokenText is the text of one generated token: a space and the word, as BPE
// tokenizers emit a leading space. End-of-sequence has no text.
func tokenText(id int) string {
	switch {
	case id == eosToken:
		return ""
	case id >= outputVocabBase && id < outputVocabBase+len(outputWords):
		return " " + outputWords[id-outputVocabBase]
	default:
		return fmt.Sprintf(" <%d>", id)
	}
}

// chatMessage is one entry of a chat request's messages.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatTemplate renders messages the way the toy chat template does: each message as
// "<|role|>" and its text, then "<|assistant|>" when a generation prompt is added.
// Content is a string, null, or a list of parts whose text parts are concatenated.
func chatTemplate(raw json.RawMessage, addGenerationPrompt bool) (string, error) {
	var msgs []chatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return "", fmt.Errorf("messages: %v", err)
	}
	if len(msgs) == 0 {
		return "", fmt.Errorf("messages: must not be empty")
	}
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return "", fmt.Errorf("messages[%d].role: missing", i)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return "", fmt.Errorf("messages[%d].content: %v", i, err)
		}
		b.WriteString("<|" + m.Role + "|>\n" + text + "\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|assistant|>\n")
	}
	return b.String(), nil
}

func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// sequence is the generator's context: a rolling hash of every token so far. The next
// token depends only on it, so continuing from prompt+[first token] (LMCache's decode)
// yields the same tokens as generating from the prompt alone.
type sequence uint64

const fnvOffset64, fnvPrime64 = 14695981039346656037, 1099511628211

func newSequence(ids []int) sequence {
	s := sequence(fnvOffset64)
	for _, id := range ids {
		s = s.push(id)
	}
	return s
}

func (s sequence) push(id int) sequence {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(id))
	h := uint64(s)
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime64
	}
	return sequence(h)
}

// mixed spreads the hash's bits (splitmix64's finaliser) before sampling.
func (s sequence) mixed() uint64 {
	z := uint64(s) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// promptHash identifies a prompt's KV: the hash a decoder compares with the one a
// prefiller computed.
func promptHash(ids []int) uint64 { return uint64(newSequence(ids)) }

// limits are a request's output-length controls.
type limits struct {
	max       int  // max_tokens (>= 1)
	min       int  // min_tokens: end-of-sequence is not sampled before this many
	ignoreEOS bool // ignore_eos: never stop before max
}

// generation is one choice's output.
type generation struct {
	ids    []int  // emitted tokens (end-of-sequence excluded)
	first  int    // the first sampled token, end-of-sequence included (LMCache first_tok)
	finish string // "stop" or "length"
}

func (g generation) text() string {
	var b strings.Builder
	for _, id := range g.ids {
		b.WriteString(tokenText(id))
	}
	return b.String()
}

// generate runs the deterministic toy model over prompt.
func generate(prompt []int, l limits) generation {
	s := newSequence(prompt)
	g := generation{ids: make([]int, 0, min(l.max, 64)), first: -1}
	for len(g.ids) < l.max {
		r := s.mixed()
		tok := outputVocabBase + int((r>>8)%uint64(len(outputWords)))
		if (r>>40)%eosOneIn == 0 {
			if !l.ignoreEOS && len(g.ids) >= l.min {
				if g.first < 0 {
					g.first = eosToken
				}
				g.finish = "stop"
				return g
			}
			tok = outputVocabBase + int((r>>16)%uint64(len(outputWords)))
		}
		if g.first < 0 {
			g.first = tok
		}
		g.ids = append(g.ids, tok)
		s = s.push(tok)
	}
	g.finish = "length"
	return g
}
