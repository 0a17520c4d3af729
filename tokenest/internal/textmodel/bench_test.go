package textmodel

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// BenchmarkText measures the replay alone on plain text of each class.
func BenchmarkText(b *testing.B) {
	for _, class := range []string{"english", "chinese", "code"} {
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
