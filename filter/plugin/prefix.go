package plugin

import (
	"strconv"
	"time"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/lb/prefix"
	"github.com/pdroute/pdroute/tokenest"
)

// prefixRouting is a root's handle on the shared prefix index, present when
// the configuration reads it (cache_aware, threshold_on "uncached").
type prefixRouting struct {
	index          *prefix.Index
	render         *prefix.Renderer
	preIDs, decIDs []uint32
	// Per-VM scratch, reused by every request (a VM is single-threaded).
	prompt             prefix.Prompt
	match              prefix.Match
	preCached, decCach []int
	members            []prefix.Member
	// Metrics: how routed requests found the chosen decoder's cache.
	decisions map[string]abi.MetricCounter // threshold decisions by route and by cache
	share     abi.MetricHistogram          // cached share of the prompt on the decoder, percent
	reads     abi.MetricCounter            // index reads and writes (shared-data calls)
	writes    abi.MetricCounter
}

func newPrefixRouting(cfg *config.Config, store lb.Store) (*prefixRouting, error) {
	if !cfg.UsesPrefixIndex() {
		return nil, nil
	}
	x, err := prefix.New(store, cfg.IndexParams())
	if err != nil {
		return nil, err
	}
	p := &prefixRouting{index: x, render: prefix.NewRenderer(cfg.PrefixIndex.BlockBytes), decisions: map[string]abi.MetricCounter{}}
	p.setEndpoints(cfg)
	for _, k := range []string{"disaggregate", "direct", "direct_by_cache"} {
		p.decisions[k] = abi.DefineCounterMetric(metricPrefix + "prefix.decisions." + k)
	}
	p.share = abi.DefineHistogramMetric(metricPrefix + "prefix.decode_cached_percent")
	p.reads = abi.DefineCounterMetric(metricPrefix + "prefix.index_calls.lookup")
	p.writes = abi.DefineCounterMetric(metricPrefix + "prefix.index_calls.record")
	return p, nil
}

// setEndpoints takes the pools' endpoints (one per slot of a discovered
// pool, a free slot's name empty) as the index's endpoint identities: the
// index knows endpoints by name, the balancers by position.
func (p *prefixRouting) setEndpoints(cfg *config.Config) {
	p.preIDs, p.decIDs = p.preIDs[:0], p.decIDs[:0]
	for _, e := range cfg.Prefill.Endpoints {
		p.preIDs = append(p.preIDs, prefix.EndpointID(e.Name))
	}
	for _, e := range cfg.Decode.Endpoints {
		p.decIDs = append(p.decIDs, prefix.EndpointID(e.Name))
	}
}

// lookup renders the body and finds what each endpoint holds of it. It
// reports false when the body has no prompt the index reads. x, when
// complete, is the estimate's index of the body's members: rendering from
// it spares reading the whole body again.
func (p *prefixRouting) lookup(body []byte, x *tokenest.Index, path string, now time.Time) bool {
	p.preCached, p.decCach = p.preCached[:0], p.decCach[:0]
	var ok bool
	if x.Complete() {
		p.members = p.members[:0]
		for _, m := range x.Members {
			p.members = append(p.members, prefix.Member(m))
		}
		ok = p.render.RenderMembers(body, p.members, path, &p.prompt)
	} else {
		ok = p.render.Render(body, path, &p.prompt)
	}
	if !ok {
		return false
	}
	p.index.Lookup(&p.prompt, now, &p.match)
	p.reads.Increment(uint64(p.match.Reads))
	p.preCached = p.match.PerEndpoint(p.preIDs, p.preCached)
	p.decCach = p.match.PerEndpoint(p.decIDs, p.decCach)
	return true
}

// cachedTokens converts decoder i's cached bytes to tokens of estimate.
func (p *prefixRouting) cachedTokens(i, estimate int) (tokens int, share float64) {
	if p.prompt.Bytes == 0 || estimate <= 0 || i < 0 || i >= len(p.decIDs) {
		return 0, 0
	}
	share = p.match.CachedShare(p.decIDs[i])
	return int(share * float64(estimate)), share
}

// record notes the endpoints chosen for the prompt last looked up: the
// decoder, and the prefiller when there is one (-1: none).
func (p *prefixRouting) record(decode, prefill int, now time.Time) {
	var err error
	var calls int
	if decode < 0 || decode >= len(p.decIDs) || prefill >= len(p.preIDs) {
		return // an endpoint of a set this VM no longer has
	}
	if prefill >= 0 {
		calls, err = p.index.Record(&p.prompt, now, p.decIDs[decode], p.preIDs[prefill])
	} else {
		calls, err = p.index.Record(&p.prompt, now, p.decIDs[decode])
	}
	p.writes.Increment(uint64(calls))
	if err != nil {
		abi.LogDebugf("pdroute: prefix index: %v", err)
	}
}

// cacheHeader is the x-pdroute-cached debug header's value: the share of
// the prompt the decoder held, in percent, and the tokens that makes.
func cacheHeader(share float64, tokens int) string {
	return strconv.Itoa(int(share*100+0.5)) + "%/" + strconv.Itoa(tokens)
}
