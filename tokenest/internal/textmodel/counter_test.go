package textmodel

import (
	"strings"
	"testing"
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
	b.JSONString([]byte(`line one\n\t\"quoted\" \u00e9 \ud83d\ude00`))
	if a.Estimate() != b.Estimate() || a.Estimate() == 0 {
		t.Errorf("plain %d, escaped %d", a.Estimate(), b.Estimate())
	}
}

// FuzzText: any bytes, plain or as a JSON string body, give an estimate ≥ 0
// and pieces that cover the input exactly.
func FuzzText(f *testing.F) {
	for _, s := range []string{"Hello world", "日本語", `a\u00e9\n`, "\xff\xfe", "  \n\t x", "\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Counter
		c.JSONString(b)
		if c.Estimate() < 0 {
			t.Fatal("negative estimate")
		}
		if got := strings.Join(pieces(string(b)), ""); got != string(b) {
			t.Fatalf("pieces cover %q, input %q", got, b)
		}
	})
}
