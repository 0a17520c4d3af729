package scenarios

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// changeBound is the bound from a change of the pools file to the
// filter routing by it (the file is polled every 100 ms, the companion's
// long poll answers at once, the other VM reloads on its next request).
const changeBound = 2 * time.Second

// prefillCount is how many prefill requests e received.
func prefillCount(t *testing.T, e *stack.Engine) int {
	t.Helper()
	return len(requests(t, e, mocks.RequestFilter{Kind: "prefill"}))
}

// TestDiscoveryFile runs the pools from a file watched by the discovery
// companion: an engine added at run time serves within changeBound without a
// proxy restart; a removed one gets no new request after it while the
// request on it completes; with the companion stopped, requests keep
// succeeding on the last sets, and it comes back.
func TestDiscoveryFile(t *testing.T) {
	// Round robin's turns spread the same prompt over every endpoint (an
	// added decoder serves at once, the scale-down needs a request on
	// prefill-0), and it counts no in-flight, so the removed prefill-0 stays
	// draining (below).
	s := start(t, stack.Topology{Mode: config.ModeNIXL, Discovery: stack.DiscoveryFile,
		Prefill: engines(2, stack.EngineSpec{Latency: fast}), Decode: engines(1, stack.EngineSpec{Latency: fast}),
		Plugin: map[string]any{"prefill": map[string]any{"strategy": "round_robin"}, "decode": map[string]any{"strategy": "round_robin"}}})
	body := chat(longPrompt, nil)
	post(t, s, "/v1/chat/completions", body, nil).expect(t, http.StatusOK, "disagg")

	// Scale-up: decode-1, started by hand, listed in the file.
	d1, err := s.StartEngine(mocks.Decode, stack.EngineSpec{Latency: fast})
	if err != nil {
		t.Fatal(err)
	}
	decodes := []*stack.Engine{s.Decode[0], d1}
	if err := s.WritePools(s.Prefill, decodes); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	for {
		r := post(t, s, "/v1/chat/completions", body, nil)
		r.expect(t, http.StatusOK, "disagg")
		if r.Header.Get("x-pdroute-decode") == d1.Name {
			t.Logf("%s served %v after the file changed", d1.Name, time.Since(changed))
			break
		}
		if time.Since(changed) > changeBound {
			t.Fatalf("%s got no request within %v of being added", d1.Name, changeBound)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Scale-down: prefill-0 leaves while a slow prefill is on it.
	p0, p1 := s.Prefill[0], s.Prefill[1]
	ctx := testCtx(t, time.Minute)
	slow := fast
	slow.Slowdown = 150 // about 1.5 s for the long prompt
	if err := p0.Control.SetLatency(ctx, slow); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*response, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := send(ctx, http.MethodPost, s.URL+"/v1/chat/completions", body, nil)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = r
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); prefillCount(t, p0) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no request reached prefill-0")
		}
	}
	if err := s.WritePools([]*stack.Engine{p1}, decodes); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	wg.Wait()
	onP0 := 0
	for _, r := range results {
		if r == nil {
			continue
		}
		r.expect(t, http.StatusOK, "disagg")
		if r.Header.Get("x-pdroute-prefill") == p0.Name {
			onP0++
		}
	}
	if onP0 == 0 {
		t.Fatal("no in-flight request completed on the removed prefill-0")
	}
	time.Sleep(time.Until(removed.Add(changeBound)))
	before := prefillCount(t, p0)
	for range 6 {
		r := post(t, s, "/v1/chat/completions", body, nil)
		r.expect(t, http.StatusOK, "disagg")
		if r.Header.Get("x-pdroute-prefill") != p1.Name {
			t.Fatalf("prefill by %q after prefill-0 left", r.Header.Get("x-pdroute-prefill"))
		}
	}
	if after := prefillCount(t, p0); after != before {
		t.Fatalf("prefill-0 got %d requests after it left", after-before)
	}
	d, err := s.Debug(ctx)
	if err != nil || d.Inflight() != 0 {
		t.Fatalf("in-flight after the requests: %v %v", d, err)
	}
	// prefill-0 drains (round_robin counts no in-flight: 30 s at least).
	if d.Discovery == nil || d.Discovery.Draining["prefill"] != 1 || len(d.Pools["prefill"]) != 1 {
		t.Fatalf("discovery state after prefill-0 left: %+v, pools %v", d.Discovery, d.Pools)
	}

	// The companion stops: the last sets keep serving, the failure counts.
	if err := s.KVBridge.Stop(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r := post(t, s, "/v1/chat/completions", body, nil)
		r.expect(t, http.StatusOK, "disagg")
		if p := r.Header.Get("x-pdroute-prefill"); p != p1.Name {
			t.Fatalf("prefill by %q with the companion down", p)
		}
	}
	waitStat(t, s, "pdroute.discovery.errors", func(v int64) bool { return v > 0 })
	waitStat(t, s, "pdroute.discovery.stale", func(v int64) bool { return v == 1 })
	// Back, with prefill-0 listed again.
	if err := s.WritePools([]*stack.Engine{p0, p1}, decodes); err != nil {
		t.Fatal(err)
	}
	if err := p0.Control.SetLatency(ctx, fast); err != nil {
		t.Fatal(err)
	}
	if err := s.KVBridge.Restart(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := post(t, s, "/v1/chat/completions", body, nil)
		r.expect(t, http.StatusOK, "disagg")
		if r.Header.Get("x-pdroute-prefill") == p0.Name {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("prefill-0 not back after the companion restarted")
		}
	}
	waitStat(t, s, "pdroute.discovery.stale", func(v int64) bool { return v == 0 })
}

func waitStat(t *testing.T, s *stack.Stack, name string, ok func(int64) bool) {
	t.Helper()
	var v int64
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if v, err = s.Stat(context.Background(), name); err == nil && ok(v) {
			return
		}
	}
	t.Fatalf("%s = %d (%v)", name, v, err)
}

// TestDiscoveryStatsFromCompanion: with "discovery": {"stats": true} the
// engines' /metrics are scraped by the companion only, and the filter's
// least_loaded reads the stats it serves. It runs 3 proxies (gateway
// replicas) of 2 workers on the same engines and logs the engines' scrape
// load for both ways (BENCHMARKS.md, discovery).
func TestDiscoveryStatsFromCompanion(t *testing.T) {
	if proxy != stack.Emulator {
		t.Skip("starts more proxies with the emulator")
	}
	const interval = 200 * time.Millisecond
	const window = 3 * time.Second
	const proxies = 3
	load := func(t *testing.T, fromCompanion bool) float64 {
		topo := stack.Topology{Mode: config.ModeNIXL, Discovery: stack.DiscoveryFile, Workers: 2,
			Prefill: engines(1, stack.EngineSpec{Latency: fast}), Decode: engines(2, stack.EngineSpec{Latency: fast}),
			Plugin: map[string]any{"stats_scrape_interval_ms": interval.Milliseconds(),
				"decode": map[string]any{"strategy": "least_loaded", "stats_max_age_ms": 1000}}}
		if fromCompanion {
			topo.CompanionScrape = interval
			topo.Plugin["discovery"] = map[string]any{"stats": true}
		}
		s := start(t, topo)
		ctx := testCtx(t, time.Minute)
		urls := []string{s.URL}
		for range proxies - 1 {
			u, err := s.StartProxy()
			if err != nil {
				t.Fatal(err)
			}
			urls = append(urls, u)
		}
		metrics := func() int64 {
			var n int64
			for _, e := range s.Engines() {
				st, err := e.Control.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				n += st.Requests["metrics"]
			}
			return n
		}
		before := metrics()
		time.Sleep(window)
		perEngine := float64(metrics()-before) / window.Seconds() / float64(len(s.Engines()))
		d, err := s.Debug(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range d.Pools["decode"] {
			if e.StatsAgeMS < 0 || e.StatsAgeMS > 1000 {
				t.Errorf("%s: stats age %d ms with stats from the companion=%v", e.Name, e.StatsAgeMS, fromCompanion)
			}
		}
		if fromCompanion && s.CompanionScrapes() == 0 {
			t.Error("the companion scraped nothing")
		}
		for _, u := range urls {
			r, err := send(ctx, http.MethodPost, u+"/v1/chat/completions", chat(longPrompt, nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			r.expect(t, http.StatusOK, "disagg")
		}
		return perEngine
	}
	filter := load(t, false)
	companion := load(t, true)
	t.Logf("scrapes per second per engine, interval %v, %d proxies of 2 workers: filter %.1f, companion %.1f",
		interval, proxies, filter, companion)
	// The filter scrapes once per interval per proxy (its lease stops the
	// workers of one proxy from each scraping); the companion once per
	// interval, whatever the number of proxies.
	if perInterval := 1 / interval.Seconds(); companion > 1.5*perInterval || filter <= companion {
		t.Errorf("%.1f (filter) and %.1f (companion) scrapes/s per engine: want about %d× and 1× %.0f",
			filter, companion, proxies, perInterval)
	}
}

// BenchmarkDiscoveryChangeToRoute measures the time from a change of the
// pools file (a decoder added) to the first request the filter sends to the
// new decoder, over 40 additions (the stack's file source polls every
// 100 ms; the companion's long poll and the filter's reload add the rest).
// Requests are sent back to back, so the figure is within one request's
// time (~2 ms) of the filter's. Run with -benchtime=1x.
func BenchmarkDiscoveryChangeToRoute(b *testing.B) {
	s := start(b, stack.Topology{Mode: config.ModeNIXL, Discovery: stack.DiscoveryFile, Workers: 2,
		Prefill: engines(1, stack.EngineSpec{Latency: instant}), Decode: engines(1, stack.EngineSpec{Latency: instant})})
	extra, err := s.StartEngine(mocks.Decode, stack.EngineSpec{Latency: instant})
	if err != nil {
		b.Fatal(err)
	}
	body := completion(shortPrompt, map[string]any{"max_tokens": 1})
	const rounds = 40
	for range b.N {
		var lat []time.Duration
		for range rounds {
			// A random phase against the file source's 100 ms reads.
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
			if err := s.WritePools(s.Prefill, []*stack.Engine{s.Decode[0], extra}); err != nil {
				b.Fatal(err)
			}
			changed := time.Now()
			for {
				r := benchSend(b, s.URL+"/v1/completions", body)
				if r.Header.Get("x-pdroute-decode") == extra.Name {
					lat = append(lat, time.Since(changed))
					break
				}
				if time.Since(changed) > 10*time.Second {
					b.Fatal("the added decoder never served")
				}
			}
			if err := s.WritePools(s.Prefill, s.Decode); err != nil {
				b.Fatal(err)
			}
			// Wait until it is out again (no request reaches it for 300 ms).
			for quiet := time.Now(); time.Since(quiet) < 300*time.Millisecond; {
				if r := benchSend(b, s.URL+"/v1/completions", body); r.Header.Get("x-pdroute-decode") == extra.Name {
					quiet = time.Now()
				}
			}
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
	}
}

// TestDiscoveryModes: discovered endpoints carry each mode's per-engine
// settings (lmcache's kv_receiver, sglang's bootstrap_port) from the pools
// file to the filter.
func TestDiscoveryModes(t *testing.T) {
	for _, mode := range []config.Mode{config.ModeLMCache, config.ModeSGLang, config.ModeOrchestrated} {
		t.Run(string(mode), func(t *testing.T) {
			s := start(t, stack.Topology{Mode: mode, Discovery: stack.DiscoveryFile,
				Prefill: engines(1, stack.EngineSpec{Latency: fast}), Decode: engines(1, stack.EngineSpec{Latency: fast})})
			r := post(t, s, "/v1/chat/completions", chat(longPrompt, nil), nil)
			r.expect(t, http.StatusOK, "disagg")
			if r.Header.Get("x-pdroute-prefill") != s.Prefill[0].Name || r.Header.Get("x-pdroute-decode") != s.Decode[0].Name {
				t.Errorf("routed by %q / %q", r.Header.Get("x-pdroute-prefill"), r.Header.Get("x-pdroute-decode"))
			}
			if mode == config.ModeLMCache && r.kv() != "transferred" {
				t.Errorf("lmcache decoder says %q (%s)", r.kv(), r.Header.Get("x-mock-kv-reason"))
			}
		})
	}
}
