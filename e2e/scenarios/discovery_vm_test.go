package scenarios

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// poolsAnswer is a companion answer with the named endpoints, each at an
// address derived from its number.
func poolsAnswer(version int, prefill, decode []int) []byte {
	list := func(pool string, ns []int) []map[string]any {
		out := []map[string]any{}
		for _, n := range ns {
			out = append(out, map[string]any{"name": fmt.Sprintf("%s-%d", pool, n),
				"address": fmt.Sprintf("10.%d.%d.%d:8000", n>>16&255, n>>8&255, n&255)})
		}
		return out
	}
	b, _ := json.Marshal(map[string]any{"version": version, "prefill": list("prefill", prefill), "decode": list("decode", decode)})
	return b
}

func span(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// pollAnswer ticks the VM until it asks the companion, checks the ask, and
// answers it with status and body.
func pollAnswer(t testing.TB, d *envoyemu.Driver, status int, body []byte) {
	t.Helper()
	var c envoyemu.HTTPCallout
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		d.Tick()
		var ok bool
		if c, ok = pendingTo(d, stack.KVBridgeCluster); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no poll (VM failure %.300q)", d.Failed())
		}
	}
	if !strings.Contains(header(c.Headers, ":path"), "/v1/pools?version=") {
		t.Fatalf("poll %+v", c)
	}
	d.CallOnHttpCallResponse(c.Token, [][2]string{{":status", fmt.Sprint(status)}}, nil, body)
}

// pendingTo returns the call waiting for an answer from cluster (after a
// good long-poll answer the filter polls again at once, so one to the
// companion is usually out).
func pendingTo(d *envoyemu.Driver, cluster string) (envoyemu.HTTPCallout, bool) {
	pending := map[uint32]bool{}
	for _, tok := range d.PendingHTTPCallouts() {
		pending[tok] = true
	}
	for _, c := range d.HTTPCallouts() {
		if pending[c.Token] && c.Cluster == cluster {
			return c, true
		}
	}
	return envoyemu.HTTPCallout{}, false
}

func header(h [][2]string, k string) string {
	for _, kv := range h {
		if kv[0] == k {
			return kv[1]
		}
	}
	return ""
}

// routeOne sends one disaggregated request and returns the prefill call's
// and the decode's original-dst hosts.
func routeOne(t testing.TB, d *envoyemu.Driver, body, answer []byte) (prefill, decode string) {
	t.Helper()
	id := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "pdroute"},
		{"content-type", "application/json"}, {"content-length", fmt.Sprint(len(body))}}, false)
	d.CallOnRequestBody(id, body, true)
	pc, ok := pendingTo(d, "pdroute_original_dst")
	if !ok {
		t.Fatalf("no prefill call; local reply %+v", d.SentLocalResponse(id))
	}
	d.CallOnHttpCallResponse(pc.Token, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, nil, answer)
	rh := d.RequestHeaders(id)
	d.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	d.CallOnResponseBody(id, []byte(`{}`), true)
	d.CompleteHttpContext(id)
	if pc.Cluster != "pdroute_original_dst" || header(rh, "x-pdroute-cluster") != "pdroute_original_dst" {
		t.Fatalf("prefill through %q, decode through %q", pc.Cluster, header(rh, "x-pdroute-cluster"))
	}
	return header(pc.Headers, "x-envoy-original-dst-host"), header(rh, "x-envoy-original-dst-host")
}

func counter(t testing.TB, d *envoyemu.Driver, kind abispec.MetricType, name string) uint64 {
	v, _ := d.Metric(kind, name)
	return v
}

// TestDiscoveryVM drives one VM of the filter through the companion's
// answers: garbage and failures keep the last good sets (counted, logged
// once), requests go by address to discovered endpoints only, and 10 000
// endpoints coming and going leave shared data and wasm memory bounded.
func TestDiscoveryVM(t *testing.T) {
	code := pluginCode(t)
	// Round robin spreads the same prompt over both discovered prefillers.
	d := newDriver(t, code, []byte(`{"mode":"nixl","discovery":{"poll_interval_ms":10},"prefill":{"strategy":"round_robin"},"decode":{"strategy":"least_loaded"},"stats_scrape_interval_ms":0}`), stack.EmulatedEnvoy)
	if d == nil {
		t.FailNow()
	}
	body := chat(longPrompt, nil)
	answer := prefillAnswer(512)

	// Garbage first: counted, nothing to route by yet.
	pollAnswer(t, d, 200, []byte(`{"version":`))
	if v := counter(t, d, abispec.MetricTypeCounter, "pdroute.discovery.errors"); v != 1 {
		t.Fatalf("errors = %d after a garbage answer", v)
	}
	pollAnswer(t, d, 200, poolsAnswer(1, span(0, 2), span(100, 2)))
	seenP, seenD := map[string]bool{}, map[string]bool{}
	for range 8 {
		p, dec := routeOne(t, d, body, answer)
		seenP[p], seenD[dec] = true, true
	}
	if len(seenP) != 2 || !seenP["10.0.0.0:8000"] || !seenP["10.0.0.1:8000"] || len(seenD) != 2 || !seenD["10.0.0.100:8000"] {
		t.Fatalf("routed to prefill %v decode %v", seenP, seenD)
	}
	// The companion fails in three ways: the last sets keep serving.
	pollAnswer(t, d, 503, []byte(`{"error":"discovery: shutting down"}`))
	pollAnswer(t, d, 200, []byte(`{"version":2,"prefill":"all","decode":[]}`))
	pollAnswer(t, d, 200, []byte(`[]`))
	for range 4 {
		if p, dec := routeOne(t, d, body, answer); !seenP[p] || !seenD[dec] {
			t.Fatalf("routed to %s / %s, which no answer gave", p, dec)
		}
	}
	if v := counter(t, d, abispec.MetricTypeCounter, "pdroute.discovery.errors"); v != 4 {
		t.Errorf("errors = %d, want 4", v)
	}
	warnings := 0
	for _, l := range d.GuestLogs(envoyemu.LevelWarn) {
		if strings.Contains(l, "companion unavailable") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d warnings about the companion, want 1 (rate-limited)", warnings)
	}

	// Churn: 10 000 decode endpoints through a pool of 64, 32 replaced per
	// answer; requests in between.
	pagesAt := map[int]uint32{}
	for v, first := 3, 0; first+64 <= 10_000; v, first = v+1, first+32 {
		pollAnswer(t, d, 200, poolsAnswer(v, span(0, 2), span(1000+first, 64)))
		if v%16 == 0 {
			routeOne(t, d, body, answer)
		}
		if first == 4992 || first+32+64 > 10_000 {
			pagesAt[first] = d.Stats().MemoryPages
		}
	}
	// The last answer's 64 decoders are 10 936..10 999 (1000 + 9 936 ..).
	if _, dec := routeOne(t, d, body, answer); dec < "10.0.42.184:8000" || !strings.HasPrefix(dec, "10.0.42.") {
		t.Fatalf("decode %q is not of the last answer", dec)
	}
	table, _, _ := d.SharedData(stack.PluginName, "pdroute/discovery/table")
	var shared int
	for _, k := range []string{"inflight", "health", "stats", "qps", "rotation"} {
		v, _, _ := d.SharedData(stack.PluginName, "pdroute/lb/decode/dyn/"+k)
		shared += len(v)
	}
	t.Logf("after 10 000 endpoints: table %d bytes, decode lb values %d bytes, wasm memory %v pages", len(table), shared, pagesAt)
	// The table holds at most lb.MaxSlots (1024) slots per pool: the 64 in
	// service and the most recent departures (draining for 30 s).
	if len(table) > 256<<10 || shared > 64<<10 {
		t.Errorf("shared data grew: table %d bytes, lb values %d bytes", len(table), shared)
	}
	var last, mid uint32
	for k, p := range pagesAt {
		if k == 4992 {
			mid = p
		} else {
			last = p
		}
	}
	if last > mid+32 { // 2 MiB
		t.Errorf("wasm memory grew from %d to %d pages over the second 5 000 endpoints", mid, last)
	}
}

// BenchmarkDiscoveredFilterCPU is the filter's cost per disaggregated
// request (1k tokens) in one VM with n discovered endpoints per pool
// (prefill round_robin, decode least_loaded), and with 2 configured ones
// for comparison, as BenchmarkFilterCPU. cpu-us/op is this process's CPU
// time per request (the VM runs in it), steadier than ns/op on a shared
// machine.
func BenchmarkDiscoveredFilterCPU(b *testing.B) {
	code := pluginCode(b)
	body := chat(text(4000), nil)
	answer := prefillAnswer(1024)
	const pools = `"decode":{"strategy":"least_loaded"},"stats_scrape_interval_ms":0`
	for _, n := range []int{0, 2, 64, 512} {
		name := fmt.Sprintf("discovered=%d", n)
		// wait_ms 0: no poll stays out, so driveRequest sees the prefill only.
		plugin := `{"mode":"nixl","threshold_tokens":0,"discovery":{"poll_interval_ms":10,"wait_ms":0},` + pools + `}`
		if n == 0 {
			name = "configured=2"
			plugin = `{"mode":"nixl","threshold_tokens":0,` + strings.Replace(pools, `"strategy":"least_loaded"`,
				`"strategy":"least_loaded","endpoints":[{"name":"d0","address":"10.0.1.0:8000"},{"name":"d1","address":"10.0.1.1:8000"}]`, 1) +
				`,"prefill":{"endpoints":[{"name":"p0","address":"10.0.0.0:8000"},{"name":"p1","address":"10.0.0.1:8000"}]}}`
		}
		b.Run(name, func(b *testing.B) {
			var d *envoyemu.Driver
			defer func() {
				if d != nil {
					d.Close()
				}
			}()
			start := func() {
				var err error
				if d, err = startDriver(code, []byte(plugin), stack.EmulatedEnvoy); err != nil {
					b.Fatal(err)
				}
				if n > 0 {
					pollAnswer(b, d, 200, poolsAnswer(1, span(0, n), span(1000, n)))
				}
			}
			start()
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i > 0 && i%256 == 0 { // the Driver keeps every call
					b.StopTimer()
					d.Close()
					start()
					b.StartTimer()
				}
				c0 := processCPU()
				driveRequest(b, d, body, true, answer)
				cpu += processCPU() - c0
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
