package nativeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// setup starts one vLLM prefill and one decode mock and a native proxy in
// mode with extra configuration fields.
func setup(t *testing.T, mode config.Mode, extra string) (*httptest.Server, *mocks.Server, *mocks.Server) {
	t.Helper()
	lat := mocks.Latency{PrefillPerToken: 10 * time.Microsecond, TransferredPrefill: time.Millisecond, PerOutputToken: time.Millisecond}
	pre, err := mocks.Start(mocks.Config{Kind: mocks.VLLM, Role: mocks.Prefill, Name: "prefill-0", Latency: lat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pre.Close() })
	dec, err := mocks.Start(mocks.Config{Kind: mocks.VLLM, Role: mocks.Decode, Name: "decode-0", Latency: lat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dec.Close() })
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"mode":%q,"threshold_tokens":256,"debug_headers":true,"prefill_timeout_ms":400%s,
		"prefill":{"endpoints":[{"name":"prefill-0","cluster":"p0","host":"localhost"}]},
		"decode":{"endpoints":[{"name":"decode-0","address":%q}]}}`, mode, extra, dec.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, map[string]string{"p0": pre.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, pre, dec
}

var long = strings.Repeat("lorem ipsum dolor sit amet ", 100)

func body(prompt string, extra string) []byte {
	return []byte(fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":4%s}`, prompt, extra))
}

func post(t *testing.T, url string, b []byte) *stack.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := stack.Send(ctx, nil, "POST", url+"/v1/completions", b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func lastBody(t *testing.T, s *mocks.Server, kind string) map[string]any {
	t.Helper()
	rs, err := s.Control().Requests(context.Background(), mocks.RequestFilter{Kind: kind})
	if err != nil || len(rs) == 0 {
		t.Fatalf("no %s request at %s: %v", kind, s.Addr(), err)
	}
	m, err := rs[len(rs)-1].JSON()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRoutes(t *testing.T) {
	srv, pre, _ := setup(t, config.ModeNIXL, "")
	for _, tc := range []struct {
		name, path, kv string
		body           []byte
	}{
		{"short goes direct", "direct", mocks.KVRecomputed, body("hello", "")},
		{"long is disaggregated", "disagg", mocks.KVTransferred, body(long, `,"min_tokens":2,"stream":true`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, srv.URL, tc.body)
			if r.Status != 200 || r.Header.Get("x-pdroute-path") != tc.path || r.Header.Get("x-mock-kv") != tc.kv {
				t.Fatalf("got %d path %q kv %q: %s", r.Status, r.Header.Get("x-pdroute-path"), r.Header.Get("x-mock-kv"), r.Body)
			}
		})
	}
	pb := lastBody(t, pre, "prefill")
	if pb["max_tokens"] != 1.0 || pb["stream"] != false || pb["min_tokens"] != nil {
		t.Errorf("prefill body %v: want max_tokens 1, stream false, no min_tokens", pb)
	}
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		fault       mocks.Fault
		status      int
		path, code  string
	}{
		{"500 falls back", "", mocks.Fault{Type: mocks.FaultStatus, Status: 500}, 200, "fallback", ""},
		{"500 fails", `,"on_prefill_failure":"fail"`, mocks.Fault{Type: mocks.FaultStatus, Status: 500}, 502, "error", "PREFILL_FAILED"},
		{"hang times out", `,"on_prefill_failure":"fail"`, mocks.Fault{Type: mocks.FaultHang}, 504, "error", "PREFILL_TIMEOUT"},
		{"missing params fail", `,"on_prefill_failure":"fail"`, mocks.Fault{Type: mocks.FaultMissingParams}, 502, "error", "PREFILL_FAILED"},
		{"400 is relayed", "", mocks.Fault{Type: mocks.FaultStatus, Status: 400}, 400, "relayed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, pre, _ := setup(t, config.ModeNIXL, tc.extra)
			if err := pre.Control().SetFaults(context.Background(), tc.fault); err != nil {
				t.Fatal(err)
			}
			r := post(t, srv.URL, body(long, ""))
			var e struct{ Error struct{ Code string } }
			_ = json.Unmarshal(r.Body, &e)
			if r.Status != tc.status || r.Header.Get("x-pdroute-path") != tc.path || e.Error.Code != tc.code {
				t.Errorf("got %d path %q code %q: %s", r.Status, r.Header.Get("x-pdroute-path"), e.Error.Code, r.Body)
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	srv, _, dec := setup(t, config.ModeNIXL, `,"max_body_bytes":1024`)
	for _, tc := range []struct {
		body   []byte
		status int
		code   string
	}{
		{[]byte(`{"prompt":`), 400, "INVALID_JSON"},
		{body(strings.Repeat("x", 2000), ""), 413, "REQUEST_TOO_LARGE"},
	} {
		r := post(t, srv.URL, tc.body)
		if r.Status != tc.status || !strings.Contains(string(r.Body), tc.code) || r.Header.Get("content-type") != "application/json" {
			t.Errorf("%.20s: got %d %s", tc.body, r.Status, r.Body)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-pdroute-path") != "passthrough" || resp.Header.Get("x-mock-name") != "decode-0" {
		t.Errorf("passthrough: %d %v", resp.StatusCode, resp.Header)
	}
	if st, _ := dec.Control().Stats(context.Background()); st.Requests["decode"] != 0 {
		t.Errorf("decoder served %d inference requests for rejected bodies", st.Requests["decode"])
	}
}

func TestOrchestratedRemoteHost(t *testing.T) {
	srv, _, dec := setup(t, config.ModeOrchestrated, "")
	r := post(t, srv.URL, body(long, ""))
	if r.Status != 200 || r.Header.Get("x-mock-kv") != mocks.KVTransferred {
		t.Fatalf("got %d kv %q: %s", r.Status, r.Header.Get("x-mock-kv"), r.Body)
	}
	kv, _ := lastBody(t, dec, "decode")["kv_transfer_params"].(map[string]any)
	if kv["remote_host"] != "localhost" {
		t.Errorf("remote_host %v, want the prefill endpoint's host", kv["remote_host"])
	}
}

func TestStreamsIncrementally(t *testing.T) {
	srv, _, dec := setup(t, config.ModeNIXL, "")
	if err := dec.Control().SetLatency(context.Background(), mocks.Latency{PerOutputToken: 30 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	r := post(t, srv.URL, body(long, `,"stream":true,"max_tokens":10,"ignore_eos":true`))
	if len(r.Events) < 10 {
		t.Fatalf("%d events: %s", len(r.Events), r.Body)
	}
	if spread := r.Events[len(r.Events)-1].At - r.Events[0].At; spread < 200*time.Millisecond {
		t.Errorf("events spread over %s: the answer was buffered", spread)
	}
}

func TestNewRejects(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mode":"nixl","prefill":{"endpoints":[{"name":"p","cluster":"pc"}]},"decode":{"endpoints":[{"name":"d","address":"127.0.0.1:1"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), `no address for cluster "pc"`) {
		t.Errorf("error %v", err)
	}
	cfg.Mode = config.ModeSGLang
	if _, err := New(cfg, map[string]string{"pc": "127.0.0.1:2"}, nil); err == nil || !strings.Contains(err.Error(), "not implemented") {
		t.Errorf("error %v", err)
	}
}

// With threshold_on "uncached" a long prompt the decoder already holds (it
// served it before) is served direct, as the filter does.
func TestUncachedThreshold(t *testing.T) {
	srv, _, _ := setup(t, config.ModeNIXL, `,"threshold_on":"uncached"`)
	for i, want := range []string{"disagg", "direct"} {
		if r := post(t, srv.URL, body(long, "")); r.Status != 200 || r.Header.Get("x-pdroute-path") != want {
			t.Fatalf("request %d: %d path %q, want %s", i, r.Status, r.Header.Get("x-pdroute-path"), want)
		}
	}
}
