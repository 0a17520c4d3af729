package tokenest

import (
	"math"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
)

// sampledMaxError bounds, in percent, how far EstimateNear's extrapolated
// estimate of a long body may be from Estimate's whole reading.
const sampledMaxError = 3.0

// textClasses are the sample classes whose samples are texts.
var textClasses = []string{"english", "code", "json", "chinese", "japanese", "korean", "russian", "german",
	"greek", "arabic", "hebrew", "thai", "hindi"}

// TestSampledAccuracy compares EstimateNear, which reads long strings in
// part, with Estimate on the documents of sampledBodies: prompts of every
// class from 4k to 128k tokens (also \u-escaped), documents that change
// language every 150 to 8 000 tokens, prose and code in turns, documents
// whose second half is in another script (also \u-escaped) and long
// chats. The difference must stay within sampledMaxError on each. (The
// accuracy table's samples are all shorter than sampleMin: EstimateNear
// reads them whole, as Estimate does.)
func TestSampledAccuracy(t *testing.T) {
	worst := map[string]float64{}
	var groups []string
	sampled := 0
	for _, c := range sampledBodies(t) {
		whole, err := Estimate(c.b, c.path, Default)
		if err != nil {
			t.Fatal(c.name, err)
		}
		part, err := EstimateNear(c.b, c.path, Default, 0, nil)
		if err != nil {
			t.Fatal(c.name, err)
		}
		e := 100 * float64(part.Tokens-whole.Tokens) / float64(whole.Tokens)
		if _, ok := worst[c.group]; !ok {
			groups = append(groups, c.group)
		}
		worst[c.group] = max(worst[c.group], math.Abs(e))
		if part.Sampled {
			sampled++
		}
		t.Logf("%-12s %-26s %7d bytes: whole %6d, sampled %6d (%v): %+.2f %%", c.group, c.name, len(c.b), whole.Tokens, part.Tokens, part.Sampled, e)
		if math.Abs(e) > sampledMaxError {
			t.Errorf("%s %s (%d bytes): sampled %d, whole %d: %+.2f %%, bound ±%.1f %%", c.group, c.name, len(c.b), part.Tokens, whole.Tokens, e, sampledMaxError)
		}
		if !part.Sampled && c.group != "chat" && len(c.b) >= sampleMin+1<<10 {
			// one string nearly as long as the body: its sample did not fit
			t.Errorf("%s %s (%d bytes): read whole", c.group, c.name, len(c.b))
		}
		if part.Sampled && len(c.b) < sampleMin || whole.Sampled {
			t.Errorf("%s (%d bytes): Sampled %v, whole %v", c.name, len(c.b), part.Sampled, whole.Sampled)
		}
	}
	for _, g := range groups {
		t.Logf("largest difference, %-12s %.2f %%", g, worst[g])
	}
	if sampled < 60 {
		t.Errorf("%d documents read in part: the test no longer tests sampling", sampled)
	}
}

// TestEstimateNearThreshold checks that a sampled estimate near the
// threshold is replaced by the whole reading, and that EstimateNear
// allocates nothing either way.
func TestEstimateNearThreshold(t *testing.T) {
	b, err := benchdata.Prompt("testdata/samples", "code", 55<<10)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := Estimate(b, "/v1/completions", Default)
	far, _ := EstimateNear(b, "/v1/completions", Default, 4*whole.Tokens, nil)
	if !far.Sampled {
		t.Fatalf("threshold far from the estimate: not sampled")
	}
	for _, thr := range []int{whole.Tokens, whole.Tokens * 9 / 10, whole.Tokens * 11 / 10} {
		near, _ := EstimateNear(b, "/v1/completions", Default, thr, nil)
		if near.Sampled || near != whole {
			t.Errorf("threshold %d, whole estimate %d: got %+v, want the whole reading %+v", thr, whole.Tokens, near, whole)
		}
	}
	for _, thr := range []int{0, whole.Tokens} {
		if n := testing.AllocsPerRun(10, func() { _, _ = EstimateNear(b, "/v1/completions", Default, thr, nil) }); n != 0 {
			t.Errorf("threshold %d: %.0f allocations per estimate", thr, n)
		}
	}
	// malformed bodies are still refused: the sampled string is validated whole
	bad := append([]byte(nil), b...)
	bad[len(bad)/2] = 0x01
	if _, err := EstimateNear(bad, "/v1/completions", Default, 0, nil); err != ErrNotJSON {
		t.Errorf("a control byte in the middle of a long prompt: %v, want ErrNotJSON", err)
	}
}

// FuzzEstimateNear puts the input in the middle of a prompt long enough to
// be read in part, so that the windows cut through it: EstimateNear must
// accept and refuse what Estimate does, and never panic.
func FuzzEstimateNear(f *testing.F) {
	for _, s := range []string{`plain`, `\n\"\\`, `\u4e2d\u6587`, "中文 текст", `\ud83d\ude00`, `\`, "\x01", `"`, `\\\"`} {
		f.Add([]byte(s))
	}
	pad := strings.Repeat("word ", 6<<10)
	f.Fuzz(func(t *testing.T, in []byte) {
		body := []byte(`{"prompt":"` + pad + string(in) + pad + string(in) + pad + `"}`)
		whole, errW := Estimate(body, "/v1/completions", Default)
		part, errP := EstimateNear(body, "/v1/completions", Default, 0, nil)
		if (errW == nil) != (errP == nil) {
			t.Fatalf("Estimate: %v, EstimateNear: %v", errW, errP)
		}
		if errW == nil && (part.Tokens <= 0) != (whole.Tokens <= 0) {
			t.Fatalf("whole %d, sampled %d", whole.Tokens, part.Tokens)
		}
	})
}
