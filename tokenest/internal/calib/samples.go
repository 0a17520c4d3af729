// Package calib measures tokenest against real BPE tokenizers: it builds the
// text samples (from installed Debian packages, source trees and generated
// JSON and chat bodies), counts their tokens with cl100k_base and o200k_base
// (github.com/tiktoken-go/tokenizer), fits the weights of the default
// method, and prints the accuracy table. It is a development tool: package
// tokenest never imports it, so the tokenizer's vocabularies never reach the
// wasm module.
package calib

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Sample classes. Required ones carry the accuracy target; the others are
// reported for information (their text is short UI messages, not prose).
const (
	ClassEnglish  = "english"
	ClassCode     = "code"
	ClassJSON     = "json"
	ClassChinese  = "chinese"
	ClassJapanese = "japanese"
	ClassKorean   = "korean"
	ClassRussian  = "russian"
	ClassGerman   = "german"
	ClassChat     = "chat"
	ClassGreek    = "greek"
	ClassArabic   = "arabic"
	ClassHebrew   = "hebrew"
	ClassThai     = "thai"
	ClassHindi    = "hindi"

	// ClassOtherLatin (French, Spanish, Italian, Portuguese, Dutch) only
	// feeds the fit, so that the non-English Latin weights are not German's
	// alone.
	ClassOtherLatin = "latin-other"
)

// Required lists the classes the accuracy target applies to, in report order.
var Required = []string{ClassEnglish, ClassCode, ClassJSON, ClassChinese, ClassJapanese, ClassKorean, ClassRussian, ClassGerman, ClassChat}

// Informational lists the extra script classes, in report order.
var Informational = []string{ClassGreek, ClassArabic, ClassHebrew, ClassThai, ClassHindi}

// A Sample is one measured input: a text (sent as a /v1/completions prompt)
// or, for the chat class, a whole /v1/chat/completions body; with its token
// counts under both reference tokenizers.
type Sample struct {
	Text   string          `json:"text,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Cl100k int             `json:"cl100k"`
	O200k  int             `json:"o200k"`
}

// SampleFile is where a class's checked-in samples live under dir.
func SampleFile(dir, class string) string { return filepath.Join(dir, class+".jsonl") }

// ReadSamples reads one JSON object per line.
func ReadSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, len(out)+1, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// WriteSamples writes one JSON object per line.
func WriteSamples(path string, samples []Sample) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// Generator draws sample texts. Test selects the files reserved for the
// checked-in samples (IsTestFile) instead of the fitting files.
type Generator struct {
	Rng    *rand.Rand
	Test   bool
	MinLen int // bytes; windows are drawn log-uniformly in [MinLen, MaxLen]
	MaxLen int

	sources map[string][]Source
	files   map[*Source][]string
	texts   map[string]string
	turn    map[string]int
}

// NewGenerator returns a generator with a fixed seed.
func NewGenerator(seed uint64, test bool, minLen, maxLen int) *Generator {
	return &Generator{
		Rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), Test: test,
		MinLen: minLen, MaxLen: maxLen,
		sources: Sources(), files: map[*Source][]string{}, texts: map[string]string{}, turn: map[string]int{},
	}
}

// Available says whether the class's source files are installed.
func (g *Generator) Available(class string) bool {
	for i := range g.sources[class] {
		if len(g.filesOf(&g.sources[class][i])) > 0 {
			return true
		}
	}
	return false
}

func (g *Generator) filesOf(src *Source) []string {
	if f, ok := g.files[src]; ok {
		return f
	}
	var keep []string
	for _, f := range src.Files() {
		if IsTestFile(f) == g.Test {
			keep = append(keep, f)
		}
	}
	g.files[src] = keep
	return keep
}

// Text draws one window of a class's text, or "" when none is installed.
func (g *Generator) Text(class string) string {
	switch class {
	case ClassJSON:
		return g.JSON(g.length())
	}
	srcs := g.sources[class]
	if len(srcs) == 0 {
		return ""
	}
	for range 200 {
		k := g.turn[class] % len(srcs)
		g.turn[class]++
		src := &srcs[k]
		files := g.filesOf(src)
		if len(files) == 0 {
			continue
		}
		path := files[g.Rng.IntN(len(files))]
		text, ok := g.texts[path]
		if !ok {
			text = src.ReadText(path)
			g.texts[path] = text
		}
		if w := g.window(text, g.length()); w != "" {
			return w
		}
	}
	return ""
}

func (g *Generator) length() int {
	lo, hi := math.Log(float64(g.MinLen)), math.Log(float64(g.MaxLen))
	return int(math.Exp(lo + g.Rng.Float64()*(hi-lo)))
}

// window cuts about n bytes from text, starting and ending at line breaks.
func (g *Generator) window(text string, n int) string {
	if len(text) < g.MinLen {
		return ""
	}
	start := 0
	if len(text) > n {
		start = g.Rng.IntN(len(text) - n)
		if i := strings.IndexByte(text[start:], '\n'); i >= 0 && start+i+1 < len(text) {
			start += i + 1
		}
	}
	end := min(start+n, len(text))
	if i := strings.IndexByte(text[end:], '\n'); i >= 0 && i < n/2 {
		end += i
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end++
	}
	w := strings.TrimSpace(text[start:end])
	if len(w) < g.MinLen/2 {
		return ""
	}
	return w
}
