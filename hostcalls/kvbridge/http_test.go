package kvbridge

import (
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzParseWaitRequest checks that whatever the body, a POST /v1/kv/wait
// either fails or yields waits within every documented limit.
func FuzzParseWaitRequest(f *testing.F) {
	f.Add([]byte(`{"wait_ms":5000,"ids":[{"req_id":"r1","count":4},{"req_id":"r2"}]}`))
	f.Add([]byte(`{"ids":[{"req_id":"a"},{"req_id":"a"}]}`))
	f.Add([]byte(`{"wait_ms":1e30,"ids":[]}`))
	f.Add([]byte(`{"ids":[{"req_id":"\u00e9","count":1024}],"extra":[1,{"x":null}]}`))
	f.Add([]byte(`[{"req_id":"a"}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		wants, wait, err := parseWaitRequest(body)
		if err != nil {
			if wants != nil {
				t.Fatal("wants returned with an error")
			}
			return
		}
		if wait < 0 || wait > MaxWaitMillis*time.Millisecond {
			t.Fatalf("wait %v out of range", wait)
		}
		if len(wants) == 0 || len(wants) > MaxWaitIDs {
			t.Fatalf("%d ids", len(wants))
		}
		seen := map[string]bool{}
		for _, w := range wants {
			if len(w.id) == 0 || len(w.id) > MaxReqIDBytes || !utf8.ValidString(w.id) || seen[w.id] {
				t.Fatalf("bad or duplicate id %q", w.id)
			}
			seen[w.id] = true
			if w.need < 1 || w.need > MaxCount {
				t.Fatalf("count %d out of range", w.need)
			}
		}
	})
}
