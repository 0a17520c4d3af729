package textmodel

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// sampleText returns the checked-in sample texts of a class, joined.
func sampleText(b testing.TB, class string) []byte {
	data, err := os.ReadFile("../../testdata/samples/" + class + ".jsonl")
	if err != nil {
		b.Fatal(err)
	}
	var text []byte
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var s struct{ Text string }
		if err := json.Unmarshal(line, &s); err != nil {
			b.Fatal(err)
		}
		text = append(text, s.Text...)
	}
	return text
}

// BenchmarkText measures the replay alone on plain text of each class.
func BenchmarkText(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		text := sampleText(b, class)
		b.Run(class, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				var c Counter
				c.Text(text)
			}
		})
	}
}

// BenchmarkJSONString measures the replay on the texts of BenchmarkText
// as tokenest reads them: one JSON string each, as encoding/json writes it
// (escapes decoded and validated on the way).
func BenchmarkJSONString(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		quoted, err := json.Marshal(string(sampleText(b, class)))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(class, func(b *testing.B) {
			b.SetBytes(int64(len(quoted)))
			b.ReportAllocs()
			for b.Loop() {
				var c Counter
				if c.JSONString(quoted, 0) != len(quoted) {
					b.Fatal("not read to its end")
				}
			}
		})
	}
}

// BenchmarkTextOtherScripts measures the replay on the other sample
// classes: scripts the block reader models too (kana, Hangul, German's
// ASCII), and scripts it leaves to fast and step (Cyrillic, Greek, Arabic,
// Hebrew, Thai, Devanagari), which pay only for the checks that send them
// there (BENCHMARKS.md (token estimation)).
func BenchmarkTextOtherScripts(b *testing.B) {
	for _, class := range []string{"japanese", "korean", "german", "json", "russian", "greek", "arabic", "hebrew", "thai", "hindi"} {
		text := sampleText(b, class)
		b.Run(class, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				var c Counter
				c.Text(text)
			}
		})
	}
}

// BenchmarkRunsFloor is the floor of any replay that reads a text piece by
// piece: it only splits the text into runs of bytes of the same class and
// counts them by class and length. What Text costs beyond it is the
// replay's own work (BENCHMARKS.md (token estimation)).
func BenchmarkRunsFloor(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		text := sampleText(b, class)
		b.Run(class, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var runs [8 * 8]uint32
			for b.Loop() {
				for i := 0; i < len(text); {
					cls := plainClass[text[i]]
					j := i + 1
					for j < len(text) && plainClass[text[j]] == cls {
						j++
					}
					runs[int(cls)*8+min(j-i, 7)]++
					i = j
				}
			}
			if runs[int(cLetter)*8+1] == 0 {
				b.Fatal("no one-letter runs")
			}
		})
	}
}

// BenchmarkShortText measures one short text (a chat message's name or a
// short argument): the per-text cost, mostly End's dot product.
func BenchmarkShortText(b *testing.B) {
	s := []byte("The quick brown fox, 42 times.")
	var c Counter
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		c.Text(s)
	}
}
