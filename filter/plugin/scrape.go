package plugin

import (
	"time"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/discovery"
	"github.com/pdroute/pdroute/lb"
)

// scrapeLeaseKey names the shared-data lease that makes one VM at a time
// scrape the engines: every worker VM ticks, but N workers scraping every
// endpoint would multiply the engines' /metrics load by N.
const scrapeLeaseKey = "scrape_lease"

// scraper fetches each endpoint's /metrics on the root tick and stores the
// parsed load through the pool's balancer (shared data, read by every VM).
type scraper struct {
	enabled  bool
	interval time.Duration
	next     time.Time
	// pending counts this VM's scrape calls still in flight; a round starts
	// only when the previous one ended.
	pending int
}

func newScraper(cfg *config.Config) scraper {
	uses := func(p config.Pool) bool {
		return p.Strategy == config.LeastLoaded || p.Strategy == config.PowerOfTwo
	}
	return scraper{
		enabled:  cfg.StatsScrapeInterval > 0 && (uses(cfg.Prefill) || uses(cfg.Decode)),
		interval: cfg.StatsScrapeInterval,
	}
}

func (sc *scraper) tick(r *rootContext, now time.Time) {
	if !sc.enabled || now.Before(sc.next) || sc.pending > 0 {
		return
	}
	sc.next = now.Add(sc.interval)
	if !r.holdLease(scrapeLeaseKey, now, 2*sc.interval) {
		return
	}
	cfg := r.cfg // the pools as the balancers know them now
	if cfg.Discovery != nil && cfg.Discovery.Stats {
		r.statsFromCompanion(cfg)
		return
	}
	r.scrapePool(cfg, &cfg.Prefill, r.prefill)
	r.scrapePool(cfg, &cfg.Decode, r.decode)
}

func (r *rootContext) scrapePool(cfg *config.Config, p *config.Pool, b *lb.Balancer) {
	if p.Strategy != config.LeastLoaded && p.Strategy != config.PowerOfTwo {
		return
	}
	timeout := r.scrape.interval
	if timeout > 5*time.Second {
		timeout = 5 * time.Second
	}
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		if e.Name == "" {
			continue // a discovered pool's free or draining slot
		}
		cluster, dst := e.MetricsCluster, ""
		if cluster == "" || (cluster == r.cfg.OriginalDstCluster && e.Address != "") {
			// Parse defaults an address endpoint's metrics_cluster to the
			// ORIGINAL_DST cluster, which needs the address in its header.
			cluster, dst = r.cfg.Upstream(e)
		}
		headers := [][2]string{{":method", "GET"}, {":path", "/metrics"}, {":authority", e.Name}}
		if dst != "" {
			headers = append(headers, [2]string{originalDstHeader, dst})
		}
		i := i
		_, err := abi.DispatchHttpCall(cluster, headers, nil, nil, uint32(timeout/time.Millisecond),
			func(numHeaders, bodySize, _ int) {
				r.scrape.pending--
				a := readCallAnswer(numHeaders, bodySize)
				if a.status != 200 {
					r.m.scrapeErrors.Increment(1)
					return
				}
				stats, err := lb.ParseMetrics(a.body)
				if err != nil {
					r.m.scrapeErrors.Increment(1)
					abi.LogDebugf("pdroute: /metrics of %s: %v", e.Name, err)
					return
				}
				if r.cfg != cfg && !sameSlot(r.cfg, cfg, p == &cfg.Prefill, i) {
					return // the set changed while scraping: slot i is another endpoint now
				}
				if err := b.PutStats(i, stats, time.Now()); err != nil {
					abi.LogDebugf("pdroute: store stats of %s: %v", e.Name, err)
				}
				r.m.scrapeSuccess.Increment(1)
			})
		if err != nil {
			r.m.scrapeErrors.Increment(1)
			abi.LogWarnf("pdroute: scrape %s through cluster %s: %v", e.Name, cluster, err)
			continue
		}
		r.scrape.pending++
	}
}

// sameSlot reports whether slot i of a pool holds the same endpoint in two
// configurations of a discovered root.
func sameSlot(a, b *config.Config, prefill bool, i int) bool {
	pa, pb := a.Decode.Endpoints, b.Decode.Endpoints
	if prefill {
		pa, pb = a.Prefill.Endpoints, b.Prefill.Endpoints
	}
	return i < len(pa) && i < len(pb) && pa[i].Name == pb[i].Name && pa[i].Address == pb[i].Address
}

// statsFromCompanion asks the discovery companion for every engine's stats
// (one call instead of one per engine) and stores those of the endpoints in
// service, by slot.
func (r *rootContext) statsFromCompanion(cfg *config.Config) {
	d := cfg.Discovery
	headers := [][2]string{{":method", "GET"}, {":path", d.StatsPath}, {":authority", "pdroute-discovery"}}
	timeout := min(r.scrape.interval, 5*time.Second)
	_, err := abi.DispatchHttpCall(d.Cluster, headers, nil, nil, uint32(timeout/time.Millisecond), func(numHeaders, bodySize, _ int) {
		r.scrape.pending--
		a := readCallAnswer(numHeaders, bodySize)
		if a.status != 200 {
			r.m.scrapeErrors.Increment(1)
			return
		}
		cur := r.cfg // the set may have changed while the call was out
		want := map[string]bool{}
		for _, p := range []*config.Pool{&cur.Prefill, &cur.Decode} {
			for _, e := range p.Endpoints {
				if e.Name != "" {
					want[e.Name] = true
				}
			}
		}
		stats, err := discovery.ParseStats(a.body, want)
		if err != nil {
			r.m.scrapeErrors.Increment(1)
			abi.LogDebugf("pdroute: companion stats: %v", err)
			return
		}
		for _, p := range []struct {
			pool *config.Pool
			b    *lb.Balancer
		}{{&cur.Prefill, r.prefill}, {&cur.Decode, r.decode}} {
			if p.pool.Strategy != config.LeastLoaded && p.pool.Strategy != config.PowerOfTwo {
				continue
			}
			for i, e := range p.pool.Endpoints {
				if st, ok := stats[e.Name]; ok && e.Name != "" {
					if err := p.b.PutStats(i, st.Stats, st.Observed); err != nil {
						abi.LogDebugf("pdroute: store stats of %s: %v", e.Name, err)
					}
				}
			}
		}
		r.m.scrapeSuccess.Increment(1)
	})
	if err != nil {
		r.m.scrapeErrors.Increment(1)
		abi.LogWarnf("pdroute: companion stats through cluster %s: %v", d.Cluster, err)
		return
	}
	r.scrape.pending++
}
