package tokenest

import (
	"testing"
)

var fuzzPaths = []string{"/v1/completions", "/v1/chat/completions", "/v1/responses", "/generate"}

// FuzzEstimate feeds arbitrary bodies to every shape and method: no panic,
// estimates ≥ 0 that equal their breakdown, and PrefixKey agreeing with
// Estimate on whether the body is acceptable when it reads all of it.
func FuzzEstimate(f *testing.F) {
	for name, body := range requests(f) {
		for i, p := range fuzzPaths {
			if p == requestPath(name) {
				f.Add(body, uint8(i))
			}
		}
	}
	for _, s := range []string{`{"prompt":[[1,2],[3]]}`, `{"messages":[{"role":"user","content":[{"type":"text","text":"\ud83d\ude00"}]}]}`,
		`{"input":[{"type":"function_call","name":"f","arguments":{"a":[1,{"b":null}]}}]}`, `{"text":["a","b"],"image_data":[null,"x"]}`,
		"{\"prompt\":\"\xff\\u12\"}", `{"prompt":"` + "\\" + `"}`, `[]`, `{"messages":[]}`} {
		for i := range fuzzPaths {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, pathIndex uint8) {
		path := fuzzPaths[int(pathIndex)%len(fuzzPaths)]
		var errs [2]error
		for i, m := range []Method{Default, Chars4} {
			r, err := Estimate(body, path, m)
			errs[i] = err
			if err != nil {
				continue
			}
			b := r.Breakdown
			if r.Tokens < 0 || r.Tokens != b.Total() || b.Text < 0 || b.TokenIDs < 0 || b.Images < 0 || b.Audio < 0 ||
				b.OtherMedia < 0 || b.Tools < 0 || b.Overhead < 0 {
				t.Fatalf("%s %v: bad result %+v", path, m, r)
			}
		}
		if (errs[0] == nil) != (errs[1] == nil) {
			t.Fatalf("methods disagree on validity: %v / %v", errs[0], errs[1])
		}
		_, err := PrefixKey(body, path, 0) // n = 0 reads everything
		if (err == nil) != (errs[0] == nil) {
			t.Fatalf("PrefixKey error %v, Estimate error %v", err, errs[0])
		}
		if _, err := PrefixKey(body, path, 64); err != nil && errs[0] == nil {
			t.Fatalf("PrefixKey(64) failed on a valid body: %v", err)
		}
	})
}
