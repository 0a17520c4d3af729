package textmodel

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// pieces splits text with the replay.
func pieces(text string) []string {
	var out []string
	start := 0
	c := Counter{Trace: func(_ int, end int) {
		out = append(out, text[start:end])
		start = end
	}}
	c.Text([]byte(text))
	return out
}

// TestPieces pins the replay of cl100k's pre-tokenizer on its tricky
// cases (internal/calib checks it against the real tokenizer on the samples).
func TestPieces(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"Hello world", "Hello| world"},
		{"in 2024, 12345", "in| |2024|,| |12345"}, // a digit run is one piece of ⌈n/3⌉ groups
		{"foo.bar(baz)", "foo|.bar|(baz|)"},
		{"a  b", "a| | b"},
		{"x;\n\n  y", "x|;\n\n| | y"},
		{"end.  \n  ", "end|.|  \n|  "},
		{"  (self", " | (|self"},
		{"\tint x", "\tint| x"},
		{"Linux系统，好。", "Linux系统|，好|。"},
		{"नमस्ते", "नमस|्त|े"},
		{"don't", "don|'t"},
	} {
		if got := strings.Join(pieces(tt.text), "|"); got != tt.want {
			t.Errorf("%q: pieces %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestEnglishness(t *testing.T) {
	for _, tt := range []struct {
		text     string
		min, max float64
	}{
		{"the cat and the dog went to the park with all of them", 0.9, 1},
		{"der Hund und die Katze sind mit dem Ball auf der Wiese", 0, 0.2},
		{"func main() { x := 1 }", 1, 1}, // no function words: English
	} {
		var c Counter
		c.Text([]byte(tt.text))
		if e := c.LastEnglishness(); e < tt.min || e > tt.max {
			t.Errorf("%q: englishness %.2f, want [%.2f, %.2f]", tt.text, e, tt.min, tt.max)
		}
	}
	// German words of the same shapes cost more than English ones.
	var en, de Counter
	en.Text([]byte("the information is available for the system and the user"))
	de.Text([]byte("die Informationen sind verfügbar für das System und den Nutzer"))
	if en.Estimate() >= de.Estimate() {
		t.Errorf("english %d ≥ german %d", en.Estimate(), de.Estimate())
	}
}

func TestJSONStringMatchesText(t *testing.T) {
	var a, b Counter
	a.Text([]byte("line one\n\t\"quoted\" é 😀"))
	quoted := []byte(`"line one\n\t\"quoted\" \u00e9 \ud83d\ude00"`)
	if end := b.JSONString(quoted, 0); end != len(quoted) {
		t.Errorf("JSONString returned %d, want %d", end, len(quoted))
	}
	if a.Estimate() != b.Estimate() || a.Estimate() == 0 {
		t.Errorf("plain %d, escaped %d", a.Estimate(), b.Estimate())
	}
}

// FuzzText: any bytes, plain or as a JSON string body, give an estimate ≥ 0
// and pieces that cover the input exactly; as a JSON string, the scan
// accepts exactly what encoding/json does and ends at the closing quote.
func FuzzText(f *testing.F) {
	for _, s := range []string{"Hello world", "日本語", `a\u00e9\n`, "\xff\xfe", "  \n\t x", "\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Counter
		quoted := append(append([]byte{'"'}, b...), '"')
		end := c.JSONString(quoted, 0)
		if c.Estimate() < 0 {
			t.Fatal("negative estimate")
		}
		if valid := json.Valid(quoted); valid != (end == len(quoted)) {
			t.Fatalf("JSONString(%q) = %d, encoding/json says valid=%v", quoted, end, valid)
		}
		if got := strings.Join(pieces(string(b)), ""); got != string(b) {
			t.Fatalf("pieces cover %q, input %q", got, b)
		}
	})
}

// TestLangTable checks that the perfect hash keeps every listed function
// word, with its language, and that other words are not found.
func TestLangTable(t *testing.T) {
	for lang, words := range map[uint32][]string{langEnglish: englishWords, langOther: otherWords} {
		for _, w := range words {
			if got := wordLang(packWord(w)); got != lang {
				t.Errorf("%q: language %d, want %d", w, got, lang)
			}
		}
	}
	for _, w := range []string{"xyz", "tha", "dog", "ab", "thee"} {
		if got := wordLang(packWord(w)); got != 0 {
			t.Errorf("%q: language %d, want none", w, got)
		}
	}
}

// TestDecodeRune checks the inline decoder against utf8.DecodeRune on
// every one-, two- and three-byte prefix and on short and broken input.
func TestDecodeRune(t *testing.T) {
	check := func(b []byte) {
		r, n := decodeRune(b)
		wr, wn := utf8.DecodeRune(b)
		if r != wr || n != wn {
			t.Fatalf("decodeRune(% x) = %U, %d; utf8.DecodeRune %U, %d", b, r, n, wr, wn)
		}
	}
	for b0 := range 256 {
		check([]byte{byte(b0)})
		for b1 := range 256 {
			check([]byte{byte(b0), byte(b1)})
			if b0 >= 0xE0 && b0 < 0xF0 {
				for _, b2 := range []byte{0x00, 0x7F, 0x80, 0xA5, 0xBF, 0xC0} {
					check([]byte{byte(b0), byte(b1), b2})
				}
			}
		}
	}
}

// TestInfoOf checks the class tables against classify on every rune.
func TestInfoOf(t *testing.T) {
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if got, want := infoOf(r), pack(classify(r)); got != want {
			t.Fatalf("infoOf(%U) = %#x, classify says %#x", r, got, want)
		}
	}
}

// stepOnly feeds s[i:] (plain text, or a JSON string body when json)
// through step alone, one character at a time, classified by classify: the
// replay's definition, which scan's faster readers must reproduce.
func stepOnly(c *Counter, s []byte, i int, json bool) int {
	for i < len(s) {
		var (
			r          rune
			size, ulen int
		)
		switch b := s[i]; {
		case json && b == '"':
			return i
		case json && b < 0x20:
			return -1
		case json && b == '\\':
			if r, size = jsonraw.DecodeEscape(s[i:]); size == 0 {
				return -1
			}
			ulen = utf8.RuneLen(r)
		case b < utf8.RuneSelf:
			r, size, ulen = rune(b), 1, 1
		default:
			r, size = utf8.DecodeRune(s[i:])
			ulen = size
		}
		cls, script, upper, accented := classify(r)
		for !c.step(r, cls, script, upper, accented, ulen, i) {
		}
		i += size
	}
	if json {
		return -1
	}
	return i
}

// traced is one piece as Trace reports it, with the counts so far.
type traced struct {
	feature, end int
	counts       [NumFeatures]uint32
}

func trace(c *Counter) *[]traced {
	var pieces []traced
	c.Trace = func(f, end int) { pieces = append(pieces, traced{f, end, c.feat}) }
	return &pieces
}

// FuzzFastMatchesStep checks that scan (fast, step's runs, the tables) cuts
// any text, plain or as a JSON string, into exactly the pieces step alone
// does, with the same features counted by each piece and the same
// estimate.
func FuzzFastMatchesStep(f *testing.F) {
	for _, s := range []string{"Hello world, it's 2024.\n\n\tfunc main() {}", "日本語のテキスト。Linux系统", `a\u00e9\n\t\"x\"`,
		"\xff\xfe  \n\t x", "\\", "camelCaseWORDs Xy", "don't  (self  \r\n  end.  ", "Съешь же ещё", "नमस्ते"} {
		f.Add([]byte(s))
	}
	f.Fuzz(fastMatchesStep)
}

// TestFastMatchesStep runs FuzzFastMatchesStep's check on every
// checked-in sample text, and on each as a JSON string.
func TestFastMatchesStep(t *testing.T) {
	files, err := filepath.Glob("../../testdata/samples/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var s struct{ Text string }
			if err := json.Unmarshal(line, &s); err != nil {
				t.Fatal(err)
			}
			fastMatchesStep(t, []byte(s.Text))
			escaped, _ := json.Marshal(s.Text)
			fastMatchesStep(t, escaped[1:len(escaped)-1])
		}
	}
}

func fastMatchesStep(t *testing.T, b []byte) {
	var fast, ref Counter
	got, want := trace(&fast), trace(&ref)
	fast.Text(b)
	stepOnly(&ref, b, 0, false)
	ref.End(len(b))
	if !equalTraces(*got, *want) || fast.Estimate() != ref.Estimate() {
		t.Fatalf("plain %q: pieces %v, step alone %v", b, *got, *want)
	}
	quoted := append(append([]byte{'"'}, b...), '"')
	fast, ref = Counter{}, Counter{}
	got, want = trace(&fast), trace(&ref)
	end := fast.JSONString(quoted, 0)
	refEnd := stepOnly(&ref, quoted, 1, true)
	if refEnd >= 0 {
		ref.End(refEnd)
		refEnd++
	}
	if end != refEnd {
		t.Fatalf("JSON %q: JSONString ends at %d, step alone at %d", quoted, end, refEnd)
	}
	if end >= 0 && (!equalTraces(*got, *want) || fast.Estimate() != ref.Estimate()) {
		t.Fatalf("JSON %q: pieces %v, step alone %v", quoted, *got, *want)
	}
}

func equalTraces(a, b []traced) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
