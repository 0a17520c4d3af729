package plugin

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
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
	if !r.holdScrapeLease(now, 2*sc.interval) {
		return
	}
	r.scrapePool(&r.cfg.Prefill, r.prefill)
	r.scrapePool(&r.cfg.Decode, r.decode)
}

// holdScrapeLease takes or renews the scrape lease: value = owner instance
// (8 bytes) + expiry in Unix ns (8 bytes), written with CAS. The owner renews
// it every interval; another VM takes over once it lapses.
func (r *rootContext) holdScrapeLease(now time.Time, ttl time.Duration) bool {
	v, cas, err := r.store.Get(scrapeLeaseKey)
	switch {
	case errors.Is(err, lb.ErrNotFound):
		cas = 0
	case err != nil:
		return false
	case len(v) == 16:
		owner, expiry := binary.LittleEndian.Uint64(v), int64(binary.LittleEndian.Uint64(v[8:]))
		if owner != r.instance && now.UnixNano() < expiry {
			return false
		}
	}
	var nv [16]byte
	binary.LittleEndian.PutUint64(nv[:], r.instance)
	binary.LittleEndian.PutUint64(nv[8:], uint64(now.Add(ttl).UnixNano()))
	return r.store.Set(scrapeLeaseKey, nv[:], cas) == nil
}

func (r *rootContext) scrapePool(p *config.Pool, b *lb.Balancer) {
	if p.Strategy != config.LeastLoaded && p.Strategy != config.PowerOfTwo {
		return
	}
	timeout := r.scrape.interval
	if timeout > 5*time.Second {
		timeout = 5 * time.Second
	}
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		cluster, dst := e.MetricsCluster, ""
		if cluster == "" {
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
