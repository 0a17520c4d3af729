package scenarios

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// Scenarios of the two ways themselves (filter/plugin/way.go): what a slow
// client gets, how route_at auto finds out that Envoy withholds the body,
// and what a local reply sent after the decoder's request started leaves.

// slowPost sends a chunked request whose body follows its headers after
// delay, and returns the answer.
func slowPost(t *testing.T, url string, body []byte, delay time.Duration) *response {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		time.Sleep(delay)
		_, _ = pw.Write(body)
		_ = pw.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), delay+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &response{&stack.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}}
}

// TestSlowClient is issue 31's "body watchdog blames the Envoy config": the
// headers of a chunked request, then its body 11 s later, on a proxy that
// already served a request. It is served like any other, and nothing is
// taken for a missing allow_on_headers_stop_iteration.
func TestSlowClient(t *testing.T) { bothWays(t, testSlowClient) }

func testSlowClient(t *testing.T) {
	t.Parallel()
	topo := modeTopology(config.ModeNIXL, nil)
	topo.Workers = 1 // the learnt way is the one VM's
	s := start(t, topo)
	post(t, s, "/v1/completions", completion(shortPrompt, nil), nil).expect(t, 200, "direct")
	withheld := stat(t, s, "pdroute.route_at.body_withheld")

	r := slowPost(t, s.URL+"/v1/completions", completion(longPrompt, nil), 11*time.Second)
	r.expect(t, 200, "disagg")
	if r.kv() != mocks.KVTransferred {
		t.Errorf("decoder says %q, want transferred", r.kv())
	}
	if got := stat(t, s, "pdroute.route_at.body_withheld"); got != withheld {
		t.Errorf("route_at.body_withheld went from %d to %d: a slow client was taken for Envoy withholding the body", withheld, got)
	}
	if strings.Contains(s.Logs(), "critical") {
		t.Errorf("critical log lines:\n%s", s.Logs())
	}
	if !onHeadersWay(t) {
		// The proxy still takes the body way for the next request.
		before := stat(t, s, "pdroute.route_at.body")
		post(t, s, "/v1/completions", completion(longPrompt, nil), nil).expect(t, 200, "disagg")
		if got := stat(t, s, "pdroute.route_at.body"); got != before+1 {
			t.Errorf("route_at.body %d → %d, want the body way again", before, got)
		}
	}
}

// TestWayLearnt: route_at auto on each Envoy. With the flag every request
// takes the body way; without it the first request of each VM waits for its
// body at most ~0.35 s, the proxy logs why once, counts it, and the VMs take
// the headers way from then on (shared data).
func TestWayLearnt(t *testing.T) { bothWays(t, testWayLearnt) }

func testWayLearnt(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, nil))
	const n = 8
	for range n {
		post(t, s, "/v1/completions", completion(longPrompt, nil), nil).expect(t, 200, "disagg")
	}
	body, headers, withheld := stat(t, s, "pdroute.route_at.body"), stat(t, s, "pdroute.route_at.headers"),
		stat(t, s, "pdroute.route_at.body_withheld")
	if !onHeadersWay(t) {
		if body != n || headers != 0 || withheld != 0 {
			t.Errorf("route_at body %d headers %d withheld %d, want %d 0 0", body, headers, withheld, n)
		}
		return
	}
	// Only the request that found out paused: the other VM learnt it from
	// shared data (or found out itself, if it served a request first).
	if withheld < 1 || withheld > int64(s.Topology.Workers) || body != withheld || headers != n {
		t.Errorf("route_at body %d headers %d withheld %d, want withheld = body in 1..%d, headers %d",
			body, headers, withheld, s.Topology.Workers, n)
	}
	if !strings.Contains(s.Logs(), "Envoy withholds the request body while a filter pauses the headers") {
		t.Errorf("no log line says why requests take the headers way:\n%s", s.Logs())
	}
}

// TestLocalReplyAfterHeaders: on the headers way the decoder's request has
// started when the body turns out malformed, too large or its prefill
// fails; the client gets the same answer as on the body way, the decoder's
// request is reset, and nothing stays counted in flight.
func TestLocalReplyAfterHeaders(t *testing.T) { bothWays(t, testLocalReplyAfterHeaders) }

func testLocalReplyAfterHeaders(t *testing.T) {
	t.Parallel()
	s := start(t, modeTopology(config.ModeNIXL, map[string]any{"max_body_bytes": 4096, "on_prefill_failure": "fail"}))
	r := post(t, s, "/v1/chat/completions", []byte(`{"model":`), nil)
	if r.Status != 400 || r.errorCode(t) == "" {
		t.Errorf("malformed JSON: %d %s", r.Status, r.Body)
	}
	jsonContentType(t, r)
	r = slowPost(t, s.URL+"/v1/completions", completion(text(6000), nil), 0)
	if r.Status != 413 {
		t.Errorf("oversized chunked body: %d %s", r.Status, r.Body)
	}
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultStatus, Status: 500})
	r = post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
	if r.Status != 502 {
		t.Errorf("prefill 500 with on_prefill_failure fail: %d %s", r.Status, r.Body)
	}
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultStatus, Status: 422})
	r = post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
	if r.Status != 422 {
		t.Errorf("prefill 422: %d %s, want it relayed", r.Status, r.Body)
	}
	eventually(t, 5*time.Second, "no request left in flight", func() (bool, string) {
		d := debugState(t, s)
		return d.Inflight() == 0, jsonString(d.Pools)
	})
	// The decoders answered none of these; the next request is served.
	for _, d := range s.Decode {
		for _, rr := range requests(t, d, mocks.RequestFilter{Kind: "decode"}) {
			if rr.Status == 200 {
				t.Errorf("%s answered a request the client got an error for: %+v", d.Name, rr)
			}
		}
	}
	faults(t, s.Prefill)
	post(t, s, "/v1/completions", completion(longPrompt, nil), nil).expect(t, 200, "disagg")
}
