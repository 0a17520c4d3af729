package mocks

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request kinds, as recorded and counted.
const (
	kindPrefill  = "prefill"
	kindDecode   = "decode"
	kindTokenize = "tokenize"
)

// KV outcomes of a decode, in the x-mock-kv response header and the record.
const (
	// KVTransferred means the decode used KV computed by a prefiller.
	KVTransferred = "transferred"
	// KVRecomputed means the decode computed the prompt itself.
	KVRecomputed = "recomputed"
)

// maxRecordedBody bounds the body kept per recorded request (1 MiB): enough for
// every scenario prompt, small enough that a full ring stays bounded.
const maxRecordedBody = 1 << 20

// RecordedRequest is one request a mock received, as GET /mock/requests returns it.
type RecordedRequest struct {
	// Seq numbers requests in arrival order, from 1; it keeps counting across resets.
	Seq uint64 `json:"seq"`
	// Time is the arrival time.
	Time time.Time `json:"time"`
	// Method, Path and Header are the request line's method and path (no query) and
	// the request headers.
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"headers"`
	// Body is the request body, cut at 1 MiB (BodyTruncated then says so).
	Body          string `json:"body"`
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	// Kind is prefill, decode or tokenize.
	Kind string `json:"kind"`
	// Status is the response status; 0 while in flight or when no response was sent
	// (Aborted: the client went away, or a hang or reset fault).
	Status  int  `json:"status"`
	Aborted bool `json:"aborted,omitempty"`
	// KV is the decode's KV outcome (transferred or recomputed) and KVReason why it
	// recomputed: no_params, invalid_params, pull_failed, expired, mismatch, no_kv.
	KV       string `json:"kv,omitempty"`
	KVReason string `json:"kv_reason,omitempty"`
	// Faults are the injected fault types applied to this request.
	Faults []string `json:"faults,omitempty"`
}

// JSON decodes the recorded body as a JSON object.
func (r RecordedRequest) JSON() (map[string]any, error) {
	var m map[string]any
	err := json.Unmarshal([]byte(r.Body), &m)
	return m, err
}

// recorder is the bounded ring of recent requests.
type recorder struct {
	mu    sync.Mutex
	limit int
	seq   uint64
	ring  []*RecordedRequest
}

func (rc *recorder) add(r *http.Request, body []byte, kind string) *RecordedRequest {
	e := &RecordedRequest{
		Time:   time.Now(),
		Method: r.Method,
		Path:   r.URL.Path,
		Header: r.Header.Clone(),
		Kind:   kind,
	}
	if len(body) > maxRecordedBody {
		body, e.BodyTruncated = body[:maxRecordedBody], true
	}
	e.Body = string(body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.seq++
	e.Seq = rc.seq
	if len(rc.ring) == rc.limit {
		copy(rc.ring, rc.ring[1:])
		rc.ring = rc.ring[:rc.limit-1]
	}
	rc.ring = append(rc.ring, e)
	return e
}

// update changes a recorded entry under the ring's lock.
func (rc *recorder) update(e *RecordedRequest, fn func(*RecordedRequest)) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	fn(e)
}

// list returns copies of the entries with Seq > since whose path and kind match
// (empty matches all), oldest first.
func (rc *recorder) list(since uint64, path, kind string) []RecordedRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := []RecordedRequest{}
	for _, e := range rc.ring {
		if e.Seq > since && (path == "" || e.Path == path) && (kind == "" || e.Kind == kind) {
			c := *e
			c.Header = e.Header.Clone()
			c.Faults = append([]string(nil), e.Faults...)
			out = append(out, c)
		}
	}
	return out
}

func (rc *recorder) clear() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.ring = rc.ring[:0]
}

// counters are named event counts, grouped by the prefix before the first dot.
type counters struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counters) add(name string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[name] += n
}

func (c *counters) inc(name string) { c.add(name, 1) }

func (c *counters) get(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

// group returns the counts named "<prefix>.<key>" as key → count.
func (c *counters) group(prefix string) map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for name, n := range c.m {
		if k, ok := strings.CutPrefix(name, prefix+"."); ok {
			out[k] = n
		}
	}
	return out
}

func (c *counters) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

// Stats is GET /mock/stats: event counters since the last reset and live gauges.
type Stats struct {
	// Name, Engine and Role identify the mock (Config.Name, Kind, Role).
	Name   string `json:"name"`
	Engine Kind   `json:"engine"`
	Role   Role   `json:"role"`
	// Requests counts requests by kind: prefill, decode, tokenize, metrics, health,
	// models, and engine-to-engine ones (nixl_pull, nixl_release, kv_init, kv_push,
	// room_claim).
	Requests map[string]int64 `json:"requests"`
	// Transferred and Recomputed count decodes by KV outcome; RecomputeReasons splits
	// Recomputed by reason.
	Transferred      int64            `json:"transferred"`
	Recomputed       int64            `json:"recomputed"`
	RecomputeReasons map[string]int64 `json:"recompute_reasons"`
	// InFlight is inference requests whose handler is running (including hung and
	// queued ones); Running and Waiting are the engine's queue (the metrics gauges).
	InFlight int64 `json:"in_flight"`
	Running  int64 `json:"running"`
	Waiting  int64 `json:"waiting"`
	// ClientAborts counts inference requests whose client went away before the
	// response was complete (hung requests included; reset faults are not).
	ClientAborts int64 `json:"client_aborts"`
	// Faults counts applied faults by type.
	Faults map[string]int64 `json:"faults"`
	// Misrouted counts prefill requests at a decode-only engine and decode requests
	// (with transfer params) at a prefill-only one. Such requests are still served.
	Misrouted int64 `json:"misrouted"`
	// PrefillViolations counts prefill requests that broke the prefill contract, by
	// rule: stream (stream was not false), max_tokens (effective max tokens not 1).
	PrefillViolations map[string]int64 `json:"prefill_violations"`
	// LeasesHeld is the vLLM prefiller's block leases not yet pulled nor expired;
	// LeasesReleased and LeasesExpired count how leases ended.
	LeasesHeld     int   `json:"leases_held"`
	LeasesReleased int64 `json:"leases_released"`
	LeasesExpired  int64 `json:"leases_expired"`
	// KVPushesSent and KVPushFailures count an LMCache prefiller's per-rank pushes;
	// KVBuffersHeld is the pushed prompts an LMCache decoder holds for a decode.
	KVPushesSent   int64 `json:"kv_pushes_sent"`
	KVPushFailures int64 `json:"kv_push_failures"`
	KVBuffersHeld  int   `json:"kv_buffers_held"`
	// Notifications counts an LMCache prefiller's ZeroMQ notifications by outcome:
	// sent, dropped (fault), failed (no router).
	Notifications map[string]int64 `json:"notifications"`
	// RoomsHeld is an SGLang prefiller's published rooms not yet claimed nor expired;
	// RoomsFailed counts rooms marked failed; RoomTimeouts counts decodes that gave up
	// waiting for a room.
	RoomsHeld    int   `json:"rooms_held"`
	RoomsFailed  int64 `json:"rooms_failed"`
	RoomTimeouts int64 `json:"room_timeouts"`
}

func (s *Server) stats() Stats {
	c := &s.counters
	return Stats{
		Name:              s.cfg.Name,
		Engine:            s.cfg.Kind,
		Role:              s.cfg.Role,
		Requests:          c.group("requests"),
		Transferred:       c.get("kv." + KVTransferred),
		Recomputed:        c.get("kv." + KVRecomputed),
		RecomputeReasons:  c.group("recompute"),
		InFlight:          s.sched.inFlight.Load(),
		Running:           s.sched.running.Load(),
		Waiting:           s.sched.waiting.Load(),
		ClientAborts:      c.get("client_aborts"),
		Faults:            c.group("fault"),
		Misrouted:         c.get("misrouted"),
		PrefillViolations: c.group("violation"),
		LeasesHeld:        s.leases.held(),
		LeasesReleased:    c.get("leases.released"),
		LeasesExpired:     c.get("leases.expired"),
		KVPushesSent:      c.get("kv_push.sent"),
		KVPushFailures:    c.get("kv_push.failed"),
		KVBuffersHeld:     s.kvbuf.held(),
		Notifications:     c.group("notify"),
		RoomsHeld:         s.rooms.held(),
		RoomsFailed:       c.get("rooms.failed"),
		RoomTimeouts:      c.get("rooms.timeout"),
	}
}

// controlRoutes registers the /mock/ API on mux.
func (s *Server) controlRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /mock/requests", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		since, _ := strconv.ParseUint(q.Get("since"), 10, 64)
		writeJSON(w, http.StatusOK, s.rec.list(since, q.Get("path"), q.Get("kind")))
	})
	mux.HandleFunc("POST /mock/reset", func(w http.ResponseWriter, r *http.Request) {
		s.reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /mock/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.stats())
	})
	mux.HandleFunc("GET /mock/faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, faultsBody{Faults: s.faults.snapshot()})
	})
	mux.HandleFunc("POST /mock/faults", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var list []Fault
		if err == nil {
			list, err = parseFaults(body)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		s.faults.set(list)
		writeJSON(w, http.StatusOK, faultsBody{Faults: s.faults.snapshot()})
	})
	mux.HandleFunc("GET /mock/latency", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.latency())
	})
	mux.HandleFunc("POST /mock/latency", func(w http.ResponseWriter, r *http.Request) {
		l := s.latency()
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if err == nil {
			err = json.Unmarshal(body, &l)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "latency: " + err.Error()})
			return
		}
		s.setLatency(l)
		writeJSON(w, http.StatusOK, l)
	})
}

// reset clears records, faults, counters and held KV state, and restores the
// configured latency. Requests in flight carry on.
func (s *Server) reset() {
	s.rec.clear()
	s.faults.set(nil)
	s.counters.clear()
	s.leases.clear()
	s.kvbuf.clear()
	s.rooms.clear()
	s.setLatency(s.cfg.Latency)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"mock: cannot encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
