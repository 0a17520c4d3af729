package kvbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Limits of the HTTP API. Requests beyond them are answered 400 (413 for the
// body size) with a JSON error naming the field.
const (
	// MaxWaitMillis is the longest wait_ms: a minute keeps a long-poll under
	// common proxy idle timeouts; the filter re-polls if it wants longer.
	MaxWaitMillis = 60_000
	// MaxCount is the largest count: one notification per TP rank, and no
	// deployment runs tensor parallelism this wide.
	MaxCount = 1024
	// MaxWaitIDs is the most ids in one POST /v1/kv/wait: far above the
	// requests one Envoy worker has waiting for KV at the same moment.
	MaxWaitIDs = 4096
	// MaxWaitBodyBytes bounds the POST /v1/kv/wait body: MaxWaitIDs ids of
	// MaxReqIDBytes each fit.
	MaxWaitBodyBytes = 1 << 20
)

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/kv/{req_id}", s.handleGet)
	mux.HandleFunc("POST /v1/kv/wait", s.handleWait)
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	for pattern, h := range s.cfg.Handlers {
		mux.Handle(pattern, h)
	}
	return mux
}

// notReady is the 404 body of GET /v1/kv/{req_id}.
type notReady struct {
	ReqID string `json:"req_id"`
	Count uint32 `json:"count"`
	Ready bool   `json:"ready"`
}

// waitRequest is the body of POST /v1/kv/wait. Count is a pointer because an
// absent count means 1 while an explicit 0 is an error.
type waitRequest struct {
	WaitMS int64 `json:"wait_ms"`
	// Slice marks one slice of a longer wait: the caller (the filter polls
	// in 2 s slices) polls again when it ends with ids pending, so that end
	// is counted as "pending", not "timeout".
	Slice bool `json:"slice"`
	IDs   []struct {
		ReqID string `json:"req_id"`
		Count *int64 `json:"count"`
	} `json:"ids"`
}

type waitResponse struct {
	Ready []idCount `json:"ready"`
}

type errorBody struct {
	Error string `json:"error"`
}

// GET /v1/kv/{req_id}?count=N&wait_ms=T
func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("req_id")
	if err := checkReqID(id); err != nil {
		s.fail(w, http.StatusBadRequest, "req_id: "+err.Error())
		return
	}
	q := r.URL.Query()
	need, err := queryInt(q.Get("count"), 1, 1, MaxCount)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "count: "+err.Error())
		return
	}
	waitMS, err := queryInt(q.Get("wait_ms"), 0, 0, MaxWaitMillis)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "wait_ms: "+err.Error())
		return
	}
	ready, res := s.await(r.Context(), []want{{id: id, need: uint32(need)}}, time.Duration(waitMS)*time.Millisecond, false)
	switch res {
	case resultReady:
		writeJSON(w, http.StatusOK, ready[0])
	case resultTimeout:
		writeJSON(w, http.StatusNotFound, notReady{ReqID: id, Count: s.store.count(id, s.cfg.Now())})
	default:
		s.writeAwaitFailure(w, res)
	}
}

// POST /v1/kv/wait {"wait_ms":T,"ids":[{"req_id":..,"count":N},...]}
func (s *Service) handleWait(w http.ResponseWriter, r *http.Request) {
	// Read the whole body: only then does net/http watch the connection and
	// cancel r.Context() when the client goes away mid-wait.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWaitBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: over %d bytes", MaxWaitBodyBytes))
			return
		}
		s.fail(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	wants, wait, err := parseWaitRequest(body)
	if err != nil {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	ready, res := s.await(r.Context(), wants, wait, waitSlice(body))
	switch res {
	case resultReady:
		writeJSON(w, http.StatusOK, waitResponse{Ready: ready})
	case resultTimeout:
		writeJSON(w, http.StatusOK, waitResponse{Ready: []idCount{}})
	default:
		s.writeAwaitFailure(w, res)
	}
}

// parseWaitRequest validates a POST /v1/kv/wait body.
func parseWaitRequest(body []byte) ([]want, time.Duration, error) {
	var req waitRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field := typeErr.Field
			if field == "" {
				field = "body"
			}
			return nil, 0, fmt.Errorf("%s: expected %s, got %s", field, jsonKind(typeErr.Type.Kind()), typeErr.Value)
		}
		return nil, 0, fmt.Errorf("body: invalid JSON: %v", err)
	}
	if req.WaitMS < 0 || req.WaitMS > MaxWaitMillis {
		return nil, 0, fmt.Errorf("wait_ms: must be an integer in 0..%d", MaxWaitMillis)
	}
	if len(req.IDs) == 0 || len(req.IDs) > MaxWaitIDs {
		return nil, 0, fmt.Errorf("ids: must list 1..%d ids, not %d", MaxWaitIDs, len(req.IDs))
	}
	wants := make([]want, len(req.IDs))
	first := make(map[string]int, len(req.IDs))
	for i, it := range req.IDs {
		if err := checkReqID(it.ReqID); err != nil {
			return nil, 0, fmt.Errorf("ids[%d].req_id: %v", i, err)
		}
		if j, dup := first[it.ReqID]; dup {
			return nil, 0, fmt.Errorf("ids[%d].req_id: duplicate of ids[%d]", i, j)
		}
		first[it.ReqID] = i
		need := int64(1)
		if it.Count != nil {
			need = *it.Count
			if need < 1 || need > MaxCount {
				return nil, 0, fmt.Errorf("ids[%d].count: must be an integer in 1..%d", i, MaxCount)
			}
		}
		wants[i] = want{id: it.ReqID, need: uint32(need)}
	}
	return wants, time.Duration(req.WaitMS) * time.Millisecond, nil
}

// waitSlice reports whether a valid POST /v1/kv/wait body is one slice of
// a longer wait (waitRequest.Slice).
func waitSlice(body []byte) bool {
	var req struct {
		Slice bool `json:"slice"`
	}
	return json.Unmarshal(body, &req) == nil && req.Slice
}

// jsonKind names a Go kind of waitRequest the way a JSON client sees it.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int64:
		return "integer"
	case reflect.Slice:
		return "list"
	case reflect.Struct:
		return "object"
	}
	return k.String()
}

func (s *Service) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.stopping.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// result is how a wait ended; it labels kvbridge_waits_total.
type result string

const (
	resultReady   result = "ready"
	resultTimeout result = "timeout"
	// resultPending: a slice of a longer wait ended with ids still pending;
	// the caller polls again (waitRequest.Slice). Not a failure.
	resultPending  result = "pending"
	resultCanceled result = "canceled"
	resultShutdown result = "shutdown"
	resultRejected result = "rejected"
	resultBad      result = "bad_request"
)

// await answers wants: at once when one is ready or wait is zero, otherwise
// when the receiver wakes it, wait passes, ctx ends (the client left) or the
// service shuts down. Waiting is a blocked goroutine, never a poll. A
// timeout of a slice (see waitRequest.Slice) is counted as pending.
func (s *Service) await(ctx context.Context, wants []want, wait time.Duration, slice bool) (ready []idCount, res result) {
	defer func() {
		label := res
		if res == resultTimeout && slice {
			label = resultPending
		}
		s.metrics.waits.WithLabelValues(string(label)).Inc()
	}()
	ready, w, err := s.store.wait(wants, s.cfg.Now(), wait > 0)
	switch {
	case errors.Is(err, errShuttingDown):
		return nil, resultShutdown
	case err != nil:
		return nil, resultRejected
	case w == nil && len(ready) > 0:
		return ready, resultReady
	case w == nil:
		return nil, resultTimeout
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-timer.C:
		if s.store.cancel(w) {
			return nil, resultTimeout
		}
	case <-ctx.Done():
		if s.store.cancel(w) {
			return nil, resultCanceled
		}
	}
	// Woken, possibly while the timer fired or the client left.
	if w.shutdown {
		return nil, resultShutdown
	}
	s.metrics.wakeLatency.Observe(time.Since(w.wokeAt).Seconds())
	return w.ready, resultReady
}

func (s *Service) writeAwaitFailure(w http.ResponseWriter, res result) {
	switch res {
	case resultShutdown:
		s.fail(w, http.StatusServiceUnavailable, errShuttingDown.Error())
	case resultRejected:
		s.fail(w, http.StatusServiceUnavailable, fmt.Sprintf("%v (limit %d)", errTooManyWaiters, s.cfg.MaxWaiters))
	}
	// resultCanceled: the client is gone; there is no one to answer.
}

// fail writes a JSON error; 400s are counted as bad requests.
func (s *Service) fail(w http.ResponseWriter, status int, msg string) {
	if status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge {
		s.metrics.waits.WithLabelValues(string(resultBad)).Inc()
	}
	writeJSON(w, status, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// Encoding these fixed shapes cannot fail; a write error means the
	// client left, and there is no one to tell.
	_ = json.NewEncoder(w).Encode(v)
}

func checkReqID(id string) error {
	if len(id) == 0 || len(id) > MaxReqIDBytes || !utf8.ValidString(id) {
		return fmt.Errorf("must be 1..%d bytes of UTF-8", MaxReqIDBytes)
	}
	return nil
}

// queryInt parses an optional integer query parameter in [lo, hi].
func queryInt(v string, def, lo, hi int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("must be an integer in %d..%d", lo, hi)
	}
	return n, nil
}
