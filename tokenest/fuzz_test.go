package tokenest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

var fuzzPaths = []string{"/v1/completions", "/v1/chat/completions", "/v1/responses", "/generate"}

// FuzzEstimate feeds arbitrary bodies to every shape and method: no panic,
// estimates ≥ 0 that equal their breakdown, the one-pass walk agreeing
// with the ordered walk (same result, same error), Estimate's JSON verdict
// agreeing with encoding/json (see jsonObject), and PrefixKey agreeing with
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
		"{\"prompt\":\"\xff\\u12\"}", `{"prompt":"` + "\\" + `"}`, `[]`, `{"messages":[]}`, `{"prompt":"a","prompt":[7]}`,
		`{"input":[{"content":"hi","role":"user","type":"message"},{"role":"user","type":"function_call","name":"f"}],"instructions":"x"}`,
		`{"tools":[{"type":"function"}],"messages":[{"content":[{"text":"late type","type":"text"}],"role":"user","name":"n"}]}`,
		// nulls the walk reads without jsonraw.Skip, and near misses
		`{"messages":[{"role":"user","content":null,"x":null}],"tools":null,"y":null}`, `{"messages":[{"role":"user","content":nullx}]}`,
		`{"messages":[{"role":"user","x":nul}]}`, `{"messages":[{"role":"user"}],"y":nul`} {
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
			ordered := tally{method: m, ordered: true}
			oerr := ordered.walkOrdered(body, shapes[path])
			if (err == nil) != (oerr == nil) || err != nil && err.Error() != oerr.Error() {
				t.Fatalf("%s %v: one pass says %v, ordered walk %v", path, m, err, oerr)
			}
			if obj := jsonObject(body); obj != !errors.Is(err, ErrNotJSON) {
				t.Fatalf("%s %v: %q is a JSON object: %v, but Estimate returned %v", path, m, body, obj, err)
			}
			if err != nil {
				continue
			}
			if o := ordered.result(); o != r {
				t.Fatalf("%s %v: one pass %+v, ordered walk %+v", path, m, r, o)
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

var shapes = map[string]shape{"/v1/completions": completions, "/v1/chat/completions": chat, "/v1/responses": responses, "/generate": generate}

// jsonObject is the oracle of Estimate's JSON guarantee: body is one valid
// JSON value for encoding/json, its top level is an object, and it nests at
// most jsonraw.MaxDepth deep.
func jsonObject(body []byte) bool {
	if !json.Valid(body) {
		return false
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return false
	}
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest <= jsonraw.MaxDepth
}
