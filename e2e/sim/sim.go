// Package sim is pdroute's routing simulator: it replays a workload trace
// against a fleet of modelled engines (e2e/engine) on simulated time, and
// routes every request with the filter's own code — the body the filter
// would receive, tokenest's estimate, config.Decide, and lb balancers over
// an lb.MemStore fed with in-flight counts and engine stats as the filter
// feeds them. It compares configurations side by side and reports TTFT,
// ITL, throughput, prefix-cache hits and utilisation per load.
//
// Nothing here decides a route: a change to the filter's decision or
// balancing code shows up in the simulator's figures.
package sim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/e2e/sim/trace"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/lb/prefix"
	"github.com/pdroute/pdroute/tokenest"
)

// Prepared is a trace ready to run: each request rendered once, with what
// routing reads from its body computed on first use and kept across runs
// (the results are pure functions of the body).
type Prepared struct {
	Name string
	Reqs []PreparedRequest
}

// PreparedRequest is one request of a prepared trace.
type PreparedRequest struct {
	At           time.Duration
	Body         []byte
	Path         string
	PromptTokens int
	OutputTokens int
	// Hashes are the prompt's block hashes for the profile's block size.
	Hashes    []uint64
	estimates map[tokenest.Method]int
	prefixes  map[int]uint64
	// rendered is the prefix index's view of the body, per block size.
	rendered map[int]*prefix.Prompt
}

// Prepare renders a trace's bodies and prompt block hashes.
func Prepare(name string, reqs []trace.Request, blockSize int) *Prepared {
	r := trace.NewRenderer()
	p := &Prepared{Name: name, Reqs: make([]PreparedRequest, len(reqs))}
	t0 := reqs[0].AtMs
	for i := range reqs {
		q := &reqs[i]
		tokens := q.PromptTokens()
		p.Reqs[i] = PreparedRequest{
			At:           time.Duration((q.AtMs - t0) * float64(time.Millisecond)),
			Body:         r.Body(q),
			Path:         trace.Path(q),
			PromptTokens: tokens,
			OutputTokens: q.OutputTokens,
			Hashes:       engine.BlockHashes(r.PromptText(q), blockSize, tokens/blockSize),
			estimates:    map[tokenest.Method]int{},
			prefixes:     map[int]uint64{},
			rendered:     map[int]*prefix.Prompt{},
		}
	}
	return p
}

// Scaled returns the trace with arrival times divided by factor (factor 2 =
// twice the rate), sharing the rendered requests.
func (p *Prepared) Scaled(factor float64) *Prepared {
	q := &Prepared{Name: p.Name, Reqs: slices.Clone(p.Reqs)}
	for i := range q.Reqs {
		q.Reqs[i].At = time.Duration(float64(q.Reqs[i].At) / factor)
	}
	return q
}

// Rate is the trace's mean request rate per second.
func (p *Prepared) Rate() float64 {
	n := len(p.Reqs)
	if n < 2 || p.Reqs[n-1].At <= 0 {
		return 0
	}
	return float64(n-1) / p.Reqs[n-1].At.Seconds()
}

// estimate is the filter's token estimate of the body (negative when it
// failed, as the filter passes it to Decide).
func (r *PreparedRequest) estimate(m tokenest.Method) int {
	if v, ok := r.estimates[m]; ok {
		return v
	}
	v := -1
	if est, err := tokenest.Estimate(r.Body, r.Path, m); err == nil {
		v = est.Tokens
	}
	r.estimates[m] = v
	return v
}

// prefixKey is the filter's prefix key for a pool (0 unless prefix_affinity).
func (r *PreparedRequest) prefixKey(p *config.Pool) uint64 {
	if p.Strategy != config.PrefixAffinity {
		return 0
	}
	if v, ok := r.prefixes[p.AffinityPrefixBytes]; ok {
		return v
	}
	k, err := tokenest.PrefixKey(r.Body, r.Path, p.AffinityPrefixBytes)
	if err != nil {
		k = 0
	}
	r.prefixes[p.AffinityPrefixBytes] = k
	return k
}

// indexPrompt is the filter's prefix-index rendering of the body (nil when
// the body has no prompt it reads).
func (r *PreparedRequest) indexPrompt(blockBytes int) *prefix.Prompt {
	if v, ok := r.rendered[blockBytes]; ok {
		return v
	}
	var p prefix.Prompt
	var out *prefix.Prompt
	if prefix.NewRenderer(blockBytes).Render(r.Body, r.Path, &p) {
		out = &p
	}
	r.rendered[blockBytes] = out
	return out
}

// Warm computes every estimate and prefix key the setups will read, so runs
// sharing the trace can then run concurrently without writing to it.
func (p *Prepared) Warm(setups []Setup) {
	for i := range p.Reqs {
		r := &p.Reqs[i]
		for _, s := range setups {
			m, _ := tokenest.ParseMethod(s.Config.TokenMethod)
			r.estimate(m)
			r.prefixKey(&s.Config.Prefill)
			r.prefixKey(&s.Config.Decode)
			if s.Config.UsesPrefixIndex() {
				r.indexPrompt(s.Config.PrefixIndex.BlockBytes)
			}
		}
	}
}

// Setup is one configuration to compare: a parsed plugin configuration
// whose pool endpoints are the engines, all of one profile.
type Setup struct {
	Name   string
	Config *config.Config
	// Raw is the plugin configuration's JSON, as given to Parse.
	Raw     []byte
	Profile engine.Params
	// NoPrefillEngines: the prefill pool is a placeholder with no engine
	// behind it (an aggregated fleet: the configuration never
	// disaggregates). Its endpoints count no GPU.
	NoPrefillEngines bool
	// DecodeBeforeBody: the decoder is chosen from the headers alone, as in
	// the filter's flag-free request path (route_at: headers), so a
	// cache_aware decode pool cannot see the prompt and balances on load
	// only. The prefill choice and threshold_on "uncached" still read the
	// body (it has arrived by then).
	DecodeBeforeBody bool
}

// GPUs is how many engines the setup runs (each engine is one profile
// instance: one GPU, or a TP group).
func (s *Setup) GPUs() int {
	n := len(s.Config.Decode.Endpoints)
	if !s.NoPrefillEngines {
		n += len(s.Config.Prefill.Endpoints)
	}
	return n
}

// Result is one run: a setup at one load.
type Result struct {
	Workload string  `json:"workload"`
	Setup    string  `json:"setup"`
	Rate     float64 `json:"rate_rps"`
	Requests int     `json:"requests"`
	// Completed requests; Failed ones found no endpoint or could never fit
	// in an engine's KV cache.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// TTFT and ITL percentiles in milliseconds.
	TTFTP50 float64 `json:"ttft_p50_ms"`
	TTFTP90 float64 `json:"ttft_p90_ms"`
	TTFTP99 float64 `json:"ttft_p99_ms"`
	ITLP50  float64 `json:"itl_p50_ms"`
	ITLP99  float64 `json:"itl_p99_ms"`
	// OutputTokensPerSec over the run (first arrival to last finish).
	OutputTokensPerSec float64 `json:"output_tokens_per_s"`
	// PrefixHitRate: prompt tokens found in the prefix cache / prompt tokens
	// prefilled (prefill legs and direct requests).
	PrefixHitRate float64 `json:"prefix_hit_rate"`
	// DisaggregatedFraction of the handled requests.
	DisaggregatedFraction float64 `json:"disaggregated_fraction"`
	// Utilisation: busy time / run time, mean over the pool's engines.
	PrefillUtil float64 `json:"prefill_util"`
	DecodeUtil  float64 `json:"decode_util"`
	// SimulatedSeconds is the run's length on the simulated clock.
	SimulatedSeconds float64 `json:"simulated_s"`
}

// ttftHook, when set (tests), sees every TTFT in milliseconds.
var ttftHook func(ms float64)

// epoch is the wall-clock time the simulated clock starts at, for lb.
var epoch = time.Unix(1_700_000_000, 0)

type flight struct {
	req      *PreparedRequest
	arrive   time.Duration
	disagg   bool
	dec      int // decode engine
	decLease *lb.Lease
	preLease *lb.Lease
	lastTok  time.Duration
	done     bool
}

type pendingDecode struct {
	at time.Duration
	f  *flight
}

// Run replays trace p against s. seed seeds the balancers' random sources.
func Run(s *Setup, p *Prepared, seed uint64) (Result, error) {
	cfg := s.Config
	method, err := tokenest.ParseMethod(cfg.TokenMethod)
	if err != nil {
		return Result{}, err
	}
	h := fnv.New64a()
	h.Write([]byte(s.Name))
	src := rand.NewPCG(seed, h.Sum64())
	store := lb.NewMemStore()
	preBal, err := lb.New("prefill", cfg.Prefill.Balancing(), store, src)
	if err != nil {
		return Result{}, err
	}
	decBal, err := lb.New("decode", cfg.Decode.Balancing(), store, src)
	if err != nil {
		return Result{}, err
	}
	// The prefix index, in the same store as the balancers, as in the filter.
	var index *prefix.Index
	var preIDs, decIDs []uint32
	var preCached, decCached []int
	var match prefix.Match
	if cfg.UsesPrefixIndex() {
		if index, err = prefix.New(store, cfg.IndexParams()); err != nil {
			return Result{}, err
		}
		for _, e := range cfg.Prefill.Endpoints {
			preIDs = append(preIDs, prefix.EndpointID(e.Name))
		}
		for _, e := range cfg.Decode.Endpoints {
			decIDs = append(decIDs, prefix.EndpointID(e.Name))
		}
	}
	newEngines := func(n int) ([]*engine.Engine, error) {
		out := make([]*engine.Engine, n)
		for i := range out {
			if out[i], err = engine.New(s.Profile); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var pre []*engine.Engine
	if !s.NoPrefillEngines {
		if pre, err = newEngines(len(cfg.Prefill.Endpoints)); err != nil {
			return Result{}, err
		}
	}
	dec, err := newEngines(len(cfg.Decode.Endpoints))
	if err != nil {
		return Result{}, err
	}
	all := append(slices.Clone(pre), dec...)
	scrape := cfg.StatsScrapeInterval
	needStats := func(p *config.Pool) bool {
		return p.Strategy == config.LeastLoaded || p.Strategy == config.PowerOfTwo
	}
	if !needStats(&cfg.Prefill) && !needStats(&cfg.Decode) {
		scrape = 0
	}

	res := Result{Workload: p.Name, Setup: s.Name, Rate: p.Rate(), Requests: len(p.Reqs)}
	var ttft, itl []float64
	var outTokens int64
	var last time.Duration
	var pending []pendingDecode // prefill legs done, decode legs to start, in time order
	nextScrape := time.Duration(0)
	handled, disagg := 0, 0
	next := 0
	var misses *missTracker
	if MissReport != nil && s.NoPrefillEngines {
		misses = newMissTracker(len(dec))
	}
	T := func(t time.Duration) time.Time { return epoch.Add(t) }

	finishFlight := func(f *flight, at time.Duration, ok bool) {
		if f.done {
			return
		}
		f.done = true
		if !ok {
			res.Failed++
		}
		last = max(last, at)
	}
	// drain handles an engine's events at their times.
	drain := func(e *engine.Engine, isPrefill bool) {
		for _, ev := range e.Events() {
			f := ev.Req.Tag.(*flight)
			switch {
			case isPrefill && ev.Kind == engine.Done:
				// The prefill answered: release it, start the decode leg.
				if f.preLease != nil {
					_ = f.preLease.Report(T(ev.At), lb.Success)
					f.preLease.Release(T(ev.At))
				}
				if ev.Req.Rejected {
					f.decLease.Release(T(ev.At))
					finishFlight(f, ev.At, false)
					continue
				}
				pending = append(pending, pendingDecode{ev.At, f})
			case isPrefill:
				// The prefill's own first token is not the client's.
			case ev.Kind == engine.FirstToken:
				ms := float64(ev.At-f.arrive) / float64(time.Millisecond)
				ttft = append(ttft, ms)
				if ttftHook != nil {
					ttftHook(ms)
				}
				f.lastTok = ev.At
				_ = f.decLease.Report(T(ev.At), lb.Success)
			case ev.Kind == engine.Token:
				itl = append(itl, float64(ev.At-f.lastTok)/float64(time.Millisecond))
				f.lastTok = ev.At
			case ev.Kind == engine.Done:
				if misses != nil && !ev.Req.Rejected {
					misses.done(f, ev.Req, s.Profile.BlockSize)
				}
				outTokens += int64(ev.Req.Generated)
				if ev.Req.Rejected {
					_ = f.decLease.Report(T(ev.At), lb.Success)
				} else {
					res.Completed++
				}
				f.decLease.Release(T(ev.At))
				finishFlight(f, ev.At, !ev.Req.Rejected)
			}
		}
	}
	arrive := func(r *PreparedRequest, now time.Duration) {
		f := &flight{req: r, arrive: now}
		est := r.estimate(method)
		if cfg.Decide("POST", r.Path, "application/json", est) == config.Passthrough {
			finishFlight(f, now, false)
			return
		}
		handled++
		// As the filter: the decoder is chosen first, then the route (which
		// may depend on what that decoder holds), then the prefiller.
		var ip *prefix.Prompt
		preCached, decCached = nil, nil
		if index != nil {
			if ip = r.indexPrompt(cfg.PrefixIndex.BlockBytes); ip != nil {
				index.Lookup(ip, T(now), &match)
				preCached = match.PerEndpoint(preIDs, preCached)
				if !s.DecodeBeforeBody {
					decCached = match.PerEndpoint(decIDs, decCached)
				}
			}
		}
		l, err := decBal.PickCached(T(now), r.prefixKey(&cfg.Decode), decCached, promptBytes(ip))
		if err != nil {
			finishFlight(f, now, false)
			return
		}
		f.decLease, f.dec = l, l.Index
		if misses != nil {
			gain := int(cfg.Decode.CacheMinGain * float64(promptBytes(ip)))
			misses.routed(f, dec[f.dec], decCached, max(gain, 1))
		}
		cachedTokens := 0
		if ip != nil && ip.Bytes > 0 && est > 0 {
			cachedTokens = int(int64(est) * int64(match.CachedBytes(decIDs[f.dec])) / int64(ip.Bytes))
		}
		route := cfg.DecideCached("POST", r.Path, "application/json", est, cachedTokens)
		if route == config.Disaggregate {
			if pl, err := preBal.PickCached(T(now), r.prefixKey(&cfg.Prefill), preCached, promptBytes(ip)); err == nil && pre != nil {
				if ip != nil {
					_, _ = index.Record(ip, T(now), decIDs[f.dec], preIDs[pl.Index])
				}
				f.disagg, f.preLease = true, pl
				disagg++
				pre[pl.Index].Submit(&engine.Request{Kind: engine.PrefillOnly, PromptTokens: r.PromptTokens, Hashes: r.Hashes, Tag: f}, now)
				drain(pre[pl.Index], true)
				return
			} else if err == nil {
				pl.Release(T(now)) // a placeholder prefill pool: fall back as on failure
			}
		}
		if ip != nil {
			_, _ = index.Record(ip, T(now), decIDs[f.dec])
		}
		dec[f.dec].Submit(&engine.Request{Kind: engine.Full, PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens, Hashes: r.Hashes, Tag: f}, now)
		drain(dec[f.dec], false)
	}

	const never = time.Duration(1<<63 - 1)
	for steps := 0; ; steps++ {
		// The next event: an engine's wake, an arrival, a decode leg, a scrape.
		t, kind, idx := never, -1, -1
		for i, e := range all {
			if w, ok := e.NextWake(); ok && w < t {
				t, kind, idx = w, 0, i
			}
		}
		if len(pending) > 0 && pending[0].at < t {
			t, kind = pending[0].at, 1
		}
		if next < len(p.Reqs) && p.Reqs[next].At < t {
			t, kind = p.Reqs[next].At, 2
		}
		if kind < 0 {
			break
		}
		if scrape > 0 && nextScrape <= t {
			for i, e := range pre {
				_ = preBal.PutStats(i, lb.EngineStats{Running: float64(e.Running()), Waiting: float64(e.Waiting()), KVCacheUsage: e.KVUsage()}, T(nextScrape))
			}
			for i, e := range dec {
				_ = decBal.PutStats(i, lb.EngineStats{Running: float64(e.Running()), Waiting: float64(e.Waiting()), KVCacheUsage: e.KVUsage()}, T(nextScrape))
			}
			nextScrape += scrape
			continue
		}
		switch kind {
		case 0:
			all[idx].Advance(t)
			drain(all[idx], idx < len(pre))
		case 1:
			f := pending[0].f
			pending = pending[1:]
			dec[f.dec].Submit(&engine.Request{Kind: engine.DecodeOnly, PromptTokens: f.req.PromptTokens, OutputTokens: f.req.OutputTokens, Hashes: f.req.Hashes, Tag: f}, t)
			drain(dec[f.dec], false)
		case 2:
			arrive(&p.Reqs[next], t)
			next++
		}
	}

	if misses != nil {
		misses.report(s, p)
	}
	span := last - p.Reqs[0].At
	res.SimulatedSeconds = span.Seconds()
	if span > 0 {
		res.OutputTokensPerSec = float64(outTokens) / span.Seconds()
		util := func(es []*engine.Engine) float64 {
			if len(es) == 0 {
				return 0
			}
			var busy time.Duration
			for _, e := range es {
				busy += e.Stats().Busy
			}
			return float64(busy) / float64(span) / float64(len(es))
		}
		res.PrefillUtil, res.DecodeUtil = util(pre), util(dec)
	}
	var prompt, cached int64
	for _, e := range all {
		st := e.Stats()
		prompt += st.PromptTokens
		cached += st.CachedTokens
	}
	if prompt > 0 {
		res.PrefixHitRate = float64(cached) / float64(prompt)
	}
	if handled > 0 {
		res.DisaggregatedFraction = float64(disagg) / float64(handled)
	}
	res.TTFTP50, res.TTFTP90, res.TTFTP99 = percentiles3(ttft, 0.50, 0.90, 0.99)
	res.ITLP50, _, res.ITLP99 = percentiles3(itl, 0.50, 0.50, 0.99)
	if res.Completed+res.Failed != res.Requests {
		return res, fmt.Errorf("sim: %s on %s: %d completed + %d failed of %d requests", s.Name, p.Name, res.Completed, res.Failed, res.Requests)
	}
	return res, nil
}

func promptBytes(p *prefix.Prompt) int {
	if p == nil {
		return 0
	}
	return p.Bytes
}

// percentiles3 returns three nearest-rank percentiles of xs (sorted in place).
func percentiles3(xs []float64, a, b, c float64) (float64, float64, float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(xs)
	at := func(q float64) float64 {
		i := int(q*float64(len(xs))+0.5) - 1
		return xs[min(max(i, 0), len(xs)-1)]
	}
	return at(a), at(b), at(c)
}
