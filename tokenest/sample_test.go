package tokenest

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
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
// whose second half is in another script (also \u-escaped), long chats,
// conversations of 3 to 120 turns of every class and of classes in turn
// (read in part by the body's spread), and conversations beside an image
// of up to 1 MB (their text too sparse for the spread: read whole). The difference must stay within sampledMaxError on each. (The
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
		if !part.Sampled && c.group != "chat" && c.group != "sparse" && !strings.HasPrefix(c.group, "turns") && len(c.b) >= sampleMin+1<<10 {
			// one string nearly as long as the body: its sample did not fit
			t.Errorf("%s %s (%d bytes): read whole", c.group, c.name, len(c.b))
		}
		if !part.Sampled && strings.HasPrefix(c.group, "turns") && !strings.Contains(c.name, "/8k/") && !strings.HasSuffix(c.name, "/120") {
			// turns of 1 KB and more in a body of 100 KB and more (in 120
			// turns some scripts' turns are shorter, and too few)
			t.Errorf("%s %s (%d bytes): read whole, not by the body's spread", c.group, c.name, len(c.b))
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
// allocates nothing either way, for a long string and for a conversation
// read by the body's spread.
func TestEstimateNearThreshold(t *testing.T) {
	b, err := benchdata.Prompt("testdata/samples", "code", 55<<10)
	if err != nil {
		t.Fatal(err)
	}
	turns := turnsBody(splitText(classText(t, "english", 32<<10), 20, 1))
	for _, c := range []struct {
		path string
		body []byte
	}{{"/v1/completions", b}, {"/v1/chat/completions", turns}} {
		whole, _ := Estimate(c.body, c.path, Default)
		far, _ := EstimateNear(c.body, c.path, Default, 4*whole.Tokens, nil)
		if !far.Sampled {
			t.Fatalf("%s: threshold far from the estimate: not sampled", c.path)
		}
		for _, thr := range []int{whole.Tokens, whole.Tokens * 9 / 10, whole.Tokens * 11 / 10} {
			near, _ := EstimateNear(c.body, c.path, Default, thr, nil)
			if near.Sampled || near != whole {
				t.Errorf("%s: threshold %d, whole estimate %d: got %+v, want the whole reading %+v", c.path, thr, whole.Tokens, near, whole)
			}
		}
		for _, thr := range []int{0, whole.Tokens} {
			if n := testing.AllocsPerRun(10, func() { _, _ = EstimateNear(c.body, c.path, Default, thr, nil) }); n != 0 {
				t.Errorf("%s: threshold %d: %.0f allocations per estimate", c.path, thr, n)
			}
		}
	}
	// malformed bodies are still refused: the sampled string is validated whole
	bad := append([]byte(nil), b...)
	bad[len(bad)/2] = 0x01
	if _, err := EstimateNear(bad, "/v1/completions", Default, 0, nil); err != ErrNotJSON {
		t.Errorf("a control byte in the middle of a long prompt: %v, want ErrNotJSON", err)
	}
	// and so is every turn of a conversation read by the spread
	bad = append([]byte(nil), turns...)
	bad[len(bad)/3] = 0x01
	if _, err := EstimateNear(bad, "/v1/chat/completions", Default, 0, nil); err != ErrNotJSON {
		t.Errorf("a control byte in a turn of a long conversation: %v, want ErrNotJSON", err)
	}
}

// TestSpreadWithoutWindows checks the spread's fallback: a body whose
// strings of sampleMinPart to sampleMin bytes are few next to its stride
// (most of it a long string read in part by itself) may have no window
// land in them; they are then read whole, so that the estimate is the
// long string's sample plus their whole reading.
func TestSpreadWithoutWindows(t *testing.T) {
	long := classText(t, "english", 128<<10) // a stride of ~2.6 KB
	turn := classText(t, "english", 300)     // ~1.2 KB
	alone, _ := EstimateNear(turnsBody([]string{long}), "/v1/chat/completions", Default, 0, nil)
	found := 0
	for pad := 0; pad < 2000 && found < 3; pad += 97 {
		first := strings.Repeat("a ", pad/2) + turn
		body := turnsBody([]string{first, long})
		// the first turn's raw bytes, and whether a window of the body's
		// stride falls in them
		v := bytes.Index(body, []byte(`"content":"`)) + len(`"content":`)
		end := jsonraw.SkipString(body, v)
		var sp spread
		sp.reset(len(body))
		if !sp.add(body, v, v+1, end-1, 0) {
			t.Fatalf("pad %d: the first turn is not read in part", pad)
		}
		if sp.windows > 0 {
			continue
		}
		found++
		part, err := EstimateNear(body, "/v1/chat/completions", Default, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		whole, _ := Estimate(turnsBody([]string{first}), "/v1/chat/completions", Default)
		// the long turn's sample and the first turn read whole, the
		// reply primer counted once (±1: each estimate rounds its own sum)
		if want := alone.Tokens + whole.Tokens - replyPrimer; !part.Sampled || part.Tokens < want-1 || part.Tokens > want+1 {
			t.Errorf("pad %d: %d tokens (sampled %v), want %d ± 1", pad, part.Tokens, part.Sampled, want)
		}
	}
	if found == 0 {
		t.Fatal("no padding left the first turn without a window: the test tests nothing")
	}
	t.Logf("%d paddings left the first turn without a window", found)
}

// FuzzEstimateNear puts the input in the middle of a prompt long enough to
// be read in part, so that the windows cut through it, and into every turn
// of a conversation long enough for the body's spread: EstimateNear must
// accept and refuse what Estimate does, and never panic.
func FuzzEstimateNear(f *testing.F) {
	for _, s := range []string{`plain`, `\n\"\\`, `\u4e2d\u6587`, "中文 текст", `\ud83d\ude00`, `\`, "\x01", `"`, `\\\"`} {
		f.Add([]byte(s))
	}
	pad := strings.Repeat("word ", 6<<10)
	turn := strings.Repeat("word ", 300)
	f.Fuzz(func(t *testing.T, in []byte) {
		prompt := []byte(`{"prompt":"` + pad + string(in) + pad + string(in) + pad + `"}`)
		var chat strings.Builder
		chat.WriteString(`{"messages":[`)
		for i := range 24 {
			if i > 0 {
				chat.WriteByte(',')
			}
			chat.WriteString(`{"role":"user","content":"` + turn + string(in) + turn + `"}`)
		}
		chat.WriteString(`]}`)
		for _, c := range []struct {
			path string
			body []byte
		}{{"/v1/completions", prompt}, {"/v1/chat/completions", []byte(chat.String())}} {
			whole, errW := Estimate(c.body, c.path, Default)
			part, errP := EstimateNear(c.body, c.path, Default, 0, nil)
			if (errW == nil) != (errP == nil) {
				t.Fatalf("%s: Estimate: %v, EstimateNear: %v", c.path, errW, errP)
			}
			if errW == nil && (part.Tokens <= 0) != (whole.Tokens <= 0) {
				t.Fatalf("%s: whole %d, sampled %d", c.path, whole.Tokens, part.Tokens)
			}
		}
	})
}
