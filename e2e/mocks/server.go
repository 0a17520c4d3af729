package mocks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/pdroute/pdroute/e2e/engine"
)

// maxBody bounds an inference request body (32 MiB, far above any scenario prompt).
const maxBody = 32 << 20

// Server is one running mock engine.
type Server struct {
	cfg    Config
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	bgMu   sync.Mutex // guards closed against background's wg.Add
	closed bool
	wg     sync.WaitGroup // background work (notifications)
	client *http.Client   // engine-to-engine calls

	servers   []*http.Server
	addrs     Addresses
	closeOnce sync.Once

	rec      recorder
	counters counters
	faults   *faultSet
	sched    *scheduler
	live     *engine.Live // nil unless Config.Perf
	latMu    sync.Mutex
	lat      Latency

	leases   *leaseTable // vLLM prefill
	kvbuf    *kvBuffer   // LMCache decode
	rooms    *roomTable  // SGLang prefill
	notifier *notifier   // LMCache prefill
}

// Addresses are where a Server listens; mockengine prints them as one JSON line.
type Addresses struct {
	// Name, Engine and Role identify the mock (Config.Name, Kind, Role).
	Name   string `json:"name"`
	Engine Kind   `json:"engine"`
	Role   Role   `json:"role"`
	// Addr is the OpenAI API's host:port and URL its base URL.
	Addr string `json:"addr"`
	URL  string `json:"url"`
	// EngineID is vLLM's remote_engine_id.
	EngineID string `json:"engine_id,omitempty"`
	// SideChannel is a vLLM prefiller's block-pull listener (remote_host:remote_port).
	SideChannel string `json:"side_channel,omitempty"`
	// KVInit and KVAlloc are an LMCache decoder's receivers, one per TP rank
	// (receiver_init_port, receiver_alloc_port).
	KVInit  []string `json:"kv_init,omitempty"`
	KVAlloc []string `json:"kv_alloc,omitempty"`
	// Bootstrap is an SGLang prefiller's bootstrap server (bootstrap_port).
	Bootstrap string `json:"bootstrap,omitempty"`
}

// KVInitPorts are the ports of KVInit, in rank order: a router's receiver_init_port.
func (a Addresses) KVInitPorts() []int { return portsOf(a.KVInit) }

// KVAllocPorts are the ports of KVAlloc, in rank order: a router's
// receiver_alloc_port.
func (a Addresses) KVAllocPorts() []int { return portsOf(a.KVAlloc) }

// BootstrapPort is the port of Bootstrap (0 when there is none): a router's
// bootstrap_port for this prefiller.
func (a Addresses) BootstrapPort() int {
	if a.Bootstrap == "" {
		return 0
	}
	return portsOf([]string{a.Bootstrap})[0]
}

func portsOf(addrs []string) []int {
	out := make([]int, len(addrs))
	for i, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		out[i], _ = strconv.Atoi(p)
	}
	return out
}

// Start starts a mock engine on its listeners and returns once they accept
// connections. Close stops it.
func Start(cfg Config) (*Server, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:    cfg,
		ctx:    ctx,
		cancel: cancel,
		client: &http.Client{Timeout: cfg.PullTimeout},
		rec:    recorder{limit: cfg.RecordLimit},
		faults: newFaultSet(cfg.Seed),
		sched:  newScheduler(cfg.MaxConcurrency),
		lat:    cfg.Latency,
	}
	if cfg.Perf != nil {
		if s.live, err = engine.NewLive(*cfg.Perf, cfg.PerfScale); err != nil {
			cancel()
			return nil, fmt.Errorf("mocks: %w", err)
		}
	}
	s.leases = &leaseTable{ttl: cfg.LeaseDuration, counters: &s.counters}
	s.kvbuf = &kvBuffer{ttl: cfg.KVBufferTTL}
	s.rooms = &roomTable{ttl: cfg.BootstrapTimeout, counters: &s.counters}
	if err := s.listenAll(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) listenAll() error {
	c := s.cfg
	var err error
	if s.addrs.Addr, err = s.listen(c.Addr, s.apiHandler()); err != nil {
		return err
	}
	s.addrs.URL = "http://" + s.addrs.Addr
	_, port, _ := net.SplitHostPort(s.addrs.Addr)
	if c.Name == "" {
		s.cfg.Name = fmt.Sprintf("%s-%s-%s", c.Kind, c.Role, port)
	}
	s.addrs.Name, s.addrs.Engine, s.addrs.Role = s.cfg.Name, c.Kind, c.Role
	switch {
	case c.Kind == VLLM:
		s.addrs.EngineID = c.EngineID
		if c.Role.prefills() {
			s.addrs.SideChannel, err = s.listen(c.SideChannelAddr, s.sideChannelHandler())
		}
	case c.Kind == LMCache:
		if c.Role.prefills() {
			s.notifier = newNotifier(s.ctx, c.ZMQConnect, c.NotifTag, c.TPSize, c.Logger)
		}
		if c.Role.decodes() {
			for rank := range c.TPSize {
				var a string
				if a, err = s.listen(c.KVInitAddrs[rank], s.kvInitHandler(rank)); err != nil {
					return err
				}
				s.addrs.KVInit = append(s.addrs.KVInit, a)
				if a, err = s.listen(c.KVAllocAddrs[rank], s.kvAllocHandler(rank)); err != nil {
					return err
				}
				s.addrs.KVAlloc = append(s.addrs.KVAlloc, a)
			}
		}
	case c.Kind == SGLang && c.Role == Prefill:
		s.addrs.Bootstrap, err = s.listen(c.BootstrapAddr, s.bootstrapHandler())
	}
	return err
}

// listen serves h on addr and returns the bound address.
func (s *Server) listen(addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("mocks: listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          s.cfg.Logger,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	s.servers = append(s.servers, srv)
	go srv.Serve(ln)
	return ln.Addr().String(), nil
}

// Addr is the OpenAI API's host:port.
func (s *Server) Addr() string { return s.addrs.Addr }

// URL is the OpenAI API's base URL, "http://host:port".
func (s *Server) URL() string { return s.addrs.URL }

// Addresses returns every listener of the Server.
func (s *Server) Addresses() Addresses {
	a := s.addrs
	a.KVInit = append([]string(nil), a.KVInit...)
	a.KVAlloc = append([]string(nil), a.KVAlloc...)
	return a
}

// Control returns a client of this Server's /mock/ API.
func (s *Server) Control() *Control { return NewControl(s.URL()) }

// Close stops the listeners, ends every request in flight (hung ones included) and
// waits for background work. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		for _, srv := range s.servers {
			srv.Close()
		}
		s.bgMu.Lock()
		s.closed = true
		s.bgMu.Unlock()
		s.wg.Wait()
		if s.notifier != nil {
			s.notifier.close()
		}
		if s.live != nil {
			s.live.Close()
		}
	})
	return nil
}

// background runs fn in a goroutine that Close waits for; after Close it does nothing.
func (s *Server) background(fn func()) {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
}

func (s *Server) latency() Latency {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	return s.lat
}

func (s *Server) setLatency(l Latency) {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	s.lat = l
}

// apiHandler is the engine's HTTP API plus /mock/.
func (s *Server) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleInference(epCompletions))
	mux.HandleFunc("POST /v1/chat/completions", s.handleInference(epChat))
	if s.cfg.Kind == SGLang {
		mux.HandleFunc("POST /generate", s.handleInference(epGenerate))
	}
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("GET /metrics", s.faultable("metrics", s.handleMetrics))
	mux.HandleFunc("GET /health", s.faultable("health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	mux.HandleFunc("GET /v1/models", s.faultable("models", s.handleModels))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	s.controlRoutes(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Mock-Name", s.cfg.Name)
		mux.ServeHTTP(w, r)
	})
}

// faultable counts a request of kind and applies the request faults listed for its
// path before calling h.
func (s *Server) faultable(kind string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.counters.inc("requests." + kind)
		if _, handled := s.applyFaults(w, r, nil, epCompletions, kind, false); handled {
			return
		}
		h(w, r)
	}
}

// applyFaults takes the request faults that match r and acts on the delay and on a
// status, hang or reset fault. handled means the request has been answered (or
// abandoned) and the caller must stop. A reset fault with after_tokens on a stream is
// left to the stream (plan.final stays set).
func (s *Server) applyFaults(w http.ResponseWriter, r *http.Request, e *RecordedRequest, ep endpoint, kind string, stream bool) (p plan, handled bool) {
	p = requestPlan(s.faults.take(r.URL.Path, kind, false))
	for _, t := range p.applied {
		s.counters.inc("fault." + t)
	}
	if e != nil && len(p.applied) > 0 {
		s.rec.update(e, func(e *RecordedRequest) { e.Faults = p.applied })
	}
	ctx := r.Context()
	if sleep(ctx, p.delay) != nil {
		s.abort(e, true)
		return p, true
	}
	f := p.final
	switch {
	case f == nil:
		return p, false
	case f.Type == FaultStatus:
		if f.Body != "" {
			ct := "text/plain; charset=utf-8"
			if json.Valid([]byte(f.Body)) {
				ct = "application/json"
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(f.Status)
			io.WriteString(w, f.Body)
		} else {
			s.writeError(w, ep, f.Status, "mock: injected fault")
		}
		s.finish(e, f.Status)
	case f.Type == FaultHang:
		<-ctx.Done()
		s.abort(e, true)
	case f.Type == FaultReset && stream && f.AfterTokens > 0:
		return p, false
	default: // reset
		s.abort(e, false)
		resetConn(w)
	}
	return p, true
}

// resetConn closes the client connection with a TCP RST.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // net/http drops the connection
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// abort records that the request ended without a complete response; clientGone
// counts it as a client abort (the other case is a reset fault).
func (s *Server) abort(e *RecordedRequest, clientGone bool) {
	if clientGone {
		s.counters.inc("client_aborts")
	}
	if e != nil {
		s.rec.update(e, func(e *RecordedRequest) { e.Aborted = true })
	}
}

func (s *Server) finish(e *RecordedRequest, status int) {
	if e != nil {
		s.rec.update(e, func(e *RecordedRequest) { e.Status = status })
	}
}

// noteKV counts a decode's KV outcome and records it.
func (s *Server) noteKV(e *RecordedRequest, rp *reply) {
	s.counters.inc("kv." + rp.kv)
	if rp.kvReason != "" {
		s.counters.inc("recompute." + rp.kvReason)
	}
	s.rec.update(e, func(e *RecordedRequest) { e.KV, e.KVReason = rp.kv, rp.kvReason })
}

// handleInference serves /v1/completions, /v1/chat/completions and /generate.
func (s *Server) handleInference(ep endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.sched.inFlight.Add(1)
		defer s.sched.inFlight.Add(-1)
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			s.writeError(w, ep, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
			return
		}
		req, perr := parseRequest(ep, body, s.cfg.MaxModelLen)
		if perr == nil && s.cfg.Kind != SGLang && req.streamOpts && !req.stream {
			// vLLM's protocol check, which catches a router that keeps stream_options
			// on a prefill it made non-streaming.
			perr = badRequest("Stream options can only be defined when `stream=True`.")
		}
		kind := kindDecode
		if req != nil {
			kind = s.classify(req)
		}
		e := s.rec.add(r, body, kind)
		s.counters.inc("requests." + kind)
		if perr != nil {
			s.answerError(w, e, ep, perr)
			return
		}
		p, handled := s.applyFaults(w, r, e, ep, kind, req.stream)
		if handled {
			if kind == kindPrefill && s.cfg.Kind == SGLang {
				s.rooms.fail(req.boot)
			}
			return
		}
		switch s.cfg.Kind {
		case VLLM:
			s.serveVLLM(w, r, e, req, kind, p)
		case LMCache:
			s.serveLMCache(w, r, e, req, kind, p)
		case SGLang:
			s.serveSGLang(w, r, e, req, kind, p)
		}
	}
}

// classify tells a prefill from a decode by the engine's own rule.
func (s *Server) classify(req *request) string {
	switch s.cfg.Kind {
	case VLLM:
		if p, ok := parseNixlParams(req.kv); ok && p.DoRemoteDecode {
			return kindPrefill
		}
	case LMCache:
		if p, ok := parseLMCacheParams(req.kv); ok && p.DisaggSpec != nil {
			return kindPrefill
		}
	case SGLang:
		if s.cfg.Role == Prefill {
			return kindPrefill
		}
	}
	return kindDecode
}

func (s *Server) answerError(w http.ResponseWriter, e *RecordedRequest, ep endpoint, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	s.writeError(w, ep, ae.status, ae.msg)
	s.finish(e, ae.status)
}

// newReply starts the answer to req: its id (from X-Request-Id when given, as vLLM
// does) and its deterministic generations.
func (s *Server) newReply(r *http.Request, req *request, p plan) *reply {
	base := r.Header.Get("X-Request-Id")
	if base == "" || s.cfg.Kind == SGLang {
		base = randomHex(16)
	}
	var id string
	switch {
	case s.cfg.Kind == SGLang:
		id = base
	case req.ep == epChat:
		id = "chatcmpl-" + base
	default:
		id = "cmpl-" + base
	}
	rp := &reply{id: id, model: req.model, created: time.Now().Unix()}
	if rp.model == "" {
		rp.model = s.cfg.Model
	}
	if f := p.final; f != nil && f.Type == FaultReset {
		rp.resetAfter = f.AfterTokens
	}
	for _, prompt := range req.prompts {
		rp.gens = append(rp.gens, generate(prompt, req.lim))
	}
	return rp
}

// checkPrefillContract counts what a prefill request got wrong: it must not stream
// and must ask for exactly one token.
func (s *Server) checkPrefillContract(req *request) {
	if req.stream {
		s.counters.inc("violation.stream")
	}
	if req.lim.max != 1 {
		s.counters.inc("violation.max_tokens")
	}
	if !s.cfg.Role.prefills() {
		s.counters.inc("misrouted")
	}
}

// serve runs req through the engine and answers it: stream headers (unless
// streamStarted), a scheduler slot, the prompt's compute time (constant when its KV
// was transferred), afterPrefill (may set the reply's kv_transfer_params; an error
// fails the request), then the tokens at the per-token pace. It returns a non-nil
// error when the request did not complete.
func (s *Server) serve(ctx context.Context, w http.ResponseWriter, e *RecordedRequest, req *request, rp *reply, transferred, streamStarted bool, afterPrefill func() error) error {
	lat := s.latency()
	ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
	if req.stream && !streamStarted {
		s.startStream(w, rp)
	}
	// next waits for the next generated token after the first: the per-token pace,
	// or the performance model's next step.
	next := func() error { return sleep(ctx, lat.scaled(lat.PerOutputToken)) }
	if s.live != nil {
		wait, release, err := s.perfSubmit(ctx, req, rp, transferred)
		if err != nil {
			s.abort(e, true)
			return err
		}
		defer release()
		next = wait
	} else {
		blocks := int64((req.promptTokens() + s.cfg.BlockSize - 1) / s.cfg.BlockSize)
		release, err := s.sched.acquire(ctx, blocks)
		if err != nil {
			s.abort(e, true)
			return err
		}
		defer release()
		compute := lat.scaled(time.Duration(req.promptTokens()) * lat.PrefillPerToken)
		if transferred {
			compute = lat.scaled(lat.TransferredPrefill)
		}
		if err := sleep(ctx, compute); err != nil || ctx.Err() != nil {
			s.abort(e, true)
			return ctx.Err()
		}
	}
	s.sched.promptTokens.Add(int64(req.promptTokens()))
	if afterPrefill != nil {
		if err := afterPrefill(); err != nil {
			s.failRequest(w, e, req, err, true)
			return err
		}
	}
	if !req.stream {
		longest := 0
		for _, g := range rp.gens {
			longest = max(longest, len(g.ids))
		}
		wait := func() error { return sleep(ctx, time.Duration(max(longest-1, 0))*lat.scaled(lat.PerOutputToken)) }
		if s.live != nil {
			wait = func() error {
				for range max(longest-1, 0) {
					if err := next(); err != nil {
						return err
					}
				}
				return nil
			}
		}
		if err := wait(); err != nil {
			s.abort(e, true)
			return err
		}
		s.countGenerated(rp)
		s.setKVHeaders(w, rp)
		writeJSON(w, http.StatusOK, s.body(req, rp))
		s.finish(e, http.StatusOK)
		return nil
	}
	for k := -1; ; k++ {
		evs := rp.chunks(req, k)
		if k >= 0 && len(evs) == 0 {
			break
		}
		if rp.resetAfter > 0 && k == rp.resetAfter {
			s.abort(e, false)
			resetConn(w)
			return errors.New("reset")
		}
		if k > 0 {
			if err := next(); err != nil {
				s.abort(e, true)
				return err
			}
		}
		for _, v := range evs {
			ev.data(v)
		}
		if ev.err != nil {
			s.abort(e, true)
			return ev.err
		}
	}
	if req.includeUsage && req.ep != epGenerate {
		ev.data(rp.usageChunk(req))
	}
	ev.done()
	s.countGenerated(rp)
	s.finish(e, http.StatusOK)
	return nil
}

func (s *Server) countGenerated(rp *reply) {
	for _, g := range rp.gens {
		s.sched.generationTokens.Add(int64(len(g.ids)))
	}
}

func (s *Server) setKVHeaders(w http.ResponseWriter, rp *reply) {
	if rp.kv != "" {
		w.Header().Set("X-Mock-Kv", rp.kv)
	}
	if rp.kvReason != "" {
		w.Header().Set("X-Mock-Kv-Reason", rp.kvReason)
	}
}

// startStream sends a stream's response headers.
func (s *Server) startStream(w http.ResponseWriter, rp *reply) {
	s.setKVHeaders(w, rp)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).Flush()
}

// failRequest answers err: an error event when the stream has started, else the
// engine's error JSON.
func (s *Server) failRequest(w http.ResponseWriter, e *RecordedRequest, req *request, err error, streamStarted bool) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if req.stream && streamStarted {
		ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
		ev.data(s.errorBody(req.ep, ae.status, ae.msg, true))
		ev.done()
		s.finish(e, http.StatusOK)
		return
	}
	s.answerError(w, e, req.ep, ae)
}

// eventWriter writes server-sent events and flushes each; it keeps the first error.
type eventWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func (ev *eventWriter) write(b []byte) {
	if ev.err != nil {
		return
	}
	if _, ev.err = ev.w.Write(b); ev.err == nil {
		ev.err = ev.rc.Flush()
	}
}

func (ev *eventWriter) data(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		ev.err = err
		return
	}
	ev.write([]byte("data: " + string(b) + "\n\n"))
}

func (ev *eventWriter) done() { ev.write([]byte("data: [DONE]\n\n")) }

// handleTokenize serves POST /tokenize like vLLM.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		s.writeError(w, epCompletions, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
		return
	}
	e := s.rec.add(r, body, kindTokenize)
	s.counters.inc("requests." + kindTokenize)
	if _, handled := s.applyFaults(w, r, e, epCompletions, kindTokenize, false); handled {
		return
	}
	ids, err := parseTokenize(body)
	if err != nil {
		s.answerError(w, e, epCompletions, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
		TokenStrs   any   `json:"token_strs"`
	}{len(ids), s.cfg.MaxModelLen, ids, nil})
	s.finish(e, http.StatusOK)
}

// handleModels serves GET /v1/models.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	owner := "vllm"
	if s.cfg.Kind == SGLang {
		owner = "sglang"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.cfg.Model, "object": "model", "created": time.Now().Unix(),
			"owned_by": owner, "root": s.cfg.Model, "max_model_len": s.cfg.MaxModelLen,
		}},
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newUUID() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// hostPort joins a host and a port, bracketing IPv6 hosts.
func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
