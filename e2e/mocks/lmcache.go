package mocks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// disaggSpec is LMCache's kv_transfer_params.disagg_spec, chosen by the router.
type disaggSpec struct {
	ReqID             string `json:"req_id"`
	ReceiverHost      string `json:"receiver_host"`
	ReceiverInitPort  []int  `json:"receiver_init_port"`
	ReceiverAllocPort []int  `json:"receiver_alloc_port"`
}

type lmcacheParams struct {
	RetFirstTok bool        `json:"ret_first_tok"`
	DisaggSpec  *disaggSpec `json:"disagg_spec"`
}

func parseLMCacheParams(raw json.RawMessage) (p lmcacheParams, ok bool) {
	if raw == nil {
		return p, false
	}
	return p, json.Unmarshal(raw, &p) == nil
}

// serveLMCache serves a request at a vLLM + LMCache (NIXL push) engine.
func (s *Server) serveLMCache(w http.ResponseWriter, r *http.Request, e *RecordedRequest, req *request, kind string, p plan) {
	ctx := r.Context()
	rp := s.newReply(r, req, p)
	if kind == kindDecode {
		rp.kv, rp.kvReason = KVRecomputed, s.takePushedKV(req)
		if rp.kvReason == "" {
			rp.kv = KVTransferred
		}
		s.noteKV(e, rp)
		s.serve(ctx, w, e, req, rp, rp.kv == KVTransferred, false, nil)
		return
	}
	s.checkPrefillContract(req)
	params, _ := parseLMCacheParams(req.kv)
	spec := params.DisaggSpec
	switch {
	case len(req.prompts) != 1:
		s.answerError(w, e, req.ep, badRequest("kv_transfer_params: batched prompts are not supported"))
		return
	case spec.ReqID == "" || spec.ReceiverHost == "":
		s.answerError(w, e, req.ep, badRequest("kv_transfer_params.disagg_spec: req_id and receiver_host are required"))
		return
	}
	// Notify faults are taken now, in request order, so "next N" means the next N
	// prefills even though notifications go out in the background.
	np := notifyPlanOf(s.faults.take(r.URL.Path, kindPrefill, true))
	for _, t := range np.applied {
		s.counters.inc("fault." + t)
	}
	if len(np.applied) > 0 {
		s.rec.update(e, func(e *RecordedRequest) { e.Faults = append(e.Faults, np.applied...) })
	}
	s.serve(ctx, w, e, req, rp, false, false, func() error {
		pushed := s.pushKV(*spec, req.prompts[0])
		s.background(func() { s.notifyRouter(spec.ReqID, pushed, np) })
		if params.RetFirstTok && !p.missingParams {
			rp.kvParams, _ = json.Marshal(map[string]int{"first_tok": rp.gens[0].first})
		}
		return nil
	})
}

// kvPush is the mock's stand-in for LMCache's NIXL write: one rank's copy of the
// prompt's KV, identified by its token ids.
type kvPush struct {
	ReqID  string `json:"req_id"`
	Rank   int    `json:"rank"`
	Tokens []int  `json:"tokens"`
}

// pushKV sends the prompt's KV to every prefiller TP rank's receiver, in parallel:
// first the handshake on receiver_init_port[rank], then the data on
// receiver_alloc_port[rank]. pushed[rank] reports success.
func (s *Server) pushKV(spec disaggSpec, tokens []int) (pushed []bool) {
	pushed = make([]bool, s.cfg.TPSize)
	var wg sync.WaitGroup
	for rank := range pushed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.pushRank(spec, rank, tokens)
			if err != nil {
				s.cfg.Logger.Printf("lmcache push req_id=%s rank=%d: %v", spec.ReqID, rank, err)
				s.counters.inc("kv_push.failed")
				return
			}
			s.counters.inc("kv_push.sent")
			pushed[rank] = true
		}()
	}
	wg.Wait()
	return pushed
}

func (s *Server) pushRank(spec disaggSpec, rank int, tokens []int) error {
	if rank >= len(spec.ReceiverInitPort) || rank >= len(spec.ReceiverAllocPort) {
		return fmt.Errorf("no receiver port for rank %d", rank)
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PullTimeout)
	defer cancel()
	var hello struct {
		Rank int `json:"rank"`
	}
	initURL := "http://" + hostPort(spec.ReceiverHost, spec.ReceiverInitPort[rank]) + "/lmcache/init"
	if err := s.call(ctx, http.MethodPost, initURL, map[string]int{"rank": rank}, &hello); err != nil {
		return err
	}
	if hello.Rank != rank {
		return fmt.Errorf("init port %d belongs to rank %d", spec.ReceiverInitPort[rank], hello.Rank)
	}
	allocURL := "http://" + hostPort(spec.ReceiverHost, spec.ReceiverAllocPort[rank]) + "/lmcache/kv"
	return s.call(ctx, http.MethodPut, allocURL, kvPush{ReqID: spec.ReqID, Rank: rank, Tokens: tokens}, nil)
}

// call sends in as JSON and decodes a 200 answer into out (when not nil).
func (s *Server) call(ctx context.Context, method, url string, in, out any) error {
	body, _ := json.Marshal(in)
	hr, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(out)
}

// notifyRouter sends one ProxyNotif per prefiller rank whose push succeeded, as
// LMCache's PD backend does after the last chunk's write, applying notify faults.
func (s *Server) notifyRouter(reqID string, pushed []bool, np notifyPlan) {
	if sleep(s.ctx, np.delay) != nil {
		return
	}
	for rank, ok := range pushed {
		if !ok {
			continue
		}
		if np.drop(rank) {
			s.counters.inc("notify.dropped")
			continue
		}
		times := 1
		if np.duplicate {
			times = 2
		}
		for range times {
			if err := s.notifier.send(rank, reqID); err != nil {
				s.cfg.Logger.Printf("lmcache notify req_id=%s rank=%d: %v", reqID, rank, err)
				s.counters.inc("notify.failed")
				continue
			}
			s.counters.inc("notify.sent")
		}
	}
}

// takePushedKV looks up the KV pushed for the decode prompt minus its last token (the
// prefill's first_tok) and consumes it. It returns "" when every decoder rank got it,
// else why the decoder recomputes.
func (s *Server) takePushedKV(req *request) (reason string) {
	if len(req.prompts) != 1 || len(req.prompts[0]) < 2 {
		return "no_kv"
	}
	prompt := req.prompts[0]
	return s.kvbuf.take(promptHash(prompt[:len(prompt)-1]), s.cfg.TPSize)
}

// kvInitHandler serves rank's receiver_init_port: the handshake answers the rank, so
// a router that mixes up the port lists is caught.
func (s *Server) kvInitHandler(rank int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /lmcache/init", func(w http.ResponseWriter, r *http.Request) {
		s.counters.inc("requests.kv_init")
		writeJSON(w, http.StatusOK, map[string]int{"rank": rank})
	})
	return mux
}

// kvAllocHandler serves rank's receiver_alloc_port, which receives the pushed KV.
func (s *Server) kvAllocHandler(rank int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /lmcache/kv", func(w http.ResponseWriter, r *http.Request) {
		s.counters.inc("requests.kv_push")
		var p kvPush
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&p); err != nil || len(p.Tokens) == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad KV push"})
			return
		}
		if p.Rank != rank {
			writeJSON(w, http.StatusConflict, map[string]string{"error": fmt.Sprintf("this is rank %d's alloc port, got rank %d", rank, p.Rank)})
			return
		}
		s.kvbuf.put(promptHash(p.Tokens), rank)
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	return mux
}

// kvBuffer is an LMCache decoder's received KV, by prompt hash, until a decode uses
// it or it expires.
type kvBuffer struct {
	mu  sync.Mutex
	m   map[uint64]*pushedKV
	ttl time.Duration
}

type pushedKV struct {
	ranks   map[int]bool
	expires time.Time
}

func (b *kvBuffer) put(hash uint64, rank int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.purgeLocked(time.Now())
	if b.m == nil {
		b.m = map[uint64]*pushedKV{}
	}
	k := b.m[hash]
	if k == nil {
		k = &pushedKV{ranks: map[int]bool{}}
		b.m[hash] = k
	}
	k.ranks[rank] = true
	k.expires = time.Now().Add(b.ttl)
}

// take consumes the KV of hash if all ranks arrived: "" then, else "no_kv" or
// "partial_kv" (some ranks missing; the entry stays until it expires).
func (b *kvBuffer) take(hash uint64, ranks int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.purgeLocked(time.Now())
	k := b.m[hash]
	if k == nil {
		return "no_kv"
	}
	for r := range ranks {
		if !k.ranks[r] {
			return "partial_kv"
		}
	}
	delete(b.m, hash)
	return ""
}

func (b *kvBuffer) purgeLocked(now time.Time) {
	for h, k := range b.m {
		if now.After(k.expires) {
			delete(b.m, h)
		}
	}
}

func (b *kvBuffer) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.purgeLocked(time.Now())
	return len(b.m)
}

func (b *kvBuffer) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m = nil
}
