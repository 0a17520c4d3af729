package stack

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
)

var update = flag.Bool("update", false, "rewrite e2e/envoy/envoy.yaml and envoy-discovery.yaml from the generator")

// referencePath is the checked-in bootstrap, relative to this package.
var referencePath = filepath.Join("..", "envoy", "envoy.yaml")

// TestEnvoyYAML keeps e2e/envoy/envoy.yaml equal to the generator's output,
// so the real-Envoy config and the dev/test configs cannot drift; it also
// checks that the emulator accepts the file as written.
func TestEnvoyYAML(t *testing.T) {
	testReference(t, referencePath, ReferenceBootstrap)
}

// TestEnvoyDiscoveryYAML does the same for e2e/envoy/envoy-discovery.yaml.
func TestEnvoyDiscoveryYAML(t *testing.T) {
	testReference(t, filepath.Join("..", "envoy", "envoy-discovery.yaml"), ReferenceDiscoveryBootstrap)
}

func testReference(t *testing.T, referencePath string, render func() ([]byte, error)) {
	got, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(referencePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (regenerate: go test ./e2e/stack -run TestEnvoyYAML -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generator's output; regenerate it with\n\tgo test ./e2e/stack -run TestEnvoyYAML -update\n--- generated:\n%s", referencePath, got)
	}
	// The emulator reads the module when it parses: point it at a stand-in.
	wasm := filepath.Join(t.TempDir(), "pdroute.wasm")
	if err := os.WriteFile(wasm, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyemu.ParseConfig(bytes.ReplaceAll(got, []byte(ReferenceWasmFile), []byte(wasm)), EmulatedEnvoy)
	if err != nil {
		t.Fatalf("the emulator rejects the reference bootstrap: %v", err)
	}
	if len(cfg.Listeners) != 1 || cfg.Listeners[0].Addr != "127.0.0.1:10000" || cfg.AdminAddr != "127.0.0.1:9901" {
		t.Errorf("listeners %+v admin %q: want 127.0.0.1:10000 and admin 127.0.0.1:9901", cfg.Listeners, cfg.AdminAddr)
	}
}

// TestEnvoyYAMLNoFlag keeps e2e/envoy/envoy-1.33.yaml, the bootstrap for Envoy 1.33
// and 1.34, equal to the generator's output; the emulated 1.33 and 1.34 load it, and
// reject the bootstrap that sets allow_on_headers_stop_iteration.
func TestEnvoyYAMLNoFlag(t *testing.T) {
	got, err := ReferenceBootstrapNoFlag()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "envoy", "envoy-1.33.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate: go test ./e2e/stack -run TestEnvoyYAML -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generator's output; regenerate it with\n\tgo test ./e2e/stack -run TestEnvoyYAML -update", path)
	}
	if bytes.Contains(got, []byte("allow_on_headers_stop_iteration:")) {
		t.Error("the 1.33 bootstrap sets allow_on_headers_stop_iteration")
	}
	flagged, err := ReferenceBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(t.TempDir(), "pdroute.wasm")
	if err := os.WriteFile(wasm, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, minor := range []int{33, 34} {
		v := envoyemu.EnvoyVersion{Minor: minor}
		if _, err := envoyemu.ParseConfig(bytes.ReplaceAll(got, []byte(ReferenceWasmFile), []byte(wasm)), v); err != nil {
			t.Errorf("Envoy %s rejects envoy-1.33.yaml: %v", v, err)
		}
		if _, err := envoyemu.ParseConfig(bytes.ReplaceAll(flagged, []byte(ReferenceWasmFile), []byte(wasm)), v); err == nil {
			t.Errorf("Envoy %s accepts envoy.yaml, which sets allow_on_headers_stop_iteration", v)
		}
	}
}

func TestRenderRejects(t *testing.T) {
	plugin := []byte(`{"mode":"lmcache","prefill":{"endpoints":[{"name":"p","cluster":"pc"}]},` +
		`"decode":{"endpoints":[{"name":"d","address":"10.0.0.2:8000","kv_receiver":{"init_ports":[1],"alloc_ports":[2]}}]}}`)
	ok := Bootstrap{Listener: "127.0.0.1:0", Admin: "127.0.0.1:0", WasmFile: "x.wasm", Plugin: plugin,
		Clusters: map[string]string{"pc": "127.0.0.1:1", "kvbridge": "127.0.0.1:2"}}
	if _, err := ok.Render(); err != nil {
		t.Fatalf("valid bootstrap: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(b *Bootstrap)
		want string
	}{
		{"bad plugin", func(b *Bootstrap) { b.Plugin = []byte(`{"mode":"x"}`) }, "mode"},
		{"missing endpoint cluster", func(b *Bootstrap) { b.Clusters = map[string]string{"kvbridge": "127.0.0.1:2"} },
			`prefill.endpoints[0].cluster names cluster "pc"`},
		{"missing kvbridge", func(b *Bootstrap) { b.Clusters = map[string]string{"pc": "127.0.0.1:1"} },
			`lmcache.kvbridge_cluster names cluster "kvbridge"`},
		{"static original_dst", func(b *Bootstrap) {
			b.Clusters = map[string]string{"pc": "127.0.0.1:1", "kvbridge": "127.0.0.1:2", "pdroute_original_dst": "127.0.0.1:3"}
		}, "cannot be static"},
		{"no wasm", func(b *Bootstrap) { b.WasmFile = "" }, "WasmFile is required"},
		{"bad listener", func(b *Bootstrap) { b.Listener = "localhost:1" }, `listener: "localhost:1" is not an IP:port`},
		{"bad cluster address", func(b *Bootstrap) { b.Clusters = map[string]string{"pc": "pc:80", "kvbridge": "127.0.0.1:2"} },
			`cluster pc: "pc:80" is not an IP:port`},
		{"body over buffer", func(b *Bootstrap) {
			b.Plugin = bytes.Replace(plugin, []byte(`"mode":"lmcache"`), []byte(`"mode":"lmcache","max_body_bytes":16777216`), 1)
		}, "above the listener buffer limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ok
			tc.edit(&b)
			_, err := b.Render()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestRenderStreamIdleTimeout(t *testing.T) {
	b := Bootstrap{Listener: "127.0.0.1:0", Admin: "127.0.0.1:0", WasmFile: "x.wasm", StreamIdleTimeout: 1500 * time.Millisecond,
		Plugin:   []byte(`{"mode":"nixl","prefill":{"endpoints":[{"name":"p","address":"10.0.0.1:1"}]},"decode":{"endpoints":[{"name":"d","address":"10.0.0.2:1"}]}}`),
		Clusters: map[string]string{}}
	y, err := b.Render()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(y, []byte("stream_idle_timeout: 1.5s\n")) {
		t.Errorf("no stream_idle_timeout in\n%s", y)
	}
	if !bytes.Contains(y, []byte("cluster_header: x-pdroute-cluster\n")) || !bytes.Contains(y, []byte("name: pdroute_original_dst\n")) {
		t.Errorf("route header or ORIGINAL_DST cluster missing:\n%s", y)
	}
}

func TestMerge(t *testing.T) {
	dst := map[string]any{"a": 1, "pool": map[string]any{"strategy": "round_robin", "endpoints": []any{"e"}}}
	merge(dst, map[string]any{"a": 2, "b": 3, "pool": map[string]any{"strategy": "least_loaded"}, "c": map[string]any{"x": 1}})
	got, _ := json.Marshal(dst)
	want := `{"a":2,"b":3,"c":{"x":1},"pool":{"endpoints":["e"],"strategy":"least_loaded"}}`
	if string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestParseStats(t *testing.T) {
	text := []byte("cluster.x.upstream_rq: 3\nwasmcustom.pdroute.requests.disagg: 12\n" +
		"wasmcustom.pdroute.kv_wait.waiting: 0\nwasmcustom.pdroute.kv_wait_ms: P0(nan,1) P25(nan,2)\n" +
		"wasmcustom.pdroute.requests.disagg: 99\nno colon here\n: empty name\n")
	got := ParseStats(text)
	for name, want := range map[string]string{
		"wasmcustom.pdroute.requests.disagg": "12", // the first value wins
		"wasmcustom.pdroute.kv_wait.waiting": "0",
		"wasmcustom.pdroute.kv_wait_ms":      "P0(nan,1) P25(nan,2)",
		"cluster.x.upstream_rq":              "3",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	if len(got) != 4 {
		t.Errorf("parsed %d stats, want 4: %v", len(got), got)
	}
}

func TestParsePrometheusHistogram(t *testing.T) {
	text := []byte(`# TYPE pdroute_kv_wait_ms histogram
pdroute_kv_wait_ms_bucket{le="0.5"} 0
pdroute_kv_wait_ms_bucket{le="+Inf"} 3
pdroute_kv_wait_ms_sum{} 412.5
pdroute_kv_wait_ms_count{} 3
pdroute_kv_wait_ms_count{engine="x"} 7
pdroute_prefill_latency_ms_count 5
`)
	for _, tc := range []struct {
		name string
		want Histogram
		ok   bool
	}{
		{"pdroute_kv_wait_ms", Histogram{Count: 3, Sum: 412.5}, true},
		{"pdroute_prefill_latency_ms", Histogram{Count: 5}, true},
		{"pdroute_estimated_tokens", Histogram{}, false},
	} {
		got, ok := ParsePrometheusHistogram(text, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if n := PrometheusName("pdroute.kv_wait.ready"); n != "pdroute_kv_wait_ready" {
		t.Errorf("PrometheusName = %q", n)
	}
}

func FuzzParseStats(f *testing.F) {
	f.Add([]byte("wasmcustom.pdroute.requests.disagg: 12\nx: P0(nan,1)\n"))
	f.Add([]byte(": \n:: ::\n\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		for name, v := range ParseStats(text) {
			if name == "" || strings.Contains(name, "\n") || strings.Contains(v, "\n") {
				t.Fatalf("bad entry %q: %q", name, v)
			}
		}
	})
}

func FuzzParsePrometheusHistogram(f *testing.F) {
	f.Add([]byte("pdroute_x_count{} 3\npdroute_x_sum{} 1.5\n"), "pdroute_x")
	f.Add([]byte("pdroute_x_count{} -1\n# c\n{}{} 1\n"), "pdroute_x")
	f.Fuzz(func(t *testing.T, text []byte, name string) {
		h, ok := ParsePrometheusHistogram(text, name)
		if !ok && h != (Histogram{}) {
			t.Fatalf("not found but %+v", h)
		}
	})
}

// TestRenderBoundedWaits: every bootstrap replaces a trapped VM and bounds
// how long a request the filter holds can wait (the defaults), or writes
// what the topology asks for.
func TestRenderBoundedWaits(t *testing.T) {
	plugin := []byte(`{"mode":"nixl","prefill":{"endpoints":[{"name":"p","address":"10.0.0.1:1"}]},"decode":{"endpoints":[{"name":"d","address":"10.0.0.2:1"}]}}`)
	for _, tt := range []struct {
		name          string
		req, idle     time.Duration
		wantReq, want string
	}{
		{"defaults", 0, 0, "request_timeout: 60s\n", "stream_idle_timeout: 600s\n"},
		{"set", 3 * time.Second, 1500 * time.Millisecond, "request_timeout: 3s\n", "stream_idle_timeout: 1.5s\n"},
	} {
		b := Bootstrap{Listener: "127.0.0.1:0", Admin: "127.0.0.1:0", WasmFile: "x.wasm", Plugin: plugin,
			Clusters: map[string]string{}, RequestTimeout: tt.req, StreamIdleTimeout: tt.idle}
		y, err := b.Render()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{tt.wantReq, tt.want, "failure_policy: FAIL_RELOAD\n"} {
			if !bytes.Contains(y, []byte(want)) {
				t.Errorf("%s: no %q in\n%s", tt.name, want, y)
			}
		}
	}
}
