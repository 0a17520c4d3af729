package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pdroute/pdroute/lb"
)

// EngineStats is one engine's load as the companion scraped it.
type EngineStats struct {
	Running      float64 `json:"running"`
	Waiting      float64 `json:"waiting"`
	KVCacheUsage float64 `json:"kv_cache_usage"`
	// ObservedMS is when the scrape answered (Unix ms).
	ObservedMS int64 `json:"observed_ms"`
}

// StatsAnswer is GET /v1/stats's body: the last stats of every engine in
// the sets, by endpoint name.
type StatsAnswer struct {
	Stats map[string]EngineStats `json:"stats"`
}

// Scraper scrapes every engine of the registry's sets once per interval, so
// that engines see one scrape per interval per companion instead of one per
// proxy (each proxy's filter asks the companion instead).
type Scraper struct {
	reg      *Registry
	interval time.Duration
	client   *http.Client
	log      *slog.Logger
	mu       sync.Mutex
	stats    map[string]EngineStats
	// Scrapes counts /metrics requests made (tests, benchmarks).
	Scrapes atomic.Uint64
}

// scrapeConcurrency bounds the scrapes in flight.
const scrapeConcurrency = 32

// NewScraper returns a scraper of reg's engines every interval.
func NewScraper(reg *Registry, interval time.Duration, log *slog.Logger) *Scraper {
	return &Scraper{reg: reg, interval: interval, log: log, stats: map[string]EngineStats{},
		client: &http.Client{Timeout: min(interval, 5*time.Second)}}
}

// Run scrapes until ctx ends.
func (s *Scraper) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Scraper) round(ctx context.Context) {
	sets := s.reg.Current()
	eps := append(append([]Endpoint(nil), sets.Prefill...), sets.Decode...)
	sem := make(chan struct{}, scrapeConcurrency)
	var wg sync.WaitGroup
	fresh := make(map[string]EngineStats, len(eps))
	var mu sync.Mutex
	for _, e := range eps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			st, err := s.scrape(ctx, e)
			if err != nil {
				s.log.Debug("scrape failed", "endpoint", e.Name, "err", err.Error())
				return
			}
			mu.Lock()
			fresh[e.Name] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep a failed engine's last stats (the filter judges their age);
	// forget engines that left the sets.
	next := make(map[string]EngineStats, len(eps))
	for _, e := range eps {
		if st, ok := fresh[e.Name]; ok {
			next[e.Name] = st
		} else if st, ok := s.stats[e.Name]; ok {
			next[e.Name] = st
		}
	}
	s.stats = next
}

func (s *Scraper) scrape(ctx context.Context, e Endpoint) (EngineStats, error) {
	ap, err := netip.ParseAddrPort(e.Address)
	if err != nil {
		return EngineStats{}, err
	}
	if e.MetricsPort != 0 {
		ap = netip.AddrPortFrom(ap.Addr(), uint16(e.MetricsPort))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ap.String()+"/metrics", nil)
	if err != nil {
		return EngineStats{}, err
	}
	s.Scrapes.Add(1)
	resp, err := s.client.Do(req)
	if err != nil {
		return EngineStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return EngineStats{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return EngineStats{}, err
	}
	st, err := lb.ParseMetrics(body)
	if err != nil {
		return EngineStats{}, err
	}
	return EngineStats{Running: st.Running, Waiting: st.Waiting, KVCacheUsage: st.KVCacheUsage, ObservedMS: time.Now().UnixMilli()}, nil
}

// Handler serves GET /v1/stats.
func (s *Scraper) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		body, err := json.Marshal(StatsAnswer{Stats: s.stats})
		s.mu.Unlock()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
}
