package scenarios

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb/prefix"
)

// TestDevStackKeepsASharedPrefixOnOnePrefiller runs the dev stack's
// configuration (stack.DevTopology, nixl: cache_aware pools, threshold_on
// uncached) on free ports: two long requests sharing a 3 000-token prefix
// and differing after it go to the same prefill endpoint (x-pdroute-prefill)
// while it is under its load bound, and the second finds the prefix on its
// decoder (x-pdroute-cached); several VMs (workers) share the index.
func TestDevStackKeepsASharedPrefixOnOnePrefiller(t *testing.T) {
	topo := stack.DevTopology(config.ModeNIXL)
	topo.Ports = stack.Ports{}
	topo.Workers = 2
	topo.Prefill = engines(3, stack.EngineSpec{Latency: fast})
	topo.Decode = engines(3, stack.EngineSpec{Latency: fast})
	s := start(t, topo)
	perToken := float64(estimate(t, chat(text(40_000), nil), "/v1/chat/completions")) / 40_000
	prompt := func(head string, tokens int) string {
		return head + " " + text(int(float64(tokens)/perToken))
	}
	for k := range 3 {
		shared := prompt(fmt.Sprintf("context %d:", k), 3000)
		var prefill, decode []string
		for q := range 2 {
			body := chat(shared+" "+prompt(fmt.Sprintf("question %d-%d:", k, q), 1500), nil)
			r := post(t, s, "/v1/chat/completions", body, nil)
			r.expect(t, 200, "disagg")
			prefill = append(prefill, r.Header.Get("x-pdroute-prefill"))
			decode = append(decode, r.Header.Get("x-pdroute-decode"))
			cached := r.Header.Get("x-pdroute-cached")
			if (q == 0) != strings.HasPrefix(cached, "0%") {
				t.Errorf("context %d request %d: x-pdroute-cached %q", k, q, cached)
			}
		}
		if prefill[0] == "" || prefill[0] != prefill[1] || decode[0] != decode[1] {
			t.Errorf("context %d: prefill %v, decode %v: the shared prefix was split", k, prefill, decode)
		}
	}
}

// TestPrefixIndexBoundUnderConcurrentVMs: four workers (VMs) route 400
// unique prompts, 16 at a time, with a 32-slot index: afterwards the index
// holds no key beyond its slots, every record is well-formed and within its
// size bound, and a prompt sent again finds its decoder holding it.
func TestPrefixIndexBoundUnderConcurrentVMs(t *testing.T) {
	const slots = 32
	topo := stack.Topology{
		Mode: config.ModeNIXL, Workers: 4,
		Prefill: engines(2, stack.EngineSpec{Latency: fast}),
		Decode:  engines(2, stack.EngineSpec{Latency: fast}),
		Plugin: map[string]any{"threshold_tokens": 512, "threshold_on": "uncached",
			"prefix_index": map[string]any{"slots": slots},
			"prefill":      map[string]any{"strategy": "cache_aware"},
			"decode":       map[string]any{"strategy": "cache_aware"}},
	}
	s := start(t, topo)
	h := s.Emulator()
	if h == nil {
		t.Skip("needs the emulator's shared data")
	}
	const total, concurrency = 400, 16
	body := func(i int) []byte { return chat(fmt.Sprintf("prompt %d: ", i)+text(3000), nil) }
	var wg sync.WaitGroup
	errs := make(chan string, total)
	next := make(chan int)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := send(testCtx(t, 60*time.Second), http.MethodPost, s.URL+"/v1/chat/completions", body(i), nil)
				if err != nil || r.Status != 200 {
					errs <- fmt.Sprintf("request %d: %v %v", i, err, r)
				}
			}
		}()
	}
	for i := range total {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	bytes := 0
	for i := range slots + 8 {
		v, _, ok := h.SharedData(stack.PluginName, "pdroute/px/"+strconv.Itoa(i))
		if i >= slots {
			if ok && len(v) > 0 {
				t.Errorf("key px/%d beyond the %d slots", i, slots)
			}
			continue
		}
		if !ok || len(v) < 2 || v[0] != 1 || int(v[1]) > prefix.Ways || len(v) > prefix.MaxRecordBytes {
			t.Errorf("slot %d: %x", i, v)
		}
		bytes += len(v)
	}
	if bytes > slots*prefix.MaxRecordBytes {
		t.Errorf("index holds %d bytes, bound %d", bytes, slots*prefix.MaxRecordBytes)
	}
	t.Logf("%d requests: the index holds %d bytes in %d slots", total, bytes, slots)
	first := post(t, s, "/v1/chat/completions", body(total+1), nil)
	again := post(t, s, "/v1/chat/completions", body(total+1), nil)
	if c := again.Header.Get("x-pdroute-cached"); strings.HasPrefix(c, "0%") || again.Header.Get("x-pdroute-decode") != first.Header.Get("x-pdroute-decode") {
		t.Errorf("a repeated prompt: first on %s, again on %s with x-pdroute-cached %q", first.Header.Get("x-pdroute-decode"), again.Header.Get("x-pdroute-decode"), c)
	}
}
