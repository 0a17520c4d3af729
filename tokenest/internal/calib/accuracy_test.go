package calib

import (
	"testing"

	"github.com/pdroute/pdroute/tokenest"
)

// TargetMAPE is the accuracy target of the Default method against cl100k on
// every required class, in percent.
const TargetMAPE = 10

// TestAccuracy asserts the Default method's mean absolute percentage error
// against cl100k on the checked-in samples (deterministic: no tokenizer runs
// here, the reference counts are stored with the samples).
func TestAccuracy(t *testing.T) {
	rows, err := Evaluate(checkedInSamples(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Class] = true
		t.Logf("%-8s default MAPE %.1f %% (p95 %.1f %%), chars4 MAPE %.1f %%", r.Class, r.Default[0].MAPE, r.Default[0].P95, r.Chars4[0].MAPE)
		if r.Default[0].MAPE >= TargetMAPE {
			t.Errorf("%s: default MAPE vs cl100k %.1f %%, target < %d %%", r.Class, r.Default[0].MAPE, TargetMAPE)
		}
	}
	for _, c := range Required {
		if !seen[c] {
			t.Errorf("class %s has no samples", c)
		}
	}
}

// TestSampleReferences recounts every checked-in sample with the real
// tokenizers, so that the stored counts the accuracy test trusts are right.
func TestSampleReferences(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the tokenizer vocabularies")
	}
	tk := tokenizers(t)
	for class, samples := range checkedInSamples(t) {
		for i, s := range samples {
			got := s
			if err := tk.Measure(&got); err != nil {
				t.Fatal(err)
			}
			if got.Cl100k != s.Cl100k || got.O200k != s.O200k {
				t.Errorf("%s[%d]: stored %d/%d, measured %d/%d (run tokcalib samples)", class, i, s.Cl100k, s.O200k, got.Cl100k, got.O200k)
			}
		}
	}
}

// TestTemplateOverhead checks tokenest's chat-template constants against
// the reference template: the reference count minus the cl100k counts of
// the variable parts (contents, names, tool JSON, call names and arguments)
// must equal Default's Overhead, up to one token per tool where the JSON's
// closing braces merge with the template's newline.
func TestTemplateOverhead(t *testing.T) {
	tk := tokenizers(t)
	tool := `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}`
	tests := []struct {
		name     string
		body     string
		slack    int
		variable []string // texts whose tokens are not overhead
	}{
		{"messages", `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`, 0,
			[]string{"Be brief.", "Hello there"}},
		{"name", `{"messages":[{"role":"user","name":"alice","content":"Hello there"}]}`, 0, []string{"alice", "Hello there"}},
		{"tools", `{"messages":[{"role":"user","content":"Hello there"}],"tools":[` + tool + `,` + tool + `]}`, 2,
			[]string{"Hello there", RenderJSON([]byte(tool)), RenderJSON([]byte(tool))}},
		{"tool call", `{"messages":[{"role":"user","content":"Hello there"},{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}]}`, 0,
			[]string{"Hello there", "get_weather", `{"city": "Paris"}`}},
	}
	for _, tt := range tests {
		s := Sample{Body: []byte(tt.body)}
		if err := tk.Measure(&s); err != nil {
			t.Fatal(err)
		}
		want := s.Cl100k
		for _, v := range tt.variable {
			n, _ := tk.Cl100k.Count(v)
			want -= n
		}
		r, err := tokenest.Estimate(s.Body, "/v1/chat/completions", tokenest.Default)
		if err != nil {
			t.Fatal(err)
		}
		if d := r.Breakdown.Overhead - want; d < -tt.slack || d > tt.slack {
			t.Errorf("%s: overhead %d, reference template %d", tt.name, r.Breakdown.Overhead, want)
		}
	}
}
