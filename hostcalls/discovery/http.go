package discovery

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxWait is the longest wait_ms of GET /v1/pools.
const MaxWait = 60 * time.Second

// Handler serves GET /v1/pools?version=V&wait_ms=T: the current sets at once
// when their version is not V (or T is 0), else as soon as they change, or
// after T with the same version. 503 until every pool's source delivered.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, "method: only GET")
			return
		}
		q := req.URL.Query()
		have, err := strconv.ParseInt(q.Get("version"), 10, 64)
		if q.Get("version") == "" {
			have, err = -1, nil
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "version: must be an integer")
			return
		}
		wait := time.Duration(0)
		if v := q.Get("wait_ms"); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > MaxWait {
				writeError(w, http.StatusBadRequest, "wait_ms: must be an integer in 0..60000")
				return
			}
			wait = time.Duration(ms) * time.Millisecond
		}
		var timer *time.Timer
		for {
			if ok, missing := r.Ready(); !ok {
				writeError(w, http.StatusServiceUnavailable, "discovery: no list yet for "+strings.Join(missing, " and "))
				return
			}
			body, version, changed := r.snapshot()
			if version != have || wait == 0 {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(body)
				return
			}
			if timer == nil {
				timer = time.NewTimer(wait)
				defer timer.Stop()
			}
			select {
			case <-changed:
			case <-timer.C:
				wait = 0
			case <-req.Context().Done():
				// The client left, or the server shuts down: a 503 tells a
				// client that is still there to keep its last sets.
				writeError(w, http.StatusServiceUnavailable, "discovery: shutting down")
				return
			}
		}
	})
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
