package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb"
)

// TestVMTrapUnderLoad: one worker's VM traps while its requests wait on
// their prefills (FAIL_RELOAD, the shipped policy). Envoy never calls the
// dead VM again, so its paused requests are ended by request_timeout (408,
// turned into 503 by the failed filter), the other worker's requests
// complete, the in-flight counts the dead VM held expire (lb owner TTL),
// and new requests are served by a fresh VM.
func TestVMTrapUnderLoad(t *testing.T) {
	const (
		concurrency = 16
		prefillWait = 3 * time.Second
		reqTimeout  = 5 * time.Second
		// bound is when every client must have its answer: the request
		// timeout, plus scheduling slack on a busy 2-core machine.
		bound = reqTimeout + 5*time.Second
		// countsBound: the dead VM's counts stop counting one owner TTL after
		// its last write or tick, and a surviving VM's tick drops them.
		countsBound = lb.DefaultOwnerTTL + 5*time.Second
	)
	topo := modeTopology(config.ModeNIXL, map[string]any{
		"prefill": map[string]any{"strategy": "least_loaded"},
		"decode":  map[string]any{"strategy": "least_loaded"},
	})
	topo.Workers = 2
	topo.RequestTimeout = reqTimeout
	s := start(t, topo)
	h := s.Emulator()
	if h == nil {
		t.Skip("a trap is injected through the emulator (envoyemu.Host.InjectTrap); real Envoy has no such hook")
	}
	faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultDelay, DelayMS: int(prefillWait / time.Millisecond), Kind: "prefill"})

	type result struct {
		status int
		err    error
		took   time.Duration
	}
	results := make([]result, concurrency)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
			defer cancel()
			// A new connection each: connections are spread over the workers.
			r, err := send(ctx, http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, nil), nil)
			results[i] = result{err: err, took: time.Since(begin)}
			if err == nil {
				results[i].status = r.Status
			}
		}()
	}
	eventually(t, 10*time.Second, "every prefill pending", func() (bool, string) {
		d := debugState(t, s)
		n := 0
		for _, e := range d.Pools["prefill"] {
			n += int(e.Inflight)
		}
		return n >= concurrency, jsonString(d.Pools)
	})
	if n := h.InjectTrap(stack.PluginName, 0); n != 1 {
		t.Fatalf("InjectTrap armed %d VMs, want worker 0's", n)
	}
	wg.Wait()

	var ok, failed int
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("client %d: no answer: %v (after %s)", i, r.err, r.took)
		case r.took > bound:
			t.Errorf("client %d: answered %d after %s, over the bound %s", i, r.status, r.took, bound)
		case r.status == 200:
			ok++
		case r.status == 503:
			failed++
		default:
			t.Errorf("client %d: status %d", i, r.status)
		}
	}
	if ok == 0 || failed == 0 {
		t.Errorf("%d answered 200 and %d 503: want both workers' requests (the surviving VM's served, the dead VM's ended by request_timeout)", ok, failed)
	}
	t.Logf("%d clients: %d served by the surviving VM, %d ended after the trap; the last answer after %s", concurrency, ok, failed, time.Since(begin).Round(time.Millisecond))

	// The dead VM's in-flight counts outlive it, then expire.
	trapped := time.Now()
	eventually(t, countsBound, "in-flight counts back to zero", func() (bool, string) {
		d := debugState(t, s)
		return d.Inflight() == 0, jsonString(d.Pools)
	})
	t.Logf("in-flight counts at zero %s after the last answer", time.Since(trapped).Round(time.Millisecond))

	// New requests succeed, the trapped worker's on a fresh VM. Each on a
	// new connection, so both workers get some; the first on the trapped
	// worker may still meet the reload backoff (1 s from the last load).
	faults(t, s.Prefill)
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 6 {
		r, err := stack.Send(testCtx(t, 30*time.Second), fresh, http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, nil), nil)
		if err != nil {
			t.Errorf("request %d after the trap: %v", i, err)
		} else if r.Status != 200 {
			t.Errorf("request %d after the trap: %d %s", i, r.Status, r.Body)
		}
	}
	ps := h.Plugins()
	if len(ps) != 1 || ps[0].Traps() != 1 || ps[0].Reloads < 1 {
		t.Errorf("plugin stats: %s", pluginSummary(ps))
	}
	if d := debugState(t, s); d.Inflight() != 0 {
		t.Errorf("in flight after the new requests: %s", jsonString(d.Pools))
	}
}

func pluginSummary(ps []envoyemu.PluginStats) string {
	var out string
	for _, p := range ps {
		out += fmt.Sprintf("%s: traps %d reloads %d reload failures %d; ", p.Name, p.Traps(), p.Reloads, p.ReloadFailures)
	}
	return out
}
