package scenarios

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/filter/config"
)

// Issue 25: every mode answers the official OpenAI SDK, in both ways. The
// SDK for Node (pinned in e2e/sdk/package.json, installed by `npm ci` in
// e2e/sdk; .ci/run does it) runs e2e/sdk/openai-check.mjs against a stack.

// sdkDir holds the check script and its node_modules.
const sdkDir = "../sdk"

// sdkMaxBody is the stacks' max_body_bytes; the script's oversized request
// is larger.
const sdkMaxBody = 64 << 10

// TestOpenAISDK runs the SDK check against a stack of every mode.
func TestOpenAISDK(t *testing.T) { bothWays(t, testOpenAISDK) }

func testOpenAISDK(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the OpenAI SDK check needs Node.js 20 or newer")
	}
	if v, err := exec.Command(node, "--version").Output(); err != nil || nodeMajor(string(v)) < 20 {
		t.Skipf("node %q: the OpenAI SDK check needs Node.js 20 or newer (%v)", strings.TrimSpace(string(v)), err)
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "openai", "package.json")); err != nil {
		t.Skip("the openai npm package is not installed: run `npm ci` in e2e/sdk (.ci/run does)")
	}
	for _, mode := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			plugin := map[string]any{"max_body_bytes": sdkMaxBody}
			short := "direct"
			switch mode {
			case config.ModeLMCache:
				plugin["lmcache"] = map[string]any{"kv_wait_timeout_ms": 8000}
			case config.ModeSGLang:
				// SGLang's PD decoders refuse a request without a
				// prefiller's room (TestSGLang short_direct): every
				// request disaggregates, as CONFIGURATION advises.
				plugin["threshold_tokens"] = 0
				short = "disagg"
			}
			s := start(t, modeTopology(mode, plugin))
			longChat := "disagg"
			if onHeadersWay(t) && s.Config.HeadersWayDirect(config.APIChat) {
				longChat = "direct" // lmcacheChatWhy
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "openai-check.mjs", "--base", s.URL+"/v1",
				"--max-body", strconv.Itoa(sdkMaxBody), "--long-chat-route", longChat, "--short-route", short)
			cmd.Dir = sdkDir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("openai-check.mjs: %v\n%s", err, out)
			}
			t.Logf("%s", strings.TrimSpace(string(out)))
			// The decodes the SDK's requests made: the disaggregated ones got
			// the prefill's KV (not the client's kv_transfer_params), the
			// direct ones computed the prompt.
			for _, r := range recorded(t, s.Engines(), "") {
				// The script's client control fields name 10.9.9.9 and
				// the engine "evil": no engine may see them.
				if strings.Contains(r.Body, "10.9.9.9") || strings.Contains(r.Body, `"evil"`) {
					t.Errorf("%s %s got the client's control fields: %.400s", r.Kind, r.Path, r.Body)
				}
			}
			var kv = map[string]int{}
			for _, r := range recorded(t, s.Decode, "") {
				if r.Kind != "tokenize" && r.Kind != "prefill" {
					kv[r.KV]++
				}
			}
			want := map[string]int{mocks.KVTransferred: sdkCount(t, out, "disagg"), mocks.KVRecomputed: sdkCount(t, out, "direct")}
			if kv[mocks.KVTransferred] != want[mocks.KVTransferred] || kv[mocks.KVRecomputed] != want[mocks.KVRecomputed] {
				t.Errorf("decoders recorded KV outcomes %v, want %v", kv, want)
			}
		})
	}
}

// sdkCount reads "name=N" from the script's summary line.
func sdkCount(t *testing.T, out []byte, name string) int {
	t.Helper()
	m := regexp.MustCompile(`\b` + name + `=(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no %s= in the script's output:\n%s", name, out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// nodeMajor is the major version of `node --version` ("v20.20.2"), 0 if
// unreadable.
func nodeMajor(v string) int {
	major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(v), "v"), ".")
	n, _ := strconv.Atoi(major)
	return n
}
