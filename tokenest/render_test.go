package tokenest

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// renderValues returns JSON values to render: every chat sample's tool
// definitions and tool-call arguments, and values whose pieces and strings
// straddle renderer's buffer in every way (pieces longer than it,
// characters and escapes at its end, invalid UTF-8 next to escapes).
func renderValues(t testing.TB) [][]byte {
	var values [][]byte
	f, err := os.Open("testdata/samples/chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var s struct {
			Body struct {
				Messages []struct {
					ToolCalls []struct {
						Function struct {
							Arguments json.RawMessage `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"messages"`
				Tools []json.RawMessage `json:"tools"`
			} `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		for _, d := range s.Body.Tools {
			values = append(values, d)
		}
		for _, m := range s.Body.Messages {
			for _, c := range m.ToolCalls {
				values = append(values, c.Function.Arguments)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for n := renderBuf - 12; n <= renderBuf+12; n++ {
		pad := strings.Repeat("a", n)
		values = append(values,
			[]byte(`{"k": "`+pad+`\u00e9\u4e2d\ud83d\ude00 x"}`),
			[]byte(`["`+pad+`", "\u00e9", 1, "\xe4\xb8\u00ad\xad", "\/\n\u0001"]`),
			[]byte(`{"`+pad[:n/2]+`": ["`+pad+`x y"]}`),
			[]byte(`"`+strings.Repeat("é", n/2)+`\u0041\xe4"`))
	}
	return values
}

// TestRenderSplits checks that renderJSON, which scans the Renderer's
// parts a buffer at a time, counts what scanning the whole rendering at
// once counts, and so do parts of other lengths.
func TestRenderSplits(t *testing.T) {
	for _, v := range renderValues(t) {
		checkRenderSplits(t, v)
	}
}

func FuzzRenderSplits(f *testing.F) {
	for _, v := range renderValues(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if jsonraw.Valid(v) {
			checkRenderSplits(t, v)
		}
	})
}

func checkRenderSplits(t *testing.T, v []byte) {
	t.Helper()
	var buffered, whole textmodel.Counter
	renderJSON(&buffered, v)
	whole.Part(jsonraw.AppendPython(nil, v))
	whole.End(len(v))
	same := func(c *textmodel.Counter) bool {
		return *c.Features() == *whole.Features() && c.Estimate() == whole.Estimate() &&
			c.LastEnglishness() == whole.LastEnglishness()
	}
	if !same(&buffered) {
		t.Fatalf("%q: buffered %d %v, whole %d %v", v, buffered.Estimate(), buffered.Features(), whole.Estimate(), whole.Features())
	}
	for _, size := range []int{jsonraw.MinFill, jsonraw.MinFill + 1, 45, 64, 100} {
		var parts textmodel.Counter
		buf := make([]byte, size)
		r := jsonraw.NewRenderer(v)
		for n := r.Fill(buf); n > 0; n = r.Fill(buf) {
			parts.Part(buf[:n])
		}
		parts.End(len(v))
		if !same(&parts) {
			t.Fatalf("%q in parts of %d: %d %v, whole %d %v", v, size, parts.Estimate(), parts.Features(), whole.Estimate(), whole.Features())
		}
	}
}
