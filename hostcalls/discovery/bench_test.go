package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompanionChurn measures the companion at 1 000 endpoints (500 per
// pool) from a file source with 10 changes per second (one endpoint replaced
// per write), while 16 proxies long-poll GET /v1/pools. It runs for 10 s per
// iteration (use -benchtime=1x) and reports the companion's CPU (ms per
// second of wall time, i.e. thousandths of a core) and its Go heap in use.
func BenchmarkCompanionChurn(b *testing.B) {
	const endpoints, changesPerSec, proxies = 1000, 10, 16
	const duration = 10 * time.Second
	path := filepath.Join(b.TempDir(), "pools.json")
	// The files of every change are built before the clock starts, so the
	// CPU measured is the companion's (and the pollers' reads).
	render := func(gen int) []byte {
		doc := map[string][]Endpoint{}
		for i := range endpoints {
			pool := Pools[i%2]
			n := i
			if i == gen%endpoints {
				n = endpoints + gen // the one replaced by this change
			}
			doc[pool] = append(doc[pool], Endpoint{Name: fmt.Sprintf("%s-%d", pool, n), Address: fmt.Sprintf("10.%d.%d.%d:8000", n>>16&255, n>>8&255, n&255)})
		}
		data, _ := json.Marshal(doc)
		return data
	}
	files := make([][]byte, changesPerSec*int(duration/time.Second)+2)
	for i := range files {
		files[i] = render(i)
	}
	write := func(gen int) {
		data := files[gen%len(files)]
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		write(0)
		cfg, err := ParseConfig([]byte(fmt.Sprintf(`{"prefill":{"file":{"path":%q,"interval_ms":100}},"decode":{"file":{"path":%q,"interval_ms":100}}}`, path, path)))
		if err != nil {
			b.Fatal(err)
		}
		sources, _ := cfg.Sources(quiet)
		reg := NewRegistry(nil)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); Run(ctx, reg, sources, quiet) }()
		srv := httptest.NewServer(reg.Handler())
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if ok, _ := reg.Ready(); ok {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("not ready")
			}
		}
		answers := make([]int, proxies)
		for p := range proxies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				version := int64(-1)
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s?version=%d&wait_ms=5000", srv.URL, version), nil)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						continue
					}
					// The answer starts {"version":N,: read N only.
					head := make([]byte, 32)
					n, _ := io.ReadFull(resp.Body, head)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					var s struct{ Version int64 }
					if i := bytes.IndexByte(head[:n], ','); i > 0 {
						_ = json.Unmarshal(append(head[:i:i], '}'), &s)
					}
					version = s.Version
					answers[p]++
				}
			}()
		}
		runtime.GC()
		cpu0, t0 := processCPU(), time.Now()
		tick := time.NewTicker(time.Second / changesPerSec)
		gen := 1
		var heap uint64
		for time.Since(t0) < duration {
			<-tick.C
			write(gen)
			gen++
			var ms runtime.MemStats
			if gen%20 == 0 {
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapInuse)
			}
		}
		tick.Stop()
		cpu := processCPU() - cpu0
		wall := time.Since(t0)
		cancel()
		srv.Close()
		wg.Wait()
		polls := 0
		for _, a := range answers {
			polls += a
		}
		b.ReportMetric(float64(cpu.Milliseconds())/wall.Seconds(), "cpu-ms/s")
		b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(polls)/wall.Seconds(), "answers/s")
		b.ReportMetric(float64(gen-1)/wall.Seconds(), "changes/s")
	}
}
