// Package nativeproxy is pdroute's nixl (and orchestrated) orchestration
// written as a plain Go reverse proxy: the same decisions and bodies as the
// wasm filter, from the same pure packages — filter/config (parse, match,
// decide, failure policy), filter/connector (prefill and decode bodies,
// request ids), filter/apierr (error answers), tokenest (the estimate) and
// lb over an lb.MemStore (endpoint choice, and lb/prefix's index for
// cache_aware and threshold_on "uncached") — but with net/http in place of
// Envoy. It exists to compare the filter in a proxy with a native router on
// the same mock engines (e2e/scenarios benchmarks and a differential test);
// it is not a product.
//
// What it leaves out: engine stats scraping (least_loaded then rotates, as
// the filter does without stats), the debug path, metrics, and the lmcache
// and sglang modes. It is native code: nothing in the filter may import it.
package nativeproxy

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/lb/prefix"
	"github.com/pdroute/pdroute/tokenest"
)

// Proxy is an http.Handler routing like the pdroute filter in nixl or
// orchestrated mode. It is safe for concurrent use.
type Proxy struct {
	cfg    *config.Config
	method tokenest.Method
	// urls maps an endpoint name to its base URL ("http://ip:port").
	urls   map[string]string
	client *http.Client

	mu              sync.Mutex // guards the balancers and the index (single-threaded)
	prefill, decode *lb.Balancer
	// index is the shared prefix index (nil unless cache_aware or
	// threshold_on "uncached"), in the balancers' store.
	index          *prefix.Index
	preIDs, decIDs []uint32
}

// looked is what the prefix index says of one request's prompt.
type looked struct {
	prompt prefix.Prompt
	match  prefix.Match
}

// lookup renders body and looks its prompt up (nil without an index or a
// prompt it reads).
func (p *Proxy) lookup(body []byte, path string) *looked {
	if p.index == nil {
		return nil
	}
	l := &looked{}
	if !prefix.NewRenderer(p.cfg.PrefixIndex.BlockBytes).Render(body, path, &l.prompt) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.index.Lookup(&l.prompt, time.Now(), &l.match)
	return l
}

// cached is what each endpoint of ids holds of the prompt, and its size.
func (l *looked) cached(ids []uint32) ([]int, int) {
	if l == nil {
		return nil, 0
	}
	return l.match.PerEndpoint(ids, nil), l.prompt.Bytes
}

// record notes the chosen decoder and prefiller (-1: none) in the index.
func (p *Proxy) record(l *looked, dec, pre int) {
	if l == nil {
		return
	}
	ids := []uint32{p.decIDs[dec]}
	if pre >= 0 {
		ids = append(ids, p.preIDs[pre])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.index.Record(&l.prompt, time.Now(), ids...)
}

// New returns a proxy for cfg. Endpoints given by address are reached at
// that address; endpoints given by cluster at clusters[cluster] (IP:port).
// client carries both legs; nil means a client with no overall timeout
// (the prefill leg is bounded by prefill_timeout_ms, a decode streams as
// long as it lasts).
func New(cfg *config.Config, clusters map[string]string, client *http.Client) (*Proxy, error) {
	if cfg.Mode != config.ModeNIXL && cfg.Mode != config.ModeOrchestrated {
		return nil, fmt.Errorf("nativeproxy: mode %s is not implemented (nixl and orchestrated are)", cfg.Mode)
	}
	method, err := tokenest.ParseMethod(cfg.TokenMethod)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{}
	}
	p := &Proxy{cfg: cfg, method: method, urls: map[string]string{}, client: client}
	var seed [16]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, err
	}
	src := rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))
	store := lb.NewMemStore()
	for _, pool := range []struct {
		name string
		p    *config.Pool
		dst  **lb.Balancer
	}{{"prefill", &cfg.Prefill, &p.prefill}, {"decode", &cfg.Decode, &p.decode}} {
		for _, e := range pool.p.Endpoints {
			addr := e.Address
			if addr == "" {
				if addr = clusters[e.Cluster]; addr == "" {
					return nil, fmt.Errorf("nativeproxy: %s endpoint %s: no address for cluster %q", pool.name, e.Name, e.Cluster)
				}
			}
			p.urls[e.Name] = "http://" + addr
		}
		if *pool.dst, err = lb.New(pool.name, pool.p.Balancing(), store, src); err != nil {
			return nil, err
		}
	}
	if cfg.UsesPrefixIndex() {
		if p.index, err = prefix.New(store, cfg.IndexParams()); err != nil {
			return nil, err
		}
		for _, e := range cfg.Prefill.Endpoints {
			p.preIDs = append(p.preIDs, prefix.EndpointID(e.Name))
		}
		for _, e := range cfg.Decode.Endpoints {
			p.decIDs = append(p.decIDs, prefix.EndpointID(e.Name))
		}
	}
	return p, nil
}

// leg is one pick: the lease and its endpoint.
type leg struct {
	lease *lb.Lease
	ep    *config.Endpoint
}

func (p *Proxy) pick(b *lb.Balancer, pool *config.Pool, body []byte, path string, cached []int, total int) (leg, error) {
	var key uint64
	if pool.Strategy == config.PrefixAffinity && body != nil {
		key, _ = tokenest.PrefixKey(body, path, pool.AffinityPrefixBytes)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	l, err := b.PickCached(time.Now(), key, cached, total)
	if err != nil {
		return leg{}, err
	}
	return leg{l, &pool.Endpoints[l.Index]}, nil
}

// finish reports a leg's outcome (once) and releases its load.
func (p *Proxy) finish(l leg, failed bool) {
	if l.lease == nil {
		return
	}
	o := lb.Success
	if failed {
		o = lb.Failure
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	_ = l.lease.Report(now, o)
	l.lease.Release(now)
}

// ServeHTTP routes one request the way the filter does.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := p.cfg
	api, handled := cfg.Match(r.Method, r.URL.Path, r.Header.Get("content-type"))
	if !handled {
		p.passthrough(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(cfg.MaxBodyBytes)+1))
	if err != nil {
		return // the client went away
	}
	if len(body) > cfg.MaxBodyBytes {
		p.fail(w, apierr.BodyTooLarge, fmt.Sprintf("more than %d bytes", cfg.MaxBodyBytes))
		return
	}
	// as the filter does: the estimate validates and indexes the body
	var index tokenest.Index
	tokens := -1
	est, err := tokenest.EstimateNear(body, r.URL.Path, p.method, cfg.ThresholdTokens, &index)
	if errors.Is(err, tokenest.ErrNotJSON) {
		p.fail(w, apierr.MalformedJSON, "request body is not a JSON object")
		return
	}
	if err == nil {
		tokens = est.Tokens
	}
	req, err := connector.NewIndexedRequest(api, body, &index)
	if err != nil {
		p.fail(w, apierr.MalformedJSON, err.Error())
		return
	}
	var random [16]byte
	_, _ = crand.Read(random[:])
	reqID := connector.RequestID(r.Header.Get("x-request-id"), random)
	look := p.lookup(body, r.URL.Path)
	cached, total := look.cached(p.decIDs)
	dec, err := p.pick(p.decode, &cfg.Decode, body, r.URL.Path, cached, total)
	if err != nil {
		p.fail(w, apierr.NoDecodeEndpoint, "")
		return
	}
	x := &exchange{p: p, w: w, r: r, req: req, body: body, reqID: reqID, tokens: tokens, decode: dec, look: look}
	cachedTokens := 0
	if look != nil && total > 0 && tokens > 0 {
		cachedTokens = int(look.match.CachedShare(p.decIDs[dec.lease.Index]) * float64(tokens))
	}
	if cfg.DecideCached(r.Method, r.URL.Path, r.Header.Get("content-type"), tokens, cachedTokens) != config.Disaggregate ||
		connector.Disaggregable(cfg.Mode, req) != nil {
		p.record(look, dec.lease.Index, -1)
		x.toDecoder(req.Direct(), "direct")
		return
	}
	if err := connector.CheckDecode(cfg.Mode, req); err != nil {
		engine := apierr.VLLM
		if cfg.Mode == config.ModeSGLang {
			engine = apierr.SGLang
		}
		p.finish(dec, false)
		status, answer := apierr.EngineBadRequest(engine, err.Error())
		w.Header().Set("x-pdroute-path", "error")
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		w.Write(answer)
		return
	}
	x.disaggregate()
}

// exchange is one handled request between its legs.
type exchange struct {
	p       *Proxy
	w       http.ResponseWriter
	r       *http.Request
	req     connector.Request
	body    []byte
	reqID   string
	tokens  int
	prefill leg
	decode  leg
	look    *looked
}

func (x *exchange) disaggregate() {
	cfg := x.p.cfg
	cached, total := x.look.cached(x.p.preIDs)
	pre, err := x.p.pick(x.p.prefill, &cfg.Prefill, x.body, x.r.URL.Path, cached, total)
	if err != nil {
		x.p.record(x.look, x.decode.lease.Index, -1)
		x.afterFailure(config.PrefillNoEndpoint, "")
		return
	}
	x.p.record(x.look, x.decode.lease.Index, pre.lease.Index)
	x.prefill = pre
	status, answer, outcome := x.callPrefill()
	x.p.finish(pre, outcome == config.PrefillServerError || outcome == config.PrefillReset || outcome == config.PrefillTimeout)
	if outcome != config.PrefillOK {
		if cfg.OnPrefill(outcome).Kind == config.Relay {
			x.p.finish(x.decode, false)
			x.w.Header().Set("x-pdroute-path", "relayed")
			x.w.Header().Set("content-type", "application/json")
			x.w.WriteHeader(status)
			x.w.Write(answer)
			return
		}
		x.afterFailure(outcome, outcome.String())
		return
	}
	ans, _ := connector.ParsePrefillAnswer(answer)
	edit := connector.NIXLDecode(x.req, ans.KVParams)
	if cfg.Mode == config.ModeOrchestrated {
		var attach []byte
		if cfg.Orchestrated.AttachPrefillResponse {
			attach = answer
		}
		if edit, err = connector.OrchestratedDecode(x.req, ans.KVParams, x.prefill.ep, attach); err != nil {
			x.afterFailure(config.PrefillBadAnswer, err.Error())
			return
		}
	}
	x.toDecoder(edit, "disagg")
}

// callPrefill runs the prefill leg and classifies its outcome.
func (x *exchange) callPrefill() (status int, answer []byte, o config.PrefillOutcome) {
	cfg := x.p.cfg
	ctx, cancel := context.WithTimeoutCause(x.r.Context(), cfg.PrefillTimeout, errPrefillTimeout)
	defer cancel()
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, x.p.urls[x.prefill.ep.Name]+x.r.URL.Path, bytes.NewReader(connector.NIXLPrefill(x.req)))
	x.legHeaders(hr)
	resp, err := x.p.client.Do(hr)
	if err != nil {
		if errors.Is(context.Cause(ctx), errPrefillTimeout) {
			return 0, nil, config.PrefillTimeout
		}
		return 0, nil, config.PrefillReset
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer))
	if err != nil {
		return 0, nil, config.PrefillReset
	}
	usable := false
	if resp.StatusCode/100 == 2 {
		if a, err := connector.ParsePrefillAnswer(answer); err == nil {
			usable = a.Usable(cfg.Mode)
		}
	}
	return resp.StatusCode, answer, config.ClassifyPrefill(resp.StatusCode, usable)
}

// afterFailure applies on_prefill_failure: the decoder recomputes, or the
// client gets the error.
func (x *exchange) afterFailure(o config.PrefillOutcome, detail string) {
	act := x.p.cfg.OnPrefill(o)
	if act.Kind != config.Fallback {
		x.p.finish(x.decode, false)
		x.p.fail(x.w, act.Error, detail)
		return
	}
	x.toDecoder(x.req.Direct(), "fallback")
}

// toDecoder sends the edited client body to the decoder and streams its
// answer back, flushing every chunk.
func (x *exchange) toDecoder(edit connector.BodyEdit, route string) {
	failed := true
	defer func() { x.p.finish(x.decode, failed) }()
	hr, _ := http.NewRequestWithContext(x.r.Context(), x.r.Method, x.p.urls[x.decode.ep.Name]+x.r.URL.RequestURI(), bytes.NewReader(edit.Apply(x.body)))
	copyHeaders(hr.Header, x.r.Header)
	x.legHeaders(hr)
	resp, err := x.p.client.Do(hr)
	if err != nil {
		if x.r.Context().Err() == nil {
			x.p.fail(x.w, apierr.Internal, "decode: "+err.Error())
		}
		return
	}
	defer resp.Body.Close()
	failed = resp.StatusCode >= 500
	if x.p.cfg.DebugHeaders {
		h := resp.Header
		h.Set("x-pdroute-path", route)
		h.Set("x-pdroute-decode", x.decode.ep.Name)
		if route == "disagg" {
			h.Set("x-pdroute-prefill", x.prefill.ep.Name)
		}
		if x.tokens >= 0 {
			h.Set("x-pdroute-tokens", strconv.Itoa(x.tokens))
		}
	}
	stream(x.w, resp)
}

// legHeaders are what both legs carry: the request id, JSON, credentials.
func (x *exchange) legHeaders(hr *http.Request) {
	hr.Header.Set("x-request-id", x.reqID)
	hr.Header.Set("content-type", "application/json")
	if a := x.r.Header.Get("authorization"); a != "" {
		hr.Header.Set("authorization", a)
	}
}

// passthrough sends a request pdroute does not handle to a decoder as is.
func (p *Proxy) passthrough(w http.ResponseWriter, r *http.Request) {
	dec, err := p.pick(p.decode, &p.cfg.Decode, nil, r.URL.Path, nil, 0)
	if err != nil {
		p.fail(w, apierr.NoDecodeEndpoint, "")
		return
	}
	failed := true
	defer func() { p.finish(dec, failed) }()
	hr, _ := http.NewRequestWithContext(r.Context(), r.Method, p.urls[dec.ep.Name]+r.URL.RequestURI(), r.Body)
	copyHeaders(hr.Header, r.Header)
	resp, err := p.client.Do(hr)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	failed = resp.StatusCode >= 500
	if p.cfg.DebugHeaders {
		resp.Header.Set("x-pdroute-path", "passthrough")
		resp.Header.Set("x-pdroute-decode", dec.ep.Name)
	}
	stream(w, resp)
}

func (p *Proxy) fail(w http.ResponseWriter, k apierr.Kind, detail string) {
	status, body := apierr.Response(k, detail)
	w.Header().Set("x-pdroute-path", "error")
	w.Header().Set("content-type", apierr.ContentType)
	w.WriteHeader(status)
	w.Write(body)
}

// hopByHop are the headers a proxy does not forward (RFC 9110 §7.6.1), plus
// content-length, which the body edit changes.
var hopByHop = []string{"connection", "keep-alive", "proxy-connection", "te", "trailer",
	"transfer-encoding", "upgrade", "content-length"}

func copyHeaders(dst, src http.Header) {
	for k, v := range src {
		dst[k] = append([]string(nil), v...)
	}
	for _, h := range hopByHop {
		dst.Del(h)
	}
}

// stream copies an upstream answer to the client, flushing as it comes.
func stream(w http.ResponseWriter, resp *http.Response) {
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// maxPrefillAnswer bounds a prefill answer read into memory (a one-token
// completion is a few hundred bytes).
const maxPrefillAnswer = 16 << 20

// errPrefillTimeout is the prefill leg's context cause when
// prefill_timeout_ms ran out.
var errPrefillTimeout = errors.New("prefill timeout")
