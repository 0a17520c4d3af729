package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// TestOpenPoints answers the open points of shared/ENVOY_HOST.md ("Open
// points to check on a real Envoy", listed in e2e/envoy/README.md). Each
// subtest logs one "OPEN POINT <name>: <finding>" line, which
// e2e/envoy/run-e2e-envoy prints; on the emulator they check that it
// behaves as we believe Envoy does.
func TestOpenPoints(t *testing.T) { bothWays(t, testOpenPoints) }

func testOpenPoints(t *testing.T) {
	t.Parallel()

	t.Run("original_dst_on_http_call", func(t *testing.T) {
		// Every prefill endpoint is given by address: the prefill leg's
		// proxy_http_call reaches it only if ORIGINAL_DST honours
		// x-envoy-original-dst-host on the async client's own headers.
		topo := modeTopology(config.ModeNIXL, map[string]any{"on_prefill_failure": "fail"})
		topo.Prefill[0].ByAddress, topo.Prefill[1].ByAddress = true, true
		s := start(t, topo)
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		if r.Status != 200 || r.Header.Get("x-pdroute-path") != "disagg" || r.kv() != mocks.KVTransferred {
			openPoint(t, "original_dst_on_http_call", "does NOT work: got %d %s %s", r.Status, r.Header.Get("x-pdroute-path"), r.Body)
			t.FailNow()
		}
		pre, _ := recordedBy(t, s.Prefill, "prefill")
		openPoint(t, "original_dst_on_http_call", "works: the prefill call reached %s (%s) through the ORIGINAL_DST cluster", pre.Name, pre.Addr)
	})

	t.Run("what_ends_a_paused_request", func(t *testing.T) {
		// The prefill never answers and the filter would wait a minute;
		// the HCM's stream_idle_timeout (1 s here, 5 min by default) is what
		// should end the request first.
		const idle = time.Second
		s, _, _, took, outcome := heldByHungPrefill(t, func(topo *stack.Topology) { topo.StreamIdleTimeout = idle })
		if took < idle || took > 10*time.Second {
			openPoint(t, "what_ends_a_paused_request", "not the stream idle timeout: ended after %s (%s)", took.Round(10*time.Millisecond), outcome)
			t.FailNow()
		}
		openPoint(t, "what_ends_a_paused_request", "stream_idle_timeout (%s) ended it after %s: %s", idle, took.Round(10*time.Millisecond), outcome)
		eventually(t, 15*time.Second, "in-flight counts released", func() (bool, string) {
			d := debugState(t, s)
			return d.Inflight() == 0, jsonString(d.Pools)
		})
	})

	t.Run("request_timeout_ends_a_held_request", func(t *testing.T) {
		// As above with the stream idle timeout out of the way: Envoy arms
		// request_timeout when the stream starts and disarms it only when
		// the router has the end of the request, so it ends a request the
		// filter holds (the shipped configs' bound for a VM that died).
		const reqTimeout = time.Second
		s, r, err, took, outcome := heldByHungPrefill(t, func(topo *stack.Topology) { topo.RequestTimeout = reqTimeout })
		if err != nil || r.Status != 408 || took < reqTimeout || took > 10*time.Second {
			openPoint(t, "request_timeout_ends_a_held_request", "not the request timeout: ended after %s (%s)", took.Round(10*time.Millisecond), outcome)
			t.FailNow()
		}
		openPoint(t, "request_timeout_ends_a_held_request", "request_timeout (%s) ended it after %s: %s", reqTimeout, took.Round(10*time.Millisecond), outcome)
		eventually(t, 15*time.Second, "in-flight counts released", func() (bool, string) {
			d := debugState(t, s)
			return d.Inflight() == 0, jsonString(d.Pools)
		})
	})

	t.Run("route_cache_cleared_by_header_mutation", func(t *testing.T) {
		// The request arrives without the route header, so the route Envoy
		// cached before the filter ran names no cluster; only a cleared
		// cache lets cluster_header see the header the filter set.
		s := start(t, modeTopology(config.ModeNIXL, nil))
		r := post(t, s, "/v1/completions", completion(shortPrompt, nil), nil)
		if r.Status != 200 || r.Header.Get("x-mock-name") != r.Header.Get("x-pdroute-decode") {
			openPoint(t, "route_cache_cleared_by_header_mutation", "does NOT hold: got %d from %q for decoder %q: %s", r.Status,
				r.Header.Get("x-mock-name"), r.Header.Get("x-pdroute-decode"), r.Body)
			t.FailNow()
		}
		openPoint(t, "route_cache_cleared_by_header_mutation", "holds: cluster_header routed to %s, the cluster the filter set (ABI 0.2.1)", r.Header.Get("x-mock-name"))
	})
}

// openPoint logs a finding in the form the runner script collects.
func openPoint(t testing.TB, name, format string, args ...any) {
	t.Helper()
	t.Logf("OPEN POINT %s [%s]: %s", name, proxyLabel(), fmt.Sprintf(format, args...))
}

// proxyLabel names the proxy the suite runs on.
func proxyLabel() string {
	if proxy == stack.Envoy {
		return "real Envoy"
	}
	return "emulator"
}

// heldByHungPrefill starts a nixl stack (edited by set) whose prefiller never
// answers while the filter would wait a minute for it, sends one long
// request, and returns how and when it ended: what an HCM timeout, not the
// filter, has to end.
func heldByHungPrefill(t *testing.T, set func(*stack.Topology)) (s *stack.Stack, r *response, err error, took time.Duration, outcome string) {
	t.Helper()
	topo := modeTopology(config.ModeNIXL, map[string]any{"prefill_timeout_ms": 60000})
	set(&topo)
	s = start(t, topo)
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultHang})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	r, err = send(ctx, http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, nil), nil)
	took = time.Since(begin)
	outcome = "the connection was closed"
	if err == nil {
		outcome = fmt.Sprintf("status %d %q", r.Status, r.Body)
	}
	return s, r, err, took, outcome
}
