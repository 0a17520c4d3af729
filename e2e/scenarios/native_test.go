package scenarios

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/nativeproxy"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// startNative serves a native-Go router (e2e/nativeproxy) built from the
// stack's own plugin configuration and clusters, on the same mocks.
func startNative(t testing.TB, s *stack.Stack) string {
	t.Helper()
	p, err := nativeproxy.New(s.Config, s.Clusters(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestNativeVsFilter is a differential test: the filter in the proxy and the
// native router, built from one configuration over the same mocks, must
// route the same requests the same way and return the same generated text.
func TestNativeVsFilter(t *testing.T) { bothWays(t, testNativeVsFilter) }

func testNativeVsFilter(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, nil))
	native := startNative(t, s)
	for _, tc := range []struct {
		name, path string
		body       []byte
	}{
		{"short completion", "/v1/completions", completion(shortPrompt, map[string]any{"ignore_eos": true})},
		{"long completion", "/v1/completions", completion(longPrompt, map[string]any{"ignore_eos": true, "max_tokens": 6})},
		{"long chat stream", "/v1/chat/completions", chat(longPrompt, map[string]any{"ignore_eos": true, "stream": true})},
		{"malformed", "/v1/completions", []byte(`{"prompt":`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]*response
			for i, base := range []string{s.URL, native} {
				r, err := send(testCtx(t, 30*time.Second), http.MethodPost, base+tc.path, tc.body, nil)
				if err != nil {
					t.Fatal(err)
				}
				got[i] = r
			}
			f, n := got[0], got[1]
			for _, h := range []string{"x-pdroute-path", "x-pdroute-tokens", "x-mock-kv"} {
				if f.Header.Get(h) != n.Header.Get(h) {
					t.Errorf("%s: filter %q, native %q", h, f.Header.Get(h), n.Header.Get(h))
				}
			}
			if f.Status == 200 && generated(f) == "" {
				t.Errorf("no generated text to compare: %s", f.Body)
			}
			if f.Status != n.Status || generated(f) != generated(n) {
				t.Errorf("filter %d %q, native %d %q", f.Status, generated(f), n.Status, generated(n))
			}
		})
	}
}

// generated is the text an answer carries (all stream deltas, or choice 0),
// or the error code of an error answer.
func generated(r *response) string {
	if len(r.Events) > 0 {
		var b strings.Builder
		for _, ev := range r.Events {
			var c struct {
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(ev.Data), &c) == nil && len(c.Choices) > 0 {
				b.WriteString(c.Choices[0].Text + c.Choices[0].Delta.Content)
			}
		}
		return b.String()
	}
	var a struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(r.Body, &a) != nil {
		return "unparsable: " + string(r.Body)
	}
	if a.Error.Code != "" {
		return "error " + a.Error.Code
	}
	if len(a.Choices) == 0 {
		return ""
	}
	return a.Choices[0].Text + a.Choices[0].Message.Content
}
