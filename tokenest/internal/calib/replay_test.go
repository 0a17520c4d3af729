package calib

import (
	"sync"
	"testing"
)

var (
	tkOnce sync.Once
	tk     *Tokenizers
	tkErr  error
)

// tokenizers loads the reference vocabularies once per test binary.
func tokenizers(t testing.TB) *Tokenizers {
	tkOnce.Do(func() { tk, tkErr = NewTokenizers() })
	if tkErr != nil {
		t.Fatal(tkErr)
	}
	return tk
}

func checkedInSamples(t testing.TB) map[string][]Sample {
	set, err := ReadSampleSet("../../testdata/samples")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Required {
		if len(set[c]) == 0 {
			t.Fatalf("no checked-in samples for class %s", c)
		}
	}
	return set
}

// TestReplayMatchesPreTokenizer checks that the replay cuts text exactly
// where cl100k's pre-tokenizer does: BPE never merges across pieces, so the
// token counts of the pieces add up to the count of the whole text only if
// every cut is right.
func TestReplayMatchesPreTokenizer(t *testing.T) {
	tk := tokenizers(t)
	for class, samples := range checkedInSamples(t) {
		for i, s := range samples {
			if s.Text == "" {
				continue
			}
			pieces, _, _ := Pieces(s.Text)
			sum := 0
			joined := 0
			for _, p := range pieces {
				n, err := tk.Cl100k.Count(p)
				if err != nil {
					t.Fatal(err)
				}
				sum += n
				joined += len(p)
			}
			if len(pieces) < 2 && s.Cl100k > 20 {
				t.Errorf("%s[%d]: only %d pieces for %d tokens", class, i, len(pieces), s.Cl100k)
			}
			if joined != len(s.Text) {
				t.Errorf("%s[%d]: pieces cover %d of %d bytes", class, i, joined, len(s.Text))
				continue
			}
			if sum != s.Cl100k {
				t.Errorf("%s[%d]: pieces count %d tokens, whole text %d", class, i, sum, s.Cl100k)
			}
		}
	}
}
