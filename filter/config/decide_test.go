package config

import (
	"strings"
	"testing"

	"github.com/pdroute/pdroute/filter/apierr"
)

func TestMatch(t *testing.T) {
	c := mustParse(t, edit(t, base[ModeNIXL], "paths", `["/v1/chat/completions","/v1/completions","/openai/v1/responses"]`))
	tests := []struct {
		method, path, ctype string
		api                 API
		ok                  bool
	}{
		{"POST", "/v1/chat/completions", "application/json", APIChat, true},
		{"POST", "/v1/completions", "application/json; charset=utf-8", APICompletions, true},
		{"POST", "/v1/completions?api-version=2", "Application/JSON", APICompletions, true},
		{"POST", "/openai/v1/responses", "", APIResponses, true},
		{"POST", "/v1/chat/completions", "application/vnd.api+json", APIChat, true},
		{"POST", "/v1/responses", "application/json", APIUnknown, false}, // not configured
		{"GET", "/v1/chat/completions", "application/json", APIUnknown, false},
		{"post", "/v1/chat/completions", "application/json", APIUnknown, false},
		// issue 31: the content type decides nothing (the body is checked and sanitised)
		{"POST", "/v1/chat/completions", "multipart/form-data; boundary=x", APIChat, true},
		{"POST", "/v1/chat/completions", "text/plain", APIChat, true},
		{"POST", "/v1/completions", "application/x-www-form-urlencoded", APICompletions, true},
		{"POST", "/v1/chat/completions/", "application/json", APIUnknown, false},
		{"POST", "/V1/chat/completions", "application/json", APIUnknown, false},
	}
	for _, tt := range tests {
		api, ok := c.Match(tt.method, tt.path, tt.ctype)
		if api != tt.api || ok != tt.ok {
			t.Errorf("Match(%q, %q, %q) = %v, %v; want %v, %v", tt.method, tt.path, tt.ctype, api, ok, tt.api, tt.ok)
		}
	}
}

func TestJSONContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"": true, "application/json": true, "Application/JSON; charset=utf-8": true,
		"application/vnd.api+json": true, "text/plain": false, "multipart/form-data; boundary=x": false,
		"application/x-www-form-urlencoded": false, "text/json": false,
	} {
		if got := JSONContentType(ct); got != want {
			t.Errorf("JSONContentType(%q) = %v, want %v", ct, got, want)
		}
	}
}

// The content-type tests and stripQuery run loops of their own on ASCII
// values; they must answer as the strings functions they stand for.
func TestContentTypeAsStringsFunctions(t *testing.T) {
	refJSON := func(ct string) bool {
		mt, _, _ := strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		return mt == "" || mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
	}
	refPlain := func(ct string) bool {
		return !refJSON(ct) && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
	}
	refStrip := func(p string) string {
		if i := strings.IndexAny(p, "?#"); i >= 0 {
			return p[:i]
		}
		return p
	}
	for _, ct := range []string{
		"", " ", ";", " ; x", "application/json", "APPLICATION/JSON", " application/json ;charset=utf-8",
		"\tApplication/Json\r\n", "application/json5", "application/", "application/+json", "+json",
		"application/vnd.api+JSON; q=1", "application/x+json;", "text/event-stream", "Text/Event-Stream; charset=utf-8",
		" text/event-streamx", "text/event-strea", "text/plain", "text/html; charset=utf-8", "multipart/form-data; boundary=x",
		"\u00a0application/json", "application/json\u0085", "appl\u0130cation/json", "\u212aapplication/json",
		"text/event-stream\u00a0", "\u00a0text/event-stream", "application/\u00e9+json", "a;b;c", ";application/json",
	} {
		if got, want := JSONContentType(ct), refJSON(ct); got != want {
			t.Errorf("JSONContentType(%q) = %v, strings functions say %v", ct, got, want)
		}
		if got, want := PlainContentType(ct), refPlain(ct); got != want {
			t.Errorf("PlainContentType(%q) = %v, strings functions say %v", ct, got, want)
		}
		if got, want := stripQuery(ct), refStrip(ct); got != want {
			t.Errorf("stripQuery(%q) = %q, want %q", ct, got, want)
		}
	}
	for _, p := range []string{"/v1/chat/completions?x=1", "/a#b?c", "/a?b#c", "?", "#", "/x"} {
		if got, want := stripQuery(p), refStrip(p); got != want {
			t.Errorf("stripQuery(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	always := mustParse(t, base[ModeNIXL])
	at512 := mustParse(t, edit(t, base[ModeNIXL], "threshold_tokens", "512"))
	tests := []struct {
		name     string
		c        *Config
		method   string
		path     string
		estimate int
		want     Route
	}{
		{"threshold 0 always disaggregates", always, "POST", "/v1/completions", 1, Disaggregate},
		{"threshold 0 even without an estimate", always, "POST", "/v1/completions", -1, Disaggregate},
		{"below threshold", at512, "POST", "/v1/completions", 511, Direct},
		{"at threshold", at512, "POST", "/v1/completions", 512, Disaggregate},
		{"above threshold", at512, "POST", "/v1/chat/completions", 100000, Disaggregate},
		{"failed estimate goes direct", at512, "POST", "/v1/completions", -1, Direct},
		{"unhandled path", at512, "POST", "/v1/embeddings", 100000, Passthrough},
		{"unhandled method", always, "PUT", "/v1/completions", 100000, Passthrough},
	}
	for _, tt := range tests {
		if got := tt.c.Decide(tt.method, tt.path, "application/json", tt.estimate); got != tt.want {
			t.Errorf("%s: Decide = %v, want %v", tt.name, got, tt.want)
		}
	}
	if Passthrough.String() != "passthrough" || Disaggregate.String() != "disaggregate" || Route(9).String() != "unknown" {
		t.Error("Route.String")
	}
}

func TestClassifyPrefill(t *testing.T) {
	tests := []struct {
		status int
		usable bool
		want   PrefillOutcome
	}{
		{200, true, PrefillOK},
		{201, true, PrefillOK},
		{200, false, PrefillBadAnswer},
		{0, false, PrefillReset},
		{400, false, PrefillRejected},
		{404, false, PrefillRejected},
		{413, false, PrefillRejected},
		{451, false, PrefillRejected},
		{408, false, PrefillServerError},
		{429, false, PrefillServerError},
		{500, false, PrefillServerError},
		{503, true, PrefillServerError},
		{302, false, PrefillServerError},
		{101, false, PrefillServerError},
	}
	for _, tt := range tests {
		if got := ClassifyPrefill(tt.status, tt.usable); got != tt.want {
			t.Errorf("ClassifyPrefill(%d, %v) = %v, want %v", tt.status, tt.usable, got, tt.want)
		}
	}
}

func TestOnPrefill(t *testing.T) {
	cfg := func(mode Mode, policy string) *Config {
		return mustParse(t, edit(t, base[mode], "on_prefill_failure", `"`+policy+`"`))
	}
	proceed := Action{Kind: Proceed}
	relay := Action{Kind: Relay}
	fallback := Action{Kind: Fallback}
	fail := func(k apierr.Kind) Action { return Action{Kind: Fail, Error: k} }
	failures := []PrefillOutcome{PrefillServerError, PrefillReset, PrefillTimeout, PrefillNoEndpoint, PrefillBadAnswer}
	errs := map[PrefillOutcome]apierr.Kind{
		PrefillServerError: apierr.PrefillFailed, PrefillReset: apierr.PrefillFailed,
		PrefillTimeout: apierr.PrefillTimeout, PrefillNoEndpoint: apierr.NoPrefillEndpoint,
		PrefillBadAnswer: apierr.PrefillFailed,
	}
	for _, mode := range []Mode{ModeNIXL, ModeOrchestrated, ModeLMCache, ModeSGLang} {
		for _, policy := range []string{"fallback", "fail"} {
			c := cfg(mode, policy)
			if got := c.OnPrefill(PrefillOK); got != proceed {
				t.Errorf("%s/%s ok: %+v", mode, policy, got)
			}
			if got := c.OnPrefill(PrefillRejected); got != relay {
				t.Errorf("%s/%s rejected: %+v", mode, policy, got)
			}
			for _, o := range failures {
				want := fail(errs[o])
				if policy == "fallback" && mode != ModeSGLang {
					want = fallback
				}
				if got := c.OnPrefill(o); got != want {
					t.Errorf("%s/%s %v: got %+v, want %+v", mode, policy, o, got, want)
				}
			}
		}
	}
	// Status codes reach the client through apierr.
	if s, _ := apierr.Response(errs[PrefillTimeout], ""); s != 504 {
		t.Errorf("timeout status %d", s)
	}
	if PrefillBadAnswer.String() != "bad_answer" || Fallback.String() != "fallback" || Fail.String() != "fail" {
		t.Error("labels")
	}
}

func TestOnKVTimeout(t *testing.T) {
	if got := mustParse(t, base[ModeLMCache]).OnKVTimeout(); got != (Action{Kind: Proceed}) {
		t.Errorf("default: %+v", got)
	}
	c := mustParse(t, edit(t, base[ModeLMCache], "lmcache", `{"on_kv_timeout":"fail"}`))
	if got := c.OnKVTimeout(); got != (Action{Kind: Fail, Error: apierr.KVTimeout}) {
		t.Errorf("fail: %+v", got)
	}
}

func TestRouteAt(t *testing.T) {
	tests := []struct {
		mode   Mode
		value  string // "" = not given
		want   RouteAt
		direct map[API]bool
		limits int
	}{
		{ModeNIXL, "", RouteAtAuto, map[API]bool{APIChat: false, APICompletions: false, APIResponses: false}, 0},
		{ModeNIXL, `"body"`, RouteAtBody, nil, 0},
		{ModeNIXL, `"headers"`, RouteAtHeaders, nil, 0},
		{ModeNIXL, `null`, RouteAtAuto, nil, 0},
		{ModeOrchestrated, `"auto"`, RouteAtAuto, map[API]bool{APIChat: false}, 0},
		{ModeSGLang, `"headers"`, RouteAtHeaders, map[API]bool{APIChat: false, APIGenerate: false}, 0},
		{ModeLMCache, `"headers"`, RouteAtHeaders, map[API]bool{APIChat: true, APICompletions: false}, 1},
	}
	for _, tt := range tests {
		doc := base[tt.mode]
		if tt.value != "" {
			doc = edit(t, doc, "route_at", tt.value)
		}
		c := mustParse(t, doc)
		if c.RouteAt != tt.want {
			t.Errorf("%s route_at %s: got %q, want %q", tt.mode, tt.value, c.RouteAt, tt.want)
		}
		for api, want := range tt.direct {
			if got := c.HeadersWayDirect(api); got != want {
				t.Errorf("%s: HeadersWayDirect(%v) = %v, want %v", tt.mode, api, got, want)
			}
		}
		if got := c.HeadersWayLimits(); len(got) != tt.limits {
			t.Errorf("%s: HeadersWayLimits = %q, want %d", tt.mode, got, tt.limits)
		}
	}
	cacheAware := mustParse(t, edit(t, base[ModeNIXL], "decode.strategy", `"cache_aware"`))
	if got := cacheAware.HeadersWayLimits(); len(got) != 1 || !strings.Contains(got[0], "cache_aware") {
		t.Errorf("nixl + decode cache_aware: HeadersWayLimits = %q", got)
	}
	affinity := mustParse(t, edit(t, base[ModeLMCache], "decode.strategy", `"prefix_affinity"`))
	if got := affinity.HeadersWayLimits(); len(got) != 2 || !strings.Contains(got[0], "prefix_affinity") {
		t.Errorf("lmcache + decode prefix_affinity: HeadersWayLimits = %q", got)
	}
}

// TestDefaultStrategy: cache_aware is every pool's default but an sglang
// decode pool's, and only an explicit cache_aware decode pool draws the
// headers-way limit.
func TestDefaultStrategy(t *testing.T) {
	tests := []struct {
		name            string
		doc             string
		prefill, decode Strategy
		limit           bool // HeadersWayLimits names cache_aware
	}{
		{"nixl default", base[ModeNIXL], CacheAware, CacheAware, false},
		{"orchestrated default", base[ModeOrchestrated], CacheAware, CacheAware, false},
		{"lmcache default", base[ModeLMCache], CacheAware, CacheAware, false},
		{"sglang default: its PD decoders keep no prefix cache", base[ModeSGLang], CacheAware, RoundRobin, false},
		{"null is the default", edit(t, base[ModeNIXL], "decode.strategy", "null"), CacheAware, CacheAware, false},
		{"sglang null", edit(t, base[ModeSGLang], "decode.strategy", "null"), CacheAware, RoundRobin, false},
		{"explicit cache_aware", edit(t, base[ModeNIXL], "decode.strategy", `"cache_aware"`), CacheAware, CacheAware, true},
		{"sglang explicit cache_aware (decode radix cache on)", edit(t, base[ModeSGLang], "decode.strategy", `"cache_aware"`),
			CacheAware, CacheAware, true},
		{"explicit round_robin", edit(t, base[ModeNIXL], "prefill.strategy", `"round_robin"`, "decode.strategy", `"round_robin"`),
			RoundRobin, RoundRobin, false},
		{"headers way, default", edit(t, base[ModeNIXL], "route_at", `"headers"`), CacheAware, CacheAware, false},
		{"headers way, explicit", edit(t, base[ModeNIXL], "route_at", `"headers"`, "decode.strategy", `"cache_aware"`),
			CacheAware, CacheAware, true},
	}
	for _, tt := range tests {
		c := mustParse(t, tt.doc)
		if c.Prefill.Strategy != tt.prefill || c.Decode.Strategy != tt.decode {
			t.Errorf("%s: strategies %s/%s, want %s/%s", tt.name, c.Prefill.Strategy, c.Decode.Strategy, tt.prefill, tt.decode)
		}
		limit := false
		for _, l := range c.HeadersWayLimits() {
			limit = limit || strings.Contains(l, "cache_aware")
		}
		if limit != tt.limit {
			t.Errorf("%s: HeadersWayLimits = %q, want a cache_aware limit: %v", tt.name, c.HeadersWayLimits(), tt.limit)
		}
		if w := c.Warnings(); len(w) != 0 {
			t.Errorf("%s: Warnings = %q", tt.name, w)
		}
	}
}

func TestDecideCached(t *testing.T) {
	prompt := mustParse(t, edit(t, base[ModeNIXL], "threshold_tokens", "1000"))
	uncached := mustParse(t, edit(t, base[ModeNIXL], "threshold_tokens", "1000", "threshold_on", `"uncached"`))
	ratio := mustParse(t, edit(t, base[ModeNIXL], "threshold_tokens", "1000", "threshold_on", `"uncached"`, "uncached_ratio", "0.5"))
	tests := []struct {
		name             string
		c                *Config
		estimate, cached int
		want             Route
	}{
		{"prompt: the cache does not matter", prompt, 8000, 7500, Disaggregate},
		{"uncached: 500 left on the decoder", uncached, 8000, 7500, Direct},
		{"uncached: 1000 left", uncached, 8000, 7000, Disaggregate},
		{"uncached: nothing cached", uncached, 8000, 0, Disaggregate},
		{"uncached: more cached than estimated", uncached, 8000, 9000, Direct},
		{"uncached: negative cached is none", uncached, 1500, -5, Disaggregate},
		{"uncached: failed estimate goes direct", uncached, -1, 0, Direct},
		{"ratio: 2000 left but only 25 %", ratio, 8000, 6000, Direct},
		{"ratio: 4000 left, 50 %", ratio, 8000, 4000, Disaggregate},
	}
	for _, tt := range tests {
		if got := tt.c.DecideCached("POST", "/v1/completions", "application/json", tt.estimate, tt.cached); got != tt.want {
			t.Errorf("%s: DecideCached(%d, %d) = %v, want %v", tt.name, tt.estimate, tt.cached, got, tt.want)
		}
		// the filter's body callback decides a matched request so
		if got := tt.c.DecideMatched(tt.estimate, tt.cached); got != tt.want {
			t.Errorf("%s: DecideMatched(%d, %d) = %v, want %v", tt.name, tt.estimate, tt.cached, got, tt.want)
		}
	}
	if got := uncached.Decide("POST", "/v1/completions", "", 1200); got != Disaggregate {
		t.Errorf("Decide without a cache: %v", got)
	}
	loadOnly := mustParse(t, edit(t, base[ModeNIXL], "prefill.strategy", `"round_robin"`, "decode.strategy", `"least_loaded"`))
	if !uncached.UsesPrefixIndex() || !prompt.UsesPrefixIndex() || loadOnly.UsesPrefixIndex() {
		t.Error("UsesPrefixIndex")
	}
	sg := edit(t, base[ModeSGLang], "threshold_on", `"uncached"`)
	if _, err := Parse([]byte(sg)); err == nil || !strings.Contains(err.Error(), "sglang") {
		t.Errorf("threshold_on uncached in sglang mode: %v", err)
	}
	if _, err := Parse([]byte(edit(t, base[ModeNIXL], "uncached_ratio", "0.5"))); err == nil {
		t.Error("uncached_ratio without threshold_on uncached was accepted")
	}
}
