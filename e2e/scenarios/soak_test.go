package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// TestSoak is `make soak` (not part of `make test`): PDROUTE_SOAK_DURATION (e.g. 10m) of
// PDROUTE_SOAK_RATE requests per second (default 200), mixed over three stacks (nixl,
// lmcache, sglang), short and long prompts, streamed or not. It reports, per stack, the
// wasm memory of every VM and the shared-data keys at the start (after a warm-up) and at
// the end (idle), kvbridge's ids and RSS (the kvbridge binary in its own process when
// PDROUTE_SOAK_KVBRIDGE names it, as `make soak` does), and
// the answers by kind; it fails when something grew that must not: a VM's memory more than
// doubling, a shared-data key that is not per endpoint (shared data has no delete, so a key
// per request would stay forever), an in-flight count or kvbridge waiter left when idle, an
// answer that is not 200. PDROUTE_SOAK_MODES (comma-separated, e.g. "sglang") soaks
// only those stacks.
func TestSoak(t *testing.T) {
	dur, err := time.ParseDuration(os.Getenv("PDROUTE_SOAK_DURATION"))
	if err != nil || dur <= 0 {
		t.Skip("set PDROUTE_SOAK_DURATION (make soak) to run the soak")
	}
	if proxy == stack.Envoy {
		t.Skip("the soak reads the emulator's VMs and shared data")
	}
	rate := 200.0
	if v, err := strconv.ParseFloat(os.Getenv("PDROUTE_SOAK_RATE"), 64); err == nil && v > 0 {
		rate = v
	}
	type soakStack struct {
		mode config.Mode
		s    *stack.Stack
	}
	var stacks []soakStack
	for _, mode := range []config.Mode{config.ModeNIXL, config.ModeLMCache, config.ModeSGLang} {
		if m := os.Getenv("PDROUTE_SOAK_MODES"); m != "" && !slices.Contains(strings.Split(m, ","), string(mode)) {
			continue // a soak of some stacks only (e.g. PDROUTE_SOAK_MODES=sglang)
		}
		var plugin map[string]any
		if mode == config.ModeSGLang {
			// An SGLang decoder in disaggregation mode refuses a request without a
			// prefiller's room: every request is disaggregated (as in `make dev`).
			plugin = map[string]any{"threshold_tokens": 0}
		}
		stacks = append(stacks, soakStack{mode, start(t, modeTopology(mode, plugin))})
	}
	if len(stacks) == 0 {
		t.Fatalf("PDROUTE_SOAK_MODES=%q names none of nixl, lmcache, sglang", os.Getenv("PDROUTE_SOAK_MODES"))
	}
	// The lmcache stack's kvbridge, when it is soaked.
	var bridgeStack *stack.Stack
	for _, st := range stacks {
		if st.s.KVBridge != nil {
			bridgeStack = st.s
		}
	}
	// kvbridge as its own process (PDROUTE_SOAK_KVBRIDGE, the binary `make soak` builds),
	// so its RSS is its own; on the in-process one's addresses.
	var bridge *exec.Cmd
	if bin := os.Getenv("PDROUTE_SOAK_KVBRIDGE"); bin != "" && bridgeStack != nil {
		kb := bridgeStack.KVBridge
		zmq, addr := kb.ZMQEndpoint(), kb.HTTPAddr()
		if err := kb.Close(); err != nil {
			t.Fatal(err)
		}
		bridge = exec.Command(bin, "-zmq-bind", zmq, "-http-addr", addr, "-log-level", "warn")
		bridge.Stderr = os.Stderr
		if err := bridge.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bridge.Process.Kill(); _ = bridge.Wait() })
		eventually(t, 10*time.Second, "kvbridge process answers", func() (bool, string) {
			_, err := bridgeMetric(addr, "kvbridge_entries")
			return err == nil, fmt.Sprint(err)
		})
		warm(t, bridgeStack)
	}
	bridgeRSS := func() string {
		if bridge == nil {
			return fmt.Sprintf("in-process (this test's RSS %d MiB)", rssKiB("self")/1024)
		}
		return fmt.Sprintf("%.1f MiB", float64(rssKiB(strconv.Itoa(bridge.Process.Pid)))/1024)
	}
	bridgeIDs := func() (entries, waiters int) {
		if bridge == nil {
			st := bridgeStack.KVBridge.Stats()
			return st.Entries, st.Waiters
		}
		addr := bridgeStack.KVBridge.HTTPAddr()
		e, _ := bridgeMetric(addr, "kvbridge_entries")
		w, _ := bridgeMetric(addr, "kvbridge_waiters")
		return int(e), int(w)
	}
	// The request mix, built once so the load loop keeps its rate: short and long
	// prompts (1 000 to 5 000 characters), completions and chat, streamed or not.
	type soakReq struct {
		path string
		body []byte
	}
	mixRNG := rand.New(rand.NewPCG(3, 4))
	var mix []soakReq
	for range 256 {
		prompt := shortPrompt
		if mixRNG.IntN(2) == 0 {
			prompt = text(1000 + mixRNG.IntN(4000))
		}
		extra := map[string]any{"max_tokens": 1 + mixRNG.IntN(16)}
		if mixRNG.IntN(2) == 0 {
			extra["stream"] = true
		}
		r := soakReq{"/v1/completions", completion(prompt, extra)}
		if mixRNG.IntN(2) == 0 {
			r = soakReq{"/v1/chat/completions", chat(prompt, extra)}
		}
		mix = append(mix, r)
	}
	var (
		mu       sync.Mutex
		answers  = map[string]int{}
		sent     atomic.Int64
		dropped  atomic.Int64 // ticks with every client slot busy
		inflight = make(chan struct{}, 1024)
		wg       sync.WaitGroup
	)
	fire := func(rng *rand.Rand) {
		st := stacks[rng.IntN(len(stacks))]
		req := mix[rng.IntN(len(mix))]
		path, body := req.path, req.body
		select {
		case inflight <- struct{}{}:
		default:
			dropped.Add(1)
			return
		}
		sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inflight }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			k := string(st.mode) + ": "
			r, err := send(ctx, http.MethodPost, st.s.URL+path, body, nil)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				k += "no answer in 60 s"
			case err != nil:
				k += "transport error"
			default:
				k += fmt.Sprint(r.Status)
			}
			mu.Lock()
			answers[k]++
			mu.Unlock()
		}()
	}
	load := func(d time.Duration) {
		rng := rand.New(rand.NewPCG(1, 2))
		// Catch up on every tick: a late tick (a busy machine) fires what is due, so the
		// average rate holds.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		begin, fired := time.Now(), 0
		for now := range tick.C {
			if now.Sub(begin) >= d {
				return
			}
			for due := int(now.Sub(begin).Seconds() * rate); fired < due; fired++ {
				fire(rng)
			}
		}
	}
	type snapshot struct {
		pages        []uint32
		keys         int
		endpointKeys int
		entries      int
		waiters      int
	}
	snap := func(st soakStack) snapshot {
		h := st.s.Emulator()
		var sn snapshot
		for _, p := range h.Plugins() {
			for _, w := range p.Workers {
				sn.pages = append(sn.pages, w.MemoryPages)
			}
		}
		for _, k := range h.SharedDataKeys(stack.PluginName) {
			if strings.Contains(k, "/lb/") {
				sn.endpointKeys++ // per endpoint: bounded by the endpoint set
			} else {
				sn.keys++
			}
		}
		if st.s.KVBridge != nil {
			sn.entries, sn.waiters = bridgeIDs()
		}
		return sn
	}
	warmup := min(dur/10, 30*time.Second)
	began := time.Now()
	load(warmup)
	wg.Wait()
	first := make([]snapshot, len(stacks))
	keys0 := make([][]string, len(stacks))
	for i, st := range stacks {
		first[i], keys0[i] = snap(st), sharedKeys(st.s)
	}
	rss0 := bridgeRSS()
	sent0 := sent.Load()
	// Every 30 s: the largest VM of each stack (MiB), the clients in flight and the
	// shared-data keys, to tell a plateau (a peak of load) from steady growth.
	var series []string
	sample := func() {
		line := fmt.Sprintf("%4ds load %s clients %4d", int(time.Since(began).Seconds()), loadavg(), len(inflight))
		for _, st := range stacks {
			sn := snap(st)
			line += fmt.Sprintf(" | %s VM max %5.1f keys %3d", st.mode, float64(slices.Max(sn.pages))*64/1024, sn.keys+sn.endpointKeys)
		}
		series = append(series, line)
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	load(dur - warmup)
	close(stop)
	<-sampled
	wg.Wait()
	sample()
	t.Logf("every 30 s:\n%s", strings.Join(series, "\n"))
	for i, st := range stacks {
		if left := leftovers(t, st.s, keys0[i]); !strings.HasPrefix(left, "none left") {
			t.Errorf("%s: idle after the soak: %s", st.mode, left)
		}
	}
	rss1 := bridgeRSS()
	t.Logf("soak: %s at %.0f req/s: %d requests sent (%d after the warm-up of %s), %d ticks dropped (1024 clients busy), %s wall",
		dur, rate, sent.Load(), sent.Load()-sent0, warmup, dropped.Load(), time.Since(began).Round(time.Second))
	t.Logf("kvbridge RSS: %s after the warm-up, %s at the end; Go %s, %d CPUs, load average at the end %s", rss0, rss1, runtime.Version(), runtime.NumCPU(), loadavg())
	for i, st := range stacks {
		a, b := first[i], snap(st)
		t.Logf("%s: wasm memory per VM (MiB): %v → %v; shared-data keys: per endpoint %d → %d, others %d → %d; kvbridge ids: %d → %d",
			st.mode, mib(a.pages), mib(b.pages), a.endpointKeys, b.endpointKeys, a.keys, b.keys, a.entries, b.entries)
		for j := range b.pages {
			if j < len(a.pages) && b.pages[j] > 2*a.pages[j] && b.pages[j] > a.pages[j]+64 {
				t.Errorf("%s: VM %d memory grew from %d to %d pages", st.mode, j, a.pages[j], b.pages[j])
			}
		}
		if b.keys > a.keys {
			t.Errorf("%s: shared-data keys (not per endpoint) grew from %d to %d", st.mode, a.keys, b.keys)
		}
		if b.waiters > 0 {
			t.Errorf("%s: %d kvbridge long polls still waiting when idle", st.mode, b.waiters)
		}
	}
	// The engines' side, for reading a failure: what each mock served, and the requests
	// whose client left before the answer was complete.
	for _, st := range stacks {
		var line []string
		for _, e := range st.s.Engines() {
			es := stats(t, e)
			line = append(line, fmt.Sprintf("%s %v aborts %d misrouted %d", e.Name, es.Requests, es.ClientAborts, es.Misrouted))
		}
		t.Logf("%s engines: %s", st.mode, strings.Join(line, "; "))
	}
	mu.Lock()
	defer mu.Unlock()
	var kinds []string
	for k, n := range answers {
		kinds = append(kinds, fmt.Sprintf("%s × %d", k, n))
		if !strings.HasSuffix(k, ": 200") {
			t.Errorf("answers %s × %d", k, n)
		}
	}
	slices.Sort(kinds)
	t.Logf("answers by kind: %s", strings.Join(kinds, "; "))
}

func mib(pages []uint32) []string {
	out := make([]string, len(pages))
	for i, p := range pages {
		out[i] = fmt.Sprintf("%.1f", float64(p)*64/1024)
	}
	return out
}

// rssKiB is the resident set (VmRSS) of /proc/<pid>, 0 where /proc is missing.
func rssKiB(pid string) int {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// bridgeMetric reads one unlabelled sample from kvbridge's /metrics.
func bridgeMetric(addr, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	r, err := send(ctx, http.MethodGet, "http://"+addr+"/metrics", nil, nil)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("kvbridge /metrics has no %s", name)
}

// loadavg is the machine's 1-minute load average (the soak shares its cores).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
