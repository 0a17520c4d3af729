package lb

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingStore counts host calls: inside wasm each one is a copy across the VM
// boundary (~0.5-2 µs plus the value size), the dominant cost of a pick.
type countingStore struct {
	Store
	gets, sets atomic.Int64
	yield      bool // runtime.Gosched after every Get: other VMs run between read and write
}

func (c *countingStore) Get(key string) ([]byte, uint32, error) {
	c.gets.Add(1)
	v, cas, err := c.Store.Get(key)
	if c.yield {
		runtime.Gosched()
	}
	return v, cas, err
}

func (c *countingStore) Set(key string, value []byte, cas uint32) error {
	c.sets.Add(1)
	return c.Store.Set(key, value, cas)
}

var allStrategies = []Strategy{RoundRobin, Random, LeastLoaded, QPS, PowerOfTwo, PrefixAffinity}

// BenchmarkPick measures one Pick and its Release (the in-flight cycle of a
// request) on the in-memory store, with passive health on, fresh engine stats and
// a different prefix key each time. gets/op and sets/op are store calls.
func BenchmarkPick(b *testing.B) {
	for _, s := range allStrategies {
		for _, n := range []int{4, 64, 512} {
			b.Run(fmt.Sprintf("%v/endpoints=%d", s, n), func(b *testing.B) {
				store := &countingStore{Store: NewMemStore()}
				bal := newTestBalancer(b, store, testPool(n, s), 1)
				for i := range n {
					if err := bal.PutStats(i, EngineStats{Running: float64(i % 7), Waiting: float64(i % 3)}, t0); err != nil {
						b.Fatal(err)
					}
				}
				store.gets.Store(0)
				store.sets.Store(0)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
					l, err := bal.Pick(now, uint64(i)*0x9e3779b97f4a7c15)
					if err != nil {
						b.Fatal(err)
					}
					l.Release(now)
				}
				b.ReportMetric(float64(store.gets.Load())/float64(b.N), "gets/op")
				b.ReportMetric(float64(store.sets.Load())/float64(b.N), "sets/op")
			})
		}
	}
}

// BenchmarkContention runs VMs (goroutines with their own balancer) picking and
// releasing on one store at once and reports cas retries and unrecorded picks per
// pick. "natural" is the in-memory store as is (on this 2-core machine at most two
// VMs run at a time); "yield" reschedules after every read so other VMs write
// between each read and its write: an adversarial upper bound.
func BenchmarkContention(b *testing.B) {
	for _, s := range []Strategy{RoundRobin, LeastLoaded, QPS} {
		for _, mode := range []string{"natural", "yield"} {
			for _, vms := range []int{2, 8, 32} {
				b.Run(fmt.Sprintf("%v/%s/vms=%d", s, mode, vms), func(b *testing.B) {
					store := &countingStore{Store: NewMemStore(), yield: mode == "yield"}
					cfg := testPool(16, s)
					var balancers []*Balancer
					for v := range vms {
						bal := newTestBalancer(b, store, cfg, uint64(v))
						balancers = append(balancers, bal)
					}
					for i := range 16 {
						if err := balancers[0].PutStats(i, EngineStats{Running: 1}, t0); err != nil {
							b.Fatal(err)
						}
					}
					var retries, unrecorded atomic.Int64
					var wg sync.WaitGroup
					b.ResetTimer()
					for v, bal := range balancers {
						ops := b.N / vms
						if v < b.N%vms {
							ops++
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range ops {
								l, err := bal.Pick(t0, 0)
								if err != nil {
									b.Error(err)
									return
								}
								retries.Add(int64(l.Retries))
								if l.Unrecorded {
									unrecorded.Add(1)
								}
								l.Release(t0)
							}
						}()
					}
					wg.Wait()
					b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
					b.ReportMetric(float64(unrecorded.Load())/float64(b.N), "unrecorded/op")
				})
			}
		}
	}
}

func BenchmarkParseMetrics(b *testing.B) {
	text := []byte{}
	for e := range 8 {
		text = fmt.Appendf(text, "# HELP x y\nvllm:num_requests_running{engine=\"%d\",model_name=\"m\"} %d.0\n", e, e)
		text = fmt.Appendf(text, "vllm:num_requests_waiting{engine=\"%d\",model_name=\"m\"} 1.0\n", e)
		for h := range 20 {
			text = fmt.Appendf(text, "vllm:time_to_first_token_seconds_bucket{engine=\"%d\",le=\"%d\",model_name=\"m\"} 3.0\n", e, h)
		}
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for range b.N {
		if _, err := ParseMetrics(text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPickCached is cache_aware's pick with a prefix-index view: a
// quarter of the picks find their prompt held by one endpoint, the rest by
// none (the sticky-share and rotation paths both run).
func BenchmarkPickCached(b *testing.B) {
	for _, n := range []int{4, 64, 512} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			store := &countingStore{Store: NewMemStore()}
			bal := newTestBalancer(b, store, testPool(n, CacheAware), 1)
			cold, held := make([]int, n), make([]int, n)
			held[n/2] = 9000
			store.gets.Store(0)
			store.sets.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
				cached := cold
				if i%4 == 0 {
					cached = held
				}
				l, err := bal.PickCached(now, 0, cached, 10000)
				if err != nil {
					b.Fatal(err)
				}
				l.Release(now)
			}
			b.ReportMetric(float64(store.gets.Load())/float64(b.N), "gets/op")
			b.ReportMetric(float64(store.sets.Load())/float64(b.N), "sets/op")
		})
	}
}
