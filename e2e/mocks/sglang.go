package mocks

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// serveSGLang serves a request at an SGLang engine. A prefill-mode engine computes the
// prompt and publishes each item's bootstrap room; a decode-mode engine waits for the
// rooms on the prefiller's bootstrap server; a plain engine (role both) ignores the
// bootstrap fields.
func (s *Server) serveSGLang(w http.ResponseWriter, r *http.Request, e *RecordedRequest, req *request, kind string, p plan) {
	ctx := r.Context()
	if s.cfg.Role == Both {
		rp := s.newReply(r, req, p)
		rp.kv, rp.kvReason = KVRecomputed, "no_params"
		s.noteKV(e, rp)
		s.serve(ctx, w, e, req, rp, false, false, nil)
		return
	}
	if req.boot == nil || !req.boot.roomSet || slicesHasEmpty(req.boot.hosts) {
		s.answerError(w, e, req.ep, badRequest("bootstrap_host and bootstrap_room are required by an engine in disaggregation mode %s", s.cfg.Role))
		return
	}
	if kind == kindPrefill {
		// A PD prefill computes the prompt and samples only the first token.
		req.lim.max = 1
		rp := s.newReply(r, req, p)
		err := s.serve(ctx, w, e, req, rp, false, false, func() error {
			if !p.missingParams { // the fault leaves the rooms unpublished: a silent failure
				for i, room := range req.boot.rooms {
					s.rooms.publish(room, promptHash(req.prompts[i]))
				}
			}
			return nil
		})
		if err != nil {
			s.rooms.fail(req.boot)
		}
		return
	}
	rp := s.newReply(r, req, p)
	if req.stream {
		s.startStream(w, rp) // the engine answers 200 at once; failures come as events
	}
	if err := s.waitRooms(ctx, req); err != nil {
		if ctx.Err() != nil {
			s.abort(e, true)
			return
		}
		s.failRequest(w, e, req, err, true)
		return
	}
	rp.kv = KVTransferred
	s.noteKV(e, rp)
	s.serve(ctx, w, e, req, rp, true, true, nil)
}

func slicesHasEmpty(ss []string) bool {
	for _, s := range ss {
		if s == "" {
			return true
		}
	}
	return false
}

// waitRooms waits, concurrently per batch item, until each item's room is ready on
// its prefiller's bootstrap server and claims it. It fails like the engine's decode
// (500, naming the room) when a room failed, holds another prompt's KV, or does not
// appear within BootstrapTimeout.
func (s *Server) waitRooms(ctx context.Context, req *request) error {
	s.sched.transferring.Add(1)
	defer s.sched.transferring.Add(-1)
	errs := make([]error, len(req.boot.rooms))
	var wg sync.WaitGroup
	for i := range req.boot.rooms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.claimRoom(ctx, req, i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// roomClaim is the bootstrap server's answer to a claim.
type roomClaim struct {
	Room       uint64 `json:"room"`
	State      string `json:"state"`
	PromptHash string `json:"prompt_hash,omitempty"`
}

func (s *Server) claimRoom(ctx context.Context, req *request, item int) error {
	room := req.boot.rooms[item]
	port := req.boot.ports[item]
	if port == 0 {
		port = s.cfg.DefaultBootstrapPort
	}
	addr := hostPort(req.boot.hosts[item], port)
	fail := func(why string) error {
		return &apiError{status: http.StatusInternalServerError, msg: fmt.Sprintf(
			"Decode transfer failed for request rid=%s bootstrap_room=%d with exception KVTransferError: %s", req.rid, room, why)}
	}
	deadline := time.Now().Add(s.cfg.BootstrapTimeout)
	for {
		wait := min(time.Until(deadline), 2*time.Second)
		if wait <= 0 {
			s.counters.inc("rooms.timeout")
			return fail(fmt.Sprintf("bootstrap room not ready at %s after %s", addr, s.cfg.BootstrapTimeout))
		}
		var rc roomClaim
		url := fmt.Sprintf("http://%s/bootstrap/rooms/%d/claim?wait_ms=%d", addr, room, wait.Milliseconds())
		cctx, cancel := context.WithTimeout(ctx, wait+s.cfg.PullTimeout)
		err := s.call(cctx, http.MethodPost, url, struct{}{}, &rc)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil: // not ready, or no bootstrap server (yet): poll again
			if sleep(ctx, min(50*time.Millisecond, time.Until(deadline))) != nil {
				return ctx.Err()
			}
		case rc.State == roomFailed:
			return fail("the prefill of this room failed")
		case rc.PromptHash != hashString(promptHash(req.prompts[item])):
			return fail("the room's KV belongs to another prompt")
		default:
			return nil
		}
	}
}

// Room states on a prefiller's bootstrap server.
const (
	roomPending = "pending"
	roomReady   = "ready"
	roomFailed  = "failed"
)

type room struct {
	state   string
	hash    uint64
	claimed bool // a decoder took the KV; a repeated claim answers ready again
	expires time.Time
	changed chan struct{} // closed and replaced when state changes
	waiters int
}

// roomTable is an SGLang prefiller's rooms. A decoder's claim of a ready room takes it
// (the prefiller then frees the KV: it no longer counts as held); failed rooms answer
// failed until they expire.
//
// A claim is idempotent: the taken room stays, claimed, for claimedTTL and a repeated
// claim answers ready again. The claim is a long poll, and a decoder whose answer was
// lost (its client timeout fired while the server took the room: a stalled machine)
// asks again; were the room gone, it would wait for a room that can never come until
// BootstrapTimeout (300 s), while the router already saw the prefill succeed.
type roomTable struct {
	mu        sync.Mutex
	m         map[uint64]*room
	ttl       time.Duration
	counters  *counters
	lastPurge time.Time
}

// claimedTTL is how long a claimed room answers a repeated claim: far longer than
// any stall between a lost claim answer and the decoder's next poll.
const claimedTTL = time.Minute

// purgeEvery spaces the scans for expired rooms (each is O(rooms)).
const purgeEvery = time.Second

// getLocked returns the room, creating it pending.
func (t *roomTable) getLocked(id uint64) *room {
	if now := time.Now(); now.Sub(t.lastPurge) >= purgeEvery {
		t.purgeLocked(now)
	}
	if t.m == nil {
		t.m = map[uint64]*room{}
	}
	r := t.m[id]
	if r == nil {
		r = &room{state: roomPending, changed: make(chan struct{}), expires: time.Now().Add(t.ttl)}
		t.m[id] = r
	}
	return r
}

func (t *roomTable) setLocked(r *room, state string) {
	r.state = state
	r.expires = time.Now().Add(t.ttl)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (t *roomTable) publish(id uint64, hash uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.getLocked(id)
	r.hash = hash
	t.setLocked(r, roomReady)
}

// fail marks the rooms of a failed prefill, so waiting decoders fail at once.
func (t *roomTable) fail(b *bootstrap) {
	if b == nil || !b.roomSet {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range b.rooms {
		t.setLocked(t.getLocked(id), roomFailed)
		t.counters.inc("rooms.failed")
	}
}

// claim waits up to wait for room id to leave the pending state and returns its
// state; a ready room is taken.
func (t *roomTable) claim(ctx context.Context, id uint64, wait time.Duration) (string, uint64) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.getLocked(id)
	r.waiters++
	defer func() { r.waiters-- }()
	for r.state == roomPending {
		ch := r.changed
		t.mu.Unlock()
		gaveUp := false
		select {
		case <-ch:
		case <-timer.C:
			gaveUp = true
		case <-ctx.Done():
			gaveUp = true
		}
		t.mu.Lock()
		if gaveUp && r.state == roomPending {
			if r.waiters == 1 && t.m[id] == r {
				delete(t.m, id) // nobody published it; don't keep the pending entry
			}
			return roomPending, 0
		}
	}
	if ctx.Err() != nil {
		// The claimer is gone: leave the room as it is for its next claim.
		return roomPending, 0
	}
	if r.state == roomReady && !r.claimed {
		r.claimed = true
		r.expires = time.Now().Add(min(t.ttl, claimedTTL))
	}
	return r.state, r.hash
}

func (t *roomTable) purgeLocked(now time.Time) {
	t.lastPurge = now
	for id, r := range t.m {
		if r.waiters == 0 && now.After(r.expires) {
			delete(t.m, id)
		}
	}
}

// held is the number of ready rooms not yet claimed.
func (t *roomTable) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.purgeLocked(time.Now())
	n := 0
	for _, r := range t.m {
		if r.state == roomReady && !r.claimed {
			n++
		}
	}
	return n
}

func (t *roomTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.m {
		if r.waiters > 0 { // wake waiters; they see the room gone and report pending
			t.setLocked(r, roomPending)
		}
	}
	t.m = nil
}

// maxClaimWait caps one long-poll on the bootstrap server.
const maxClaimWait = 10 * time.Second

// bootstrapHandler serves the prefiller's bootstrap server: GET /health answers OK
// like SGLang's; POST /bootstrap/rooms/{room}/claim?wait_ms=N is the mock's long-poll
// in place of the engine's /route registration and KV transfer.
func (s *Server) bootstrapHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("OK"))
	})
	mux.HandleFunc("POST /bootstrap/rooms/{room}/claim", func(w http.ResponseWriter, r *http.Request) {
		s.counters.inc("requests.room_claim")
		id, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "room must be an unsigned integer"})
			return
		}
		ms, _ := strconv.Atoi(r.URL.Query().Get("wait_ms"))
		wait := min(time.Duration(max(ms, 0))*time.Millisecond, maxClaimWait)
		state, hash := s.rooms.claim(r.Context(), id, wait)
		rc := roomClaim{Room: id, State: state}
		status := http.StatusOK
		switch state {
		case roomReady:
			rc.PromptHash = hashString(hash)
		case roomPending:
			status = http.StatusNotFound
		}
		writeJSON(w, status, rc)
	})
	return mux
}
