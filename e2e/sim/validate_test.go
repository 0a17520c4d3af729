package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/sim/trace"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// The margins the replay must meet: the stack adds what the model leaves
// out (HTTP, the proxy, the mocks' KV pulls, goroutine scheduling on a
// shared machine), a few milliseconds per leg.
const (
	ttftMargin       = 0.20 // relative, on TTFT p50, p90 and mean
	ttftSlackMs      = 15.0 // absolute slack added to the TTFT margin
	throughputMargin = 0.10 // relative, on output tokens per second
)

// TestReplayThroughStackAgrees replays a small mixed trace through the dev
// stack — the real filter in the Envoy emulator, mock engines timed by the
// same performance model — and checks that the simulator predicts its TTFT
// and throughput. Real time (scale 1), about 20 s. Its margins hold on an
// idle machine only (the stack's TTFT includes the host's scheduling), so
// it runs by `make sim-validate` (PDROUTE_SIM_VALIDATE=1), not in make test.
func TestReplayThroughStackAgrees(t *testing.T) {
	if os.Getenv("PDROUTE_SIM_VALIDATE") == "" {
		t.Skip("a real-time replay whose margins need an idle machine: make sim-validate (PDROUTE_SIM_VALIDATE=1)")
	}
	prof := engine.Profiles[engine.DefaultProfile]
	w, _ := trace.Lookup("mix")
	reqs, err := w.Generate(trace.Load{Rate: 2, Requests: 36, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	spec := func() stack.EngineSpec {
		return stack.EngineSpec{Mock: func(c *mocks.Config) {
			p := prof
			c.Perf, c.PerfScale, c.MaxModelLen = &p, 1, 1<<16
		}}
	}
	st := stack.StartT(t, stack.Topology{
		Mode:    config.ModeNIXL,
		Prefill: []stack.EngineSpec{spec()},
		Decode:  []stack.EngineSpec{spec(), spec()},
		Plugin:  map[string]any{"threshold_tokens": 2048, "max_body_bytes": 8 << 20},
	})

	// The simulator, on the stack's own plugin configuration, charging each
	// prompt the tokens the mocks count.
	setup, err := UserSetup("stack", st.PluginConfig, prof)
	if err != nil {
		t.Fatal(err)
	}
	p := Prepare("validate", reqs, prof.BlockSize)
	for i := range p.Reqs {
		if p.Reqs[i].PromptTokens, err = mocks.PromptTokens(p.Reqs[i].Path, p.Reqs[i].Body); err != nil {
			t.Fatal(err)
		}
	}
	want, err := Run(&setup, p, 1)
	if err != nil {
		t.Fatal(err)
	}

	// The replay.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ttft := make([]float64, len(p.Reqs))
	finish := make([]time.Duration, len(p.Reqs))
	errs := make([]error, len(p.Reqs))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range p.Reqs {
		r := &p.Reqs[i]
		time.Sleep(time.Until(start.Add(r.At)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Since(start)
			resp, err := stack.Send(ctx, nil, "POST", st.URL+r.Path, r.Body, nil)
			switch {
			case err != nil:
				errs[i] = err
			case resp.Status != 200 || len(resp.Events) < 2 || resp.Events[len(resp.Events)-1].Data != "[DONE]":
				errs[i] = fmt.Errorf("status %d, %d events: %.200s", resp.Status, len(resp.Events), resp.Body)
			default:
				ttft[i] = float64(resp.Events[0].At) / float64(time.Millisecond)
				finish[i] = sent + resp.Total
			}
		}()
	}
	wg.Wait()
	var outTokens int
	var last time.Duration
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		outTokens += p.Reqs[i].OutputTokens
		last = max(last, finish[i])
	}
	gotTput := float64(outTokens) / last.Seconds()
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	sorted := append([]float64(nil), ttft...)
	sort.Float64s(sorted)
	gotP50 := sorted[len(sorted)/2-1]
	if len(sorted)%2 == 1 {
		gotP50 = sorted[len(sorted)/2]
	}
	gotP90 := sorted[int(0.9*float64(len(sorted))+0.5)-1]
	// The simulator's per-request TTFTs are not kept in Result; rerun for the mean.
	simMean := simMeanTTFT(t, &setup, p)
	t.Logf("stack: TTFT p50 %.0f ms, p90 %.0f ms, mean %.0f ms, %.0f output tokens/s; simulator: TTFT p50 %.0f ms, p90 %.0f ms, mean %.0f ms, %.0f output tokens/s; %.0f%% disaggregated",
		gotP50, gotP90, mean(ttft), gotTput, want.TTFTP50, want.TTFTP90, simMean, want.OutputTokensPerSec, 100*want.DisaggregatedFraction)
	check := func(what string, got, sim, rel, slack float64) {
		if math.Abs(got-sim) > rel*sim+slack {
			t.Errorf("%s: stack %.1f, simulator %.1f: outside %.0f%% + %.0f", what, got, sim, 100*rel, slack)
		}
	}
	check("TTFT p50 (ms)", gotP50, want.TTFTP50, ttftMargin, ttftSlackMs)
	check("TTFT p90 (ms)", gotP90, want.TTFTP90, ttftMargin, ttftSlackMs)
	check("TTFT mean (ms)", mean(ttft), simMean, ttftMargin, ttftSlackMs)
	check("output tokens/s", gotTput, want.OutputTokensPerSec, throughputMargin, 0)
}

// simMeanTTFT is the mean TTFT of a run, from a Run with a hook on results.
func simMeanTTFT(t *testing.T, s *Setup, p *Prepared) float64 {
	t.Helper()
	var sum float64
	var n int
	old := ttftHook
	ttftHook = func(ms float64) { sum += ms; n++ }
	defer func() { ttftHook = old }()
	if _, err := Run(s, p, 1); err != nil {
		t.Fatal(err)
	}
	return sum / float64(n)
}
