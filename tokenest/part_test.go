package tokenest

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// TestJSONPartsMatchString checks that a string's raw bytes counted in
// parts cut as cut cuts (textmodel.Counter.JSONPart, then End), as
// EstimateNear counts its windows a buffer at a time, cost what the string
// read whole does, within 0.1 %: a piece at the end of a part is decided
// without the next part's first character (a token at a few of the
// boundaries), so the two differ by up to 0.05 % on the samples.
func TestJSONPartsMatchString(t *testing.T) {
	for _, class := range textClasses {
		for _, esc := range []bool{false, true} {
			raw, _ := json.Marshal(classText(t, class, 4<<10))
			if esc {
				raw = benchdata.ASCIIOnly(raw)
			}
			var whole textmodel.Counter
			if whole.JSONString(raw, 0) != len(raw) {
				t.Fatal("not a string")
			}
			var parts textmodel.Counter
			buf := make([]byte, 0, len(raw))
			for i := 1; i < len(raw)-1; {
				j := cut(raw, min(i+1000, len(raw)-1), len(raw)-1)
				if j <= i {
					t.Fatalf("%s: no cut after %d", class, i)
				}
				buf = append(append(append(buf[:0], '"'), raw[i:j]...), '"')
				if got := parts.JSONPart(buf, 0); got != len(buf)-1 {
					t.Fatalf("%s: JSONPart = %d, want %d", class, got, len(buf)-1)
				}
				i = j
			}
			parts.End(0)
			if w, p := whole.Cost(), parts.Cost(); math.Abs(float64(p-w)) > 0.001*float64(w) {
				t.Errorf("%s (escaped %v): whole %d, in parts %d (%+.4f %%)", class, esc, w, p, 100*float64(p-w)/float64(w))
			}
		}
	}
}
