package discovery

import (
	"math"
	"testing"
)

func TestParseStats(t *testing.T) {
	want := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	got, err := ParseStats([]byte(`{"stats":{"a":{"running":2,"waiting":1,"kv_cache_usage":0.5,"observed_ms":1000},
		"b":{"running":-1,"observed_ms":1000},"c":{"running":"2","observed_ms":1000},"d":{"running":1},"x":{"running":1,"observed_ms":1}}}`), want)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["a"].Stats.Running != 2 || got["a"].Stats.KVCacheUsage != 0.5 || got["a"].Observed.UnixMilli() != 1000 {
		t.Fatalf("%+v", got)
	}
	for _, bad := range []string{`{`, `[]`, `{"stats":[]}`, `{}`} {
		if _, err := ParseStats([]byte(bad), want); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// FuzzParseStats: whatever the companion answers, parsing does not panic and
// keeps only finite, non-negative stats of wanted names.
func FuzzParseStats(f *testing.F) {
	f.Add([]byte(`{"stats":{"a":{"running":2,"waiting":1,"kv_cache_usage":0.5,"observed_ms":1000}}}`))
	f.Add([]byte(`{"stats":{"a":{"running":1e400,"observed_ms":1}}}`))
	f.Add([]byte(`{"stats":{"a":null}}`))
	want := map[string]bool{"a": true, "b": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseStats(data, want)
		if err != nil {
			return
		}
		for name, s := range got {
			if !want[name] {
				t.Fatalf("kept %q", name)
			}
			for _, x := range []float64{s.Stats.Running, s.Stats.Waiting, s.Stats.KVCacheUsage} {
				if !(x >= 0) || math.IsInf(x, 0) {
					t.Fatalf("kept %v", s)
				}
			}
		}
	})
}
