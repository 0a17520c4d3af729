package envoyemu

import (
	"context"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
)

// BenchmarkFilterModuleSize reports the size of the compiled ./filter module.
func BenchmarkFilterModuleSize(b *testing.B) {
	info, err := os.Stat(pluginPath(b, "filter"))
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
	}
	b.ReportMetric(float64(info.Size()), "bytes")
	b.ReportMetric(0, "ns/op")
}

// benchPluginConfig is a minimal valid pdroute configuration for ./filter.
const benchPluginConfig = `{"mode":"nixl","prefill":{"endpoints":[{"name":"p1","cluster":"p1"}]},"decode":{"endpoints":[{"name":"d1","cluster":"d1"}]}}`

// BenchmarkVMStart measures one VM's start of the real ./filter: instantiate,
// _initialize, proxy_on_context_create, proxy_on_vm_start, proxy_on_configure
// (parsing a pdroute configuration). The module is compiled once, as Envoy
// clones a compiled module.
func BenchmarkVMStart(b *testing.B) {
	ctx := context.Background()
	m, err := loadModule(ctx, pluginCode(b, "filter"), EnvoyVersion{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.close(ctx)
	p := newProcess(nil, nil, LevelInfo)
	b.ResetTimer()
	for range b.N {
		v, err := newVM(m, &PluginSpec{PluginConfig: []byte(benchPluginConfig)}, p, baseEnv{}, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := v.startPlugin(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		v.close()
		b.StartTimer()
	}
}

// passthroughStream runs one stream through the Driver: context create,
// request headers, response headers, on_log/on_done/on_delete.
func passthroughStream(d *Driver) {
	id := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id, [][2]string{{":authority", "h"}, {":path", "/v1/chat/completions"}, {":method", "POST"}, {"content-type", "application/json"}}, false)
	d.CallOnRequestBody(id, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), true)
	d.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	d.CallOnResponseBody(id, []byte(`{"choices":[]}`), true)
	d.CompleteHttpContext(id)
}

// BenchmarkPassthroughFilterPerRequest is a filter's CPU per request: the
// time inside the VM calls of one stream of the pass-through plugin (the
// binding's and the host's own cost; pdroute's is measured in e2e/scenarios).
func BenchmarkPassthroughFilterPerRequest(b *testing.B) {
	d, err := NewDriver(pluginCode(b, "passthrough"), DriverOptions{LogLevel: LevelInfo})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	d.StartVM()
	d.StartPlugin()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		passthroughStream(d)
	}
}

// BenchmarkPassthroughMemory reports the VM's linear memory (64 KiB pages)
// after start and after 10 000 requests.
func BenchmarkPassthroughMemory(b *testing.B) {
	for range b.N {
		d, err := NewDriver(pluginCode(b, "passthrough"), DriverOptions{LogLevel: LevelInfo})
		if err != nil {
			b.Fatal(err)
		}
		d.StartVM()
		d.StartPlugin()
		start := d.Stats().MemoryPages
		for range 10000 {
			passthroughStream(d)
		}
		b.ReportMetric(float64(start), "pages_at_start")
		b.ReportMetric(float64(d.Stats().MemoryPages), "pages_after_10k")
		d.Close()
	}
}

// BenchmarkHTTPLoopback is requests/s through the host over loopback with and
// without the pass-through filter (2 workers, keep-alive clients).
func BenchmarkHTTPLoopback(b *testing.B) {
	up := newUpstream(b, "up")
	for _, tt := range []struct {
		name   string
		plugin string
	}{{"nofilter", ""}, {"filter", "passthrough"}} {
		b.Run(tt.name, func(b *testing.B) {
			h := startHost(b, hostConfig{plugin: tt.plugin, routeCluster: "up", clusters: []cluster{{name: "up", endpoints: []string{up.addr}}}}, Options{LogLevel: LevelInfo})
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			url := "http://" + h.Addr() + "/v1/models"
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkModuleCompile is the cost of compiling ./filter to machine code
// without a cache, and of loading it through the emulator's disk cache.
func BenchmarkModuleCompile(b *testing.B) {
	ctx := context.Background()
	code := pluginCode(b, "filter")
	b.Run("nocache", func(b *testing.B) {
		for range b.N {
			rt := wazero.NewRuntime(ctx)
			if _, err := rt.CompileModule(ctx, code); err != nil {
				b.Fatal(err)
			}
			rt.Close(ctx)
		}
	})
	b.Run("diskcache", func(b *testing.B) {
		for range b.N {
			m, err := loadModule(ctx, code, EnvoyVersion{})
			if err != nil {
				b.Fatal(err)
			}
			m.close(ctx)
		}
	})
}
