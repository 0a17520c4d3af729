package plugin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/filtertest"
)

const cacheConfig = `{"mode":"nixl","threshold_tokens":1500,"threshold_on":"uncached","debug_headers":true,
 "prefill":{"strategy":"cache_aware","endpoints":[{"name":"prefill-1","cluster":"prefill-1","host":"10.0.0.1"},{"name":"prefill-2","cluster":"prefill-2","host":"10.0.0.2"},{"name":"prefill-3","cluster":"prefill-3","host":"10.0.0.3"}]},
 "decode":{"strategy":"cache_aware","endpoints":[{"name":"decode-1","cluster":"decode-1"},{"name":"decode-2","cluster":"decode-2"},{"name":"decode-3","cluster":"decode-3"}]}}`

// words returns n distinct-looking words (~n tokens) for prompt text.
func words(tag string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", tag, i%997)
	}
	return b.String()
}

func chat(system, user string) string {
	return `{"model":"m","max_tokens":20,"messages":[{"role":"system","content":"` + system +
		`"},{"role":"user","content":"` + user + `"}]}`
}

// finish answers a disaggregated request's prefill and its response headers,
// returning the debug headers.
func finish(t *testing.T, h filtertest.Harness, id uint32, disagg bool) map[string]string {
	t.Helper()
	if disagg {
		c := onlyCallout(t, h, id)
		h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, nil,
			[]byte(`{"id":"x","choices":[{"text":"x"}],"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1]}}`))
	}
	h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	out := map[string]string{}
	for _, k := range []string{"x-pdroute-path", "x-pdroute-prefill", "x-pdroute-decode", "x-pdroute-cached", "x-pdroute-tokens"} {
		out[k], _ = get(h.GetCurrentResponseHeaders(id), k)
	}
	h.CompleteHttpContext(id)
	return out
}

// TestCacheAwareKeepsASharedPrefixTogether: two long requests that share a
// 3 000-token prefix and differ after it go to the same prefill endpoint
// (and decoder); a third with the same prefix and a short question is
// served by the decoder that holds the prefix, without a prefill: its
// uncached tokens are under the threshold, its whole prompt is not.
func TestCacheAwareKeepsASharedPrefixTogether(t *testing.T) {
	for _, mode := range []string{"nixl", "orchestrated"} {
		t.Run(mode, func(t *testing.T) {
			cacheAwareKeepsASharedPrefixTogether(t, strings.Replace(cacheConfig, `"nixl"`, `"`+mode+`"`, 1))
		})
	}
}

func cacheAwareKeepsASharedPrefixTogether(t *testing.T, config string) {
	run(t, config, func(t *testing.T, h filtertest.Harness) {
		// Four contexts of ~3 000 tokens (1 500 two-token words), each sent
		// twice with a different ~2 000-token question: each pair must meet
		// (by chance: 1 in 3⁴).
		var first map[string]string
		for k := range 4 {
			shared := words(fmt.Sprintf("ctx%c", 'a'+k), 1500)
			id, _ := send(t, h, "/v1/chat/completions", chat(shared, words("alpha", 1000)))
			a := finish(t, h, id, true)
			id, _ = send(t, h, "/v1/chat/completions", chat(shared, words("beta", 1000)))
			b := finish(t, h, id, true)
			if a["x-pdroute-prefill"] == "" || a["x-pdroute-prefill"] != b["x-pdroute-prefill"] || a["x-pdroute-decode"] != b["x-pdroute-decode"] {
				t.Fatalf("context %d split: first %v, second %v", k, a, b)
			}
			if a["x-pdroute-cached"] != "0%/0" || b["x-pdroute-cached"] == "0%/0" {
				t.Errorf("x-pdroute-cached: first %q (want 0%%/0), second %q (want > 0)", a["x-pdroute-cached"], b["x-pdroute-cached"])
			}
			if k == 0 {
				first = a
			}
		}
		shared := words("ctxa", 1500)
		id, _ := send(t, h, "/v1/chat/completions", chat(shared, words("gamma", 25)))
		c := finish(t, h, id, false)
		if c["x-pdroute-path"] != "direct" || c["x-pdroute-decode"] != first["x-pdroute-decode"] {
			t.Errorf("short question on a cached prefix: %v, want direct on %s", c, first["x-pdroute-decode"])
		}
		if counter(t, h, "pdroute.prefix.decisions.direct_by_cache") != 1 || counter(t, h, "pdroute.prefix.decisions.disaggregate") != 8 {
			t.Error("prefix decisions not counted")
		}
		// Another model shares nothing with it.
		id, _ = send(t, h, "/v1/chat/completions", strings.Replace(chat(shared, words("gamma", 25)), `"model":"m"`, `"model":"m2"`, 1))
		if d := finish(t, h, id, true); d["x-pdroute-cached"] != "0%/0" {
			t.Errorf("another model found cached: %v", d)
		}
	})
}
