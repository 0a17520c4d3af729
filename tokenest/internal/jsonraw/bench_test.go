package jsonraw

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// BenchmarkCountString measures CountString alone on the checked-in sample
// texts of three classes, each joined into one JSON string as
// encoding/json writes it (so <, > and & are \u escapes).
func BenchmarkCountString(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		quoted := quotedSamples(b, class)
		b.Run(class, func(b *testing.B) {
			b.SetBytes(int64(len(quoted)))
			for b.Loop() {
				if end, _ := CountString(quoted, 0); end != len(quoted) {
					b.Fatal("not a string")
				}
			}
		})
	}
}

// BenchmarkSkipString measures SkipString, the validation of a long
// string that EstimateNear counts in part, on the texts of
// BenchmarkCountString.
func BenchmarkSkipString(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
		quoted := quotedSamples(b, class)
		b.Run(class, func(b *testing.B) {
			b.SetBytes(int64(len(quoted)))
			for b.Loop() {
				if SkipString(quoted, 0) != len(quoted) {
					b.Fatal("not a string")
				}
			}
		})
	}
}

// quotedSamples returns the checked-in sample texts of a class, each
// followed by a blank line, joined into one JSON string as encoding/json
// writes it (so <, > and & are \u escapes).
func quotedSamples(b *testing.B, class string) []byte {
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
		text = append(append(text, s.Text...), "\n\n"...)
	}
	quoted, err := json.Marshal(string(text))
	if err != nil {
		b.Fatal(err)
	}
	return quoted
}
