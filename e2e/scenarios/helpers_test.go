package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/tokenest"
)

// proxy is the proxy every scenario runs on (PDROUTE_E2E_PROXY).
var proxy stack.Proxy

func TestMain(m *testing.M) {
	p, err := stack.ProxyFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	proxy = p
	os.Exit(m.Run())
}

// WasmEnv names a prebuilt module for every stack of the run (the runner
// script builds it once); unset, the stack builds stack.PluginPackage.
const WasmEnv = "PDROUTE_E2E_WASM"

// The two ways a handled request takes through the filter (RATIONALE: "Two
// ways through a request"); every scenario runs in both, as subtests.
const (
	// bodyWay: the wasm filter sets allow_on_headers_stop_iteration (Envoy
	// >= 1.35); the filter reads the body before it routes.
	bodyWay = "body_way"
	// headersWay: the filter's config has no such field, as Istio's
	// WasmPlugin, Envoy Gateway and Envoy 1.33/1.34 (emulated: 1.34). The
	// plugin's default route_at auto finds out on the first request and
	// chooses decoders from the headers.
	headersWay = "headers_way"
)

// bothWays runs a scenario as the subtests body_way and headers_way.
func bothWays(t *testing.T, scenario func(t *testing.T)) {
	t.Helper()
	for _, w := range []string{bodyWay, headersWay} {
		t.Run(w, scenario)
	}
}

// onHeadersWay reports whether t runs under bothWays' headers_way.
func onHeadersWay(t testing.TB) bool {
	parts := strings.Split(t.Name(), "/")
	return len(parts) > 1 && parts[1] == headersWay
}

// notOnHeadersWay skips what the headers way does not do, saying why.
func notOnHeadersWay(t testing.TB, why string) {
	t.Helper()
	if onHeadersWay(t) {
		t.Skip("not applicable on the headers way: " + why)
	}
}

// start brings up a stack on the selected proxy; with real Envoy a missing
// binary fails the test (the runner script decides whether to skip).
func start(t testing.TB, topo stack.Topology) *stack.Stack {
	t.Helper()
	topo.Proxy = proxy
	topo.NoStopIteration = onHeadersWay(t)
	topo.WasmFile = os.Getenv(WasmEnv)
	return stack.StartT(t, topo)
}

// fast is a mock latency model that keeps scenarios quick while still
// telling a transferred prefill (1 ms) from a recomputed one (20 µs/token).
var fast = mocks.Latency{
	PrefillPerToken:    20 * time.Microsecond,
	TransferredPrefill: time.Millisecond,
	PerOutputToken:     2 * time.Millisecond,
	Slowdown:           1,
}

// engines returns n engine specs with the same settings.
func engines(n int, spec stack.EngineSpec) []stack.EngineSpec {
	out := make([]stack.EngineSpec, n)
	for i := range out {
		out[i] = spec
	}
	return out
}

// controlTimeout bounds one call to a mock's /mock/ API, admin or the
// debug path: generous, because the suite must pass on 2 busy cores.
const controlTimeout = 15 * time.Second

// testCtx bounds one scenario step.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// response is a finished exchange through the listener.
type response struct{ *stack.Response }

// JSON decodes the body as a JSON object.
func (r *response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("answer is not JSON: %v\n%s", err, r.Body)
	}
	return m
}

// errorCode is the "error.code" of an OpenAI-style error body.
func (r *response) errorCode(t testing.TB) string {
	t.Helper()
	e, _ := r.JSON(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// client is the scenarios' HTTP client; each call is bounded by its context.
var client = &http.Client{}

// send makes one request through the stack (or to any URL).
func send(ctx context.Context, method, url string, body []byte, header map[string]string) (*response, error) {
	r, err := stack.Send(ctx, client, method, url, body, header)
	if err != nil {
		return nil, err
	}
	return &response{r}, nil
}

// post sends a JSON request through the stack's listener and fails the test
// on a transport error.
func post(t testing.TB, s *stack.Stack, path string, body []byte, header map[string]string) *response {
	t.Helper()
	r, err := send(testCtx(t, 30*time.Second), http.MethodPost, s.URL+path, body, header)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

// expect checks status and the x-pdroute-path debug header.
func (r *response) expect(t testing.TB, status int, route string) {
	t.Helper()
	if r.Status != status || r.Header.Get("x-pdroute-path") != route {
		t.Fatalf("got %d path %q, want %d path %q\nheaders %v\n%s", r.Status, r.Header.Get("x-pdroute-path"), status, route, r.Header, r.Body)
	}
}

// jsonContentType checks that an answer the filter made itself is labelled
// application/json and nothing else.
func jsonContentType(t testing.TB, r *response) {
	t.Helper()
	if got := r.Header.Values("content-type"); !slices.Equal(got, []string{"application/json"}) {
		t.Errorf("content-type %q, want exactly application/json", got)
	}
}

// kv is the decoder's KV outcome header (x-mock-kv).
func (r *response) kv() string { return r.Header.Get("x-mock-kv") }

// words is filler text: distinct enough that the toy model does not loop.
var words = strings.Fields(`the quick brown fox jumps over a lazy dog while seven
curious otters debate quantum harmonics beneath an amber lighthouse near granite
cliffs where violet moths gather every autumn evening to hum forgotten melodies`)

// text returns about n characters of filler.
func text(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[i%len(words)])
	}
	return b.String()[:n]
}

// completion is a /v1/completions body.
func completion(prompt string, extra map[string]any) []byte {
	m := map[string]any{"model": "mock-model", "prompt": prompt, "max_tokens": 4}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// chat is a /v1/chat/completions body with one user message.
func chat(content string, extra map[string]any) []byte {
	m := map[string]any{"model": "mock-model", "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": content}}}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// Prompts on either side of the stacks' default threshold (256 tokens).
var (
	shortPrompt = "Say hello in one word."
	longPrompt  = text(2400) // about 500 tokens
)

// estimate is tokenest's estimate with the plugin's default method.
func estimate(t testing.TB, body []byte, path string) int {
	t.Helper()
	r, err := tokenest.Estimate(body, path, tokenest.Default)
	if err != nil {
		t.Fatalf("tokenest: %v", err)
	}
	return r.Tokens
}

// promptAt finds the shortest filler prompt whose request body (built by
// build) tokenest estimates at exactly want tokens, and the estimate of the
// prompt one character shorter (below want).
func promptAt(t testing.TB, want int, path string, build func(prompt string) []byte) (prompt string, below int) {
	t.Helper()
	base := text(want * 16)
	lo, hi := 0, len(base) // est(lo) < want <= est(hi)
	if estimate(t, build(base), path) < want {
		t.Fatalf("filler of %d chars estimates below %d tokens", len(base), want)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if estimate(t, build(base[:mid]), path) >= want {
			hi = mid
		} else {
			lo = mid
		}
	}
	if got := estimate(t, build(base[:hi]), path); got != want {
		t.Fatalf("no prompt estimates at exactly %d tokens (%d chars → %d)", want, hi, got)
	}
	return base[:hi], estimate(t, build(base[:lo]), path)
}

// requests lists what a mock recorded, failing the test on error.
func requests(t testing.TB, e *stack.Engine, f mocks.RequestFilter) []mocks.RecordedRequest {
	t.Helper()
	rs, err := e.Control.Requests(testCtx(t, controlTimeout), f)
	if err != nil {
		t.Fatalf("%s: requests: %v", e.Name, err)
	}
	return rs
}

// recorded collects the requests of kind from every engine of a pool.
func recorded(t testing.TB, pool []*stack.Engine, kind string) []mocks.RecordedRequest {
	t.Helper()
	var out []mocks.RecordedRequest
	for _, e := range pool {
		out = append(out, requests(t, e, mocks.RequestFilter{Kind: kind})...)
	}
	return out
}

// recordedBy finds the one engine of pool that recorded a request of kind,
// and that request.
func recordedBy(t testing.TB, pool []*stack.Engine, kind string) (*stack.Engine, mocks.RecordedRequest) {
	t.Helper()
	var found *stack.Engine
	var rec mocks.RecordedRequest
	for _, e := range pool {
		rs := requests(t, e, mocks.RequestFilter{Kind: kind})
		if len(rs) == 0 {
			continue
		}
		if found != nil || len(rs) != 1 {
			t.Fatalf("more than one %s request in the pool", kind)
		}
		found, rec = e, rs[0]
	}
	if found == nil {
		t.Fatalf("no %s request in the pool", kind)
	}
	return found, rec
}

// only asserts exactly one recorded request and returns its JSON body.
func only(t testing.TB, rs []mocks.RecordedRequest, what string) (mocks.RecordedRequest, map[string]any) {
	t.Helper()
	if len(rs) != 1 {
		t.Fatalf("%s: got %d requests, want 1: %+v", what, len(rs), rs)
	}
	m, err := rs[0].JSON()
	if err != nil {
		t.Fatalf("%s: body is not JSON: %v", what, err)
	}
	return rs[0], m
}

// stats reads a mock's /mock/stats.
func stats(t testing.TB, e *stack.Engine) mocks.Stats {
	t.Helper()
	st, err := e.Control.Stats(testCtx(t, controlTimeout))
	if err != nil {
		t.Fatalf("%s: stats: %v", e.Name, err)
	}
	return st
}

// faults installs faults on every engine of pool.
func faults(t testing.TB, pool []*stack.Engine, fs ...mocks.Fault) {
	t.Helper()
	for _, e := range pool {
		if err := e.Control.SetFaults(testCtx(t, controlTimeout), fs...); err != nil {
			t.Fatalf("%s: faults: %v", e.Name, err)
		}
	}
}

// reset resets every mock of the stack (run at the start of each subtest).
func reset(t testing.TB, s *stack.Stack) {
	t.Helper()
	if err := s.ResetMocks(testCtx(t, controlTimeout)); err != nil {
		t.Fatal(err)
	}
}

// stat reads a plugin counter or gauge from admin /stats.
func stat(t testing.TB, s *stack.Stack, name string) int64 {
	t.Helper()
	v, err := s.Stat(testCtx(t, controlTimeout), name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// eventually polls cond until it holds or timeout passes; cond says what
// it saw, for the failure message.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last saw %s", what, timeout, saw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// debugState reads the plugin's debug_path.
func debugState(t testing.TB, s *stack.Stack) stack.DebugState {
	t.Helper()
	d, err := s.Debug(testCtx(t, controlTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mockNames returns the x-mock-name of each response, sorted.
func mockNames(rs []*response) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Header.Get("x-mock-name"))
	}
	slices.Sort(out)
	return out
}

// get reads a nested JSON value by keys ("a", "b" → m["a"]["b"]).
func get(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

// modeTopology is the default topology of a mode with fast mocks.
func modeTopology(mode config.Mode, plugin map[string]any) stack.Topology {
	spec := stack.EngineSpec{Latency: fast}
	return stack.Topology{Mode: mode, Prefill: engines(2, spec), Decode: engines(2, spec), Plugin: plugin}
}
