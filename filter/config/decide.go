package config

import (
	"strings"

	"github.com/pdroute/pdroute/filter/apierr"
)

// Route is what pdroute does with a request.
type Route uint8

// The routes.
const (
	// Passthrough: not a request pdroute handles (method or path); it goes
	// on untouched and unpaused.
	Passthrough Route = iota
	// Direct: handled, but too short to disaggregate: it goes to a decoder,
	// which prefills itself.
	Direct
	// Disaggregate: prefill on a prefill endpoint, then decode.
	Disaggregate
)

var routeNames = [...]string{"passthrough", "direct", "disaggregate"}

// String is the route's metric label: passthrough, direct, disaggregate.
func (r Route) String() string {
	if int(r) < len(routeNames) {
		return routeNames[r]
	}
	return "unknown"
}

// Match reports, from the request headers alone, whether pdroute handles a
// request and which API it speaks: a POST to one of the configured paths
// (query string ignored), whatever its content-type. The content type
// decides nothing: whether an engine parses a text/plain body as JSON is the
// engine's business (SGLang does, vLLM does not), and the promise that no
// client steers routing or the KV source must not depend on it. A handled
// body must be a JSON object (else 400) and is sanitised; the plugin sends
// it on labelled application/json (JSONContentType). The plugin pauses and
// buffers only matched requests. The content-type argument is ignored.
func (c *Config) Match(method, path, _ string) (API, bool) {
	if method != "POST" {
		return APIUnknown, false
	}
	path = stripQuery(path)
	for _, p := range c.Paths {
		if p == path {
			return APIForPath(path), true
		}
	}
	return APIUnknown, false
}

// JSONContentType reports whether a content-type labels JSON as FastAPI
// (vLLM's and SGLang's server) reads it: application/json or any
// application/*+json type, parameters ignored, or none at all. A handled
// request with another label is relabelled application/json, since pdroute
// parsed its body as JSON.
func JSONContentType(contentType string) bool {
	// A header is ASCII: its media type (before any parameter, without
	// surrounding spaces) is found by one loop here, in the function, rather
	// than by strings.Cut, TrimSpace and ToLower; other bytes go to those.
	ascii, end := true, len(contentType)
	for i := 0; i < len(contentType); i++ {
		if c := contentType[i]; c >= 0x80 {
			ascii = false
			break
		} else if c == ';' && end == len(contentType) {
			end = i
		}
	}
	var mt string
	if ascii {
		start := 0
		for start < end && asciiSpace(contentType[start]) {
			start++
		}
		for end > start && asciiSpace(contentType[end-1]) {
			end--
		}
		mt = contentType[start:end]
	} else {
		mt, _, _ = strings.Cut(contentType, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	return mt == "" || equalFoldASCII(mt, "application/json") ||
		len(mt) >= len("application/") && equalFoldASCII(mt[:len("application/")], "application/") &&
			len(mt) >= len("+json") && equalFoldASCII(mt[len(mt)-len("+json"):], "+json")
}

// asciiSpace is unicode.IsSpace for an ASCII byte.
func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// equalFoldASCII reports whether ASCII s equals lower-case ASCII lower,
// ignoring the case of s.
func equalFoldASCII(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// Decide routes a request from its headers and its estimated input tokens
// (from tokenest; negative when the estimate failed). A request estimated at
// threshold_tokens or more is disaggregated; with threshold 0 every handled
// request is, even without an estimate. A failed estimate with a threshold
// above 0 goes direct: the decoder can always serve a request alone.
func (c *Config) Decide(method, path, contentType string, estimate int) Route {
	return c.DecideCached(method, path, contentType, estimate, 0)
}

// DecideCached is the routing decision; Decide is it with nothing cached.
// cached is the estimated input tokens the chosen decoder already holds in
// its prefix cache (from the prefix index; 0 when unknown). With
// threshold_on "prompt" it is ignored. With "uncached" the threshold is
// compared with estimate − cached, and with uncached_ratio r > 0 a request
// is disaggregated only if estimate − cached ≥ r × estimate as well: what
// the decoder would prefill itself is what a prefill endpoint could save.
func (c *Config) DecideCached(method, path, contentType string, estimate, cached int) Route {
	if _, ok := c.Match(method, path, contentType); !ok {
		return Passthrough
	}
	return c.DecideMatched(estimate, cached)
}

// DecideMatched is DecideCached for a request Match already handles (the
// filter's stream matched it at its headers): Direct or Disaggregate, without
// matching the method and path again on the body's callback.
func (c *Config) DecideMatched(estimate, cached int) Route {
	if c.ThresholdTokens == 0 {
		return Disaggregate
	}
	n := estimate
	if c.ThresholdOn == ThresholdOnUncached && estimate >= 0 {
		n = max(estimate-min(max(cached, 0), estimate), 0)
		if c.UncachedRatio > 0 && float64(n) < c.UncachedRatio*float64(estimate) {
			return Direct
		}
	}
	if n >= c.ThresholdTokens {
		return Disaggregate
	}
	return Direct
}

// PrefillOutcome classifies how a prefill leg ended.
type PrefillOutcome uint8

// The prefill outcomes.
const (
	// PrefillOK: a 2xx answer the connector can use.
	PrefillOK PrefillOutcome = iota
	// PrefillRejected: a 4xx other than 408 and 429 — the request itself is
	// bad, and the decoder would reject it too.
	PrefillRejected
	// PrefillServerError: 5xx, 408, 429, or a status that is not 2xx/4xx.
	PrefillServerError
	// PrefillReset: the call failed without an HTTP answer.
	PrefillReset
	// PrefillTimeout: no answer within prefill_timeout_ms.
	PrefillTimeout
	// PrefillNoEndpoint: no prefill endpoint could be chosen.
	PrefillNoEndpoint
	// PrefillBadAnswer: a 2xx answer without usable kv_transfer_params (nixl,
	// orchestrated) or first_tok (lmcache).
	PrefillBadAnswer
)

var outcomeNames = [...]string{"ok", "rejected", "server_error", "reset", "timeout", "no_endpoint", "bad_answer"}

// String is the outcome's metric label.
func (o PrefillOutcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// ClassifyPrefill classifies a prefill answer from its HTTP status (0 when
// the call was reset) and whether the connector found what it needs in the
// body.
func ClassifyPrefill(status int, usable bool) PrefillOutcome {
	switch {
	case status == 0:
		return PrefillReset
	case status >= 200 && status < 300 && usable:
		return PrefillOK
	case status >= 200 && status < 300:
		return PrefillBadAnswer
	case status >= 400 && status < 500 && status != 408 && status != 429:
		return PrefillRejected
	}
	return PrefillServerError
}

// ActionKind is what the plugin does after the prefill leg.
type ActionKind uint8

// The actions.
const (
	// Proceed builds the decode request from the prefill answer.
	Proceed ActionKind = iota
	// Relay returns the prefill's answer (status, body) to the client.
	Relay
	// Fallback sends the client's original (sanitised) request to a decoder.
	Fallback
	// Fail answers the client with Action.Error.
	Fail
)

var actionNames = [...]string{"proceed", "relay", "fallback", "fail"}

// String is the action's metric label.
func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return "unknown"
}

// Action is the plugin's next step; Error is set when Kind is Fail.
type Action struct {
	Kind  ActionKind  // what to do
	Error apierr.Kind // the answer to send when Kind is Fail
}

// OnPrefill decides what follows a prefill outcome:
//   - OK → Proceed; a 4xx rejection → Relay (the request is bad);
//   - any other failure → Fallback under on_prefill_failure "fallback", else
//     Fail with 503 (no endpoint), 504 (timeout) or 502 (everything else).
//
// In sglang mode a failure is always Fail: the decode request, already
// sent with bootstrap fields, waits for a prefill that will never come, and a
// request without them is refused by a PD decoder, so there is nothing to
// fall back to. The plugin ends the decode (an SSE error event when the
// answer is already streaming) instead of letting it hang until the engine's
// own timeout.
func (c *Config) OnPrefill(o PrefillOutcome) Action {
	switch {
	case o == PrefillOK:
		return Action{Kind: Proceed}
	case returnsToClient(o):
		return Action{Kind: Relay}
	case c.shouldFallback():
		return Action{Kind: Fallback}
	}
	return Action{Kind: Fail, Error: prefillError(o)}
}

// returnsToClient: the prefill engine judged the request itself bad.
func returnsToClient(o PrefillOutcome) bool { return o == PrefillRejected }

// shouldFallback: a failed prefill is replaced by local prefill on the decoder.
func (c *Config) shouldFallback() bool {
	return c.OnPrefillFailure == OnFailureFallback && c.Mode != ModeSGLang
}

func prefillError(o PrefillOutcome) apierr.Kind {
	switch o {
	case PrefillTimeout:
		return apierr.PrefillTimeout
	case PrefillNoEndpoint:
		return apierr.NoPrefillEndpoint
	}
	return apierr.PrefillFailed
}

// OnKVTimeout decides what follows an lmcache KV-ready wait that timed out:
// Proceed (the decoder recomputes) or Fail with 504, per on_kv_timeout.
func (c *Config) OnKVTimeout() Action {
	if c.LMCache.OnKVTimeout == OnKVTimeoutFail {
		return Action{Kind: Fail, Error: apierr.KVTimeout}
	}
	return Action{Kind: Proceed}
}

// HeadersWayDirect reports whether a request of api that takes the headers
// way (RouteAtHeaders) must go straight to the decoder: lmcache's decode
// leg of a chat request is /v1/completions, and the path is fixed once the
// headers have continued to the router.
func (c *Config) HeadersWayDirect(api API) bool {
	return c.Mode == ModeLMCache && api != APICompletions
}

// HeadersWayLimits says what requests taking the headers way give up under
// this configuration, one sentence each (logged at start, and when auto
// switches to the headers way). A decode pool's cache_aware counts only when
// the configuration sets it: the default one was not asked for.
func (c *Config) HeadersWayLimits() []string {
	var out []string
	if c.Decode.Strategy == PrefixAffinity {
		out = append(out, "decode.strategy prefix_affinity chooses the decoder before the body is read: "+
			"by load (bounded-load hashing of a random key), not by prompt prefix")
	}
	if c.Decode.Strategy == CacheAware && c.Decode.strategyGiven {
		// Only when asked for: the default cache_aware takes round robin's
		// turns there, which is what a user who did not choose it expects.
		out = append(out, "decode.strategy cache_aware chooses the decoder before the body is read: "+
			"in round robin's turns, not by the prompt's cached prefix (the prefill choice and threshold_on uncached still read the prompt)")
	}
	if c.Mode == ModeLMCache {
		out = append(out, "lmcache mode sends chat completions straight to a decoder (their decode leg is "+
			"/v1/completions, and the path is fixed once the headers continue); /v1/completions requests disaggregate")
	}
	return out
}
