package plugin

import (
	"errors"
	"strings"
	"time"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb"
)

// Two ways through a handled request (RATIONALE: "Two ways through a
// request"):
//
//   - the body way pauses the request headers, reads the whole body and then
//     chooses the decoder. Envoy calls the body callbacks of a filter whose
//     headers are paused only when the wasm filter's config sets
//     allow_on_headers_stop_iteration: true (Envoy >= 1.35); without it the
//     Pause is StopAllIterationAndWatermark and the body never comes.
//   - the headers way chooses the decoder from the headers (load, health),
//     continues the headers at once and holds the body in the body
//     callbacks (StopIterationAndBuffer) until it is rewritten for the
//     decoder that is already connected. It needs nothing of Envoy.
//
// Which one Envoy supports is learnt, not configured: the first body callback
// of a paused request proves the body way works; a request paused without
// one is continued the headers way after a short wait, and when its body
// then arrives at once (Envoy had buffered it) the body way is known not to
// work. The knowledge goes into shared data, so every VM of the proxy (and
// every VM that replaces one) knows it.

// wayKey is the shared-data key (under the configured prefix) holding what
// this proxy's Envoy does with a paused request's body.
const wayKey = "route_way"

// bodyWay is what is known of Envoy's body callbacks during a header pause.
type bodyWay uint8

const (
	wayUnknown  bodyWay = iota
	wayWorks            // a body callback came while the headers were paused
	wayWithheld         // Envoy withheld it until the headers continued
)

// Wait limits for a request paused in its headers without a body callback.
const (
	// probeAfter: auto, nothing known yet. A client sends its body right
	// after the headers; a body that has not reached the filter by then was
	// most likely withheld by Envoy. Only the first requests of a proxy
	// wait this long (plus up to a 100 ms tick).
	probeAfter = 250 * time.Millisecond
	// bodyWatchdog: the body way is known to work, or route_at pins it. A
	// request still without a body byte after this continues the headers
	// way: a slow client is served, and so is one whose body Envoy withholds
	// after all (the filter cannot tell the two apart: Envoy shows a paused
	// filter no body it buffered for it).
	bodyWatchdog = 10 * time.Second
	// withheldWindow: a body callback this soon after a probe continued
	// the headers is Envoy delivering what it had buffered, not a client
	// that happened to send then.
	withheldWindow = 20 * time.Millisecond
)

// way returns what is known, reading shared data until something is.
func (r *rootContext) way() bodyWay {
	if r.known != wayUnknown {
		return r.known
	}
	return r.refreshWay()
}

// refreshWay reads what the proxy's VMs found (each tick: a finding can
// change, see bodyArrived).
func (r *rootContext) refreshWay() bodyWay {
	v, _, err := r.store.Get(wayKey)
	if err == nil && len(v) == 1 {
		switch v[0] {
		case 'b':
			r.learn(wayWorks, false)
		case 'h':
			r.learn(wayWithheld, false)
		}
	}
	return r.known
}

// learn records w for this VM and, when found here, for the whole proxy.
func (r *rootContext) learn(w bodyWay, found bool) {
	if r.known == w {
		return
	}
	r.known = w
	if found {
		v := []byte{'b'}
		if w == wayWithheld {
			v[0] = 'h'
		}
		if err := overwrite(r.store, wayKey, v); err != nil && !errors.Is(err, lb.ErrNotFound) {
			abi.LogWarnf("pdroute: record the request way in shared data: %v", err)
		}
	}
	switch w {
	case wayWorks:
		if !found {
			break
		}
		abi.LogInfof("pdroute: Envoy delivers the request body to a filter that paused the headers " +
			"(allow_on_headers_stop_iteration is set): requests take the body way")
	case wayWithheld:
		if found {
			r.m.wayWithheld.Increment(1)
		}
		msg := "pdroute: Envoy withholds the request body while a filter pauses the headers (the wasm filter's " +
			"config has no allow_on_headers_stop_iteration: true; Istio's WasmPlugin, Envoy Gateway's " +
			"EnvoyExtensionPolicy and Envoy 1.33/1.34 cannot set it): requests take the headers way, " +
			"the decoder chosen from the headers"
		if limits := r.cfg.HeadersWayLimits(); len(limits) > 0 {
			msg += "; " + strings.Join(limits, "; ")
		}
		switch {
		case !found:
			// Another VM of this proxy found it and logged why.
			abi.LogInfof("pdroute: requests take the headers way (Envoy withholds the body of a paused request; found by another VM)")
		case r.cfg.RouteAt == config.RouteAtBody:
			abi.LogErrorf("%s. route_at is \"body\": set allow_on_headers_stop_iteration: true on the wasm filter, or route_at \"auto\"", msg)
		default:
			abi.LogWarnf("%s", msg)
		}
	}
	_ = r.setTick()
}

// headersWay reports whether a new handled request takes the headers way.
func (r *rootContext) headersWay() bool {
	return r.cfg.RouteAt == config.RouteAtHeaders || r.way() == wayWithheld
}

// waitLimit is how long s may stay paused in its headers without a body
// callback before it continues the headers way.
func (r *rootContext) waitLimit() time.Duration {
	switch r.way() {
	case wayWithheld:
		// Found while s waited (by another request of this VM, or by another
		// VM): its body will not come before the headers continue.
		return 0
	case wayUnknown:
		if r.cfg.RouteAt == config.RouteAtAuto {
			return probeAfter
		}
	}
	return bodyWatchdog
}

// checkBodyWait continues the headers way a stream whose body did not reach
// the filter in time (tick; stream as effective context).
func (s *stream) checkBodyWait(now time.Time) {
	if !s.awaitingBody || s.localReply || now.Sub(s.pausedAt) < s.r.waitLimit() {
		return
	}
	s.awaitingBody = false
	s.probedAt = now
	abi.LogDebugf("pdroute: stream %d: no request body %s after the headers: continuing the headers way",
		s.id, now.Sub(s.pausedAt).Round(time.Millisecond))
	if s.continueAtHeaders() {
		s.resume()
	}
}

// bodyArrived notes a body callback: proof of what Envoy does.
func (s *stream) bodyArrived() {
	switch {
	case s.awaitingBody:
		s.awaitingBody = false
		if s.r.known != wayWorks { // learn's own test, without its call
			s.r.learn(wayWorks, true)
		}
	case !s.probedAt.IsZero():
		// Only while nothing is known: once a body came during a pause, a
		// body right after a probe is a slow client whose bytes met the
		// 10 s tick (on a busy worker the two events run back to back).
		if time.Since(s.probedAt) <= withheldWindow && s.r.way() == wayUnknown {
			s.r.learn(wayWithheld, true)
		}
		s.probedAt = time.Time{}
	}
}
