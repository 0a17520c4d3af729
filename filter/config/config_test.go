package config

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/sjson"

	"github.com/pdroute/pdroute/lb"
)

// Valid minimal configurations, one per mode; tests edit them with sjson.
var base = map[Mode]string{
	ModeNIXL: `{"mode":"nixl",
		"prefill":{"endpoints":[{"name":"p1","address":"10.0.0.1:8000"}]},
		"decode":{"endpoints":[{"name":"d1","cluster":"decode-1"}]}}`,
	ModeOrchestrated: `{"mode":"orchestrated",
		"prefill":{"endpoints":[{"name":"p1","address":"10.0.0.1:8000"}]},
		"decode":{"endpoints":[{"name":"d1","address":"10.0.0.2:8000"}]}}`,
	ModeLMCache: `{"mode":"lmcache",
		"prefill":{"endpoints":[{"name":"p1","address":"10.0.0.1:8000"}]},
		"decode":{"endpoints":[{"name":"d1","address":"10.0.0.2:8000",
			"kv_receiver":{"init_ports":[7300],"alloc_ports":[7400]}}]}}`,
	ModeSGLang: `{"mode":"sglang",
		"prefill":{"endpoints":[{"name":"p1","address":"10.0.0.1:30000","bootstrap_port":8998}]},
		"decode":{"endpoints":[{"name":"d1","address":"10.0.0.2:30000"}]}}`,
}

// edit applies (path, raw JSON value) pairs with sjson; a nil value deletes.
func edit(t testing.TB, doc string, kv ...any) string {
	t.Helper()
	var err error
	for i := 0; i < len(kv); i += 2 {
		path := kv[i].(string)
		if kv[i+1] == nil {
			doc, err = sjson.Delete(doc, path)
		} else {
			doc, err = sjson.SetRaw(doc, path, kv[i+1].(string))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return doc
}

func mustParse(t testing.TB, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return c
}

func TestParseDefaults(t *testing.T) {
	c := mustParse(t, base[ModeNIXL])
	pool := Pool{
		Strategy: CacheAware, RunningWeight: 1, WaitingWeight: 1, InflightWeight: 1,
		StatsMaxAge: 15 * time.Second, QPSWindow: 10 * time.Second,
		AffinityPrefixBytes: 1024, AffinityLoadFactor: 1.25,
		CacheLoadFactor: 1.5, CacheLoadSlack: 4, CacheMinGain: 0.1,
		FailureThreshold: 3, Cooldown: 10 * time.Second,
	}
	want := &Config{
		Mode:                ModeNIXL,
		ThresholdTokens:     0,
		ThresholdOn:         ThresholdOnPrompt,
		PrefixIndex:         PrefixIndex{BlockBytes: 512, Slots: 4096, TTL: 10 * time.Minute},
		TokenMethod:         "default",
		RouteAt:             RouteAtAuto,
		Paths:               []string{"/v1/chat/completions", "/v1/completions", "/v1/responses"},
		RouteHeader:         "x-pdroute-cluster",
		OriginalDstCluster:  "pdroute_original_dst",
		PrefillTimeout:      30 * time.Second,
		OnPrefillFailure:    OnFailureFallback,
		MaxBodyBytes:        4 << 20,
		StatsScrapeInterval: 5 * time.Second,
		SharedDataPrefix:    "pdroute",
		Prefill:             pool,
		Decode:              pool,
		LMCache: LMCache{KVBridgeCluster: "kvbridge", KVWaitTimeout: 10 * time.Second,
			OnKVTimeout: OnKVTimeoutProceed, TokenizeOn: TokenizeOnPrefill},
	}
	want.Prefill.Endpoints = []Endpoint{{Name: "p1", Address: "10.0.0.1:8000", Host: "10.0.0.1", MetricsCluster: "pdroute_original_dst"}}
	want.Decode.Endpoints = []Endpoint{{Name: "d1", Cluster: "decode-1", MetricsCluster: "decode-1"}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestParseEverySetting(t *testing.T) {
	doc := `{
	  "mode": "lmcache", "threshold_tokens": 512, "token_method": "chars4", "route_at": "headers",
	  "threshold_on": "uncached", "uncached_ratio": 0.25,
	  "prefix_index": {"block_bytes": 256, "slots": 100, "ttl_ms": 60000},
	  "paths": ["/openai/v1/chat/completions"], "route_header": "x-target",
	  "original_dst_cluster": "odst", "prefill_timeout_ms": 1500, "on_prefill_failure": "fail",
	  "max_body_bytes": 1048576, "stats_scrape_interval_ms": 0, "debug_headers": true,
	  "shared_data_prefix": "pd.a",
	  "prefill": {"strategy": "prefix_affinity", "running_weight": 2, "waiting_weight": 0.5,
	    "inflight_weight": 0, "stats_max_age_ms": 100, "qps_window_ms": 2000,
	    "affinity_prefix_bytes": 64, "affinity_load_factor": 1, "failure_threshold": 0,
	    "cache_load_factor": 2, "cache_load_slack": 0, "cache_min_gain": 0.5,
	    "cooldown_ms": 5,
	    "endpoints": [{"name": "p1", "cluster": "prefill-1", "metrics_cluster": "prefill-1-metrics", "host": "p1.svc"}]},
	  "decode": {"strategy": "least_loaded",
	    "endpoints": [{"name": "d1", "address": "[fd00::2]:8000",
	      "kv_receiver": {"host": "10.9.9.9", "init_ports": [7300, 7301], "alloc_ports": [7400, 7401]}}]},
	  "lmcache": {"kvbridge_cluster": "bridge", "kv_wait_timeout_ms": 2500, "on_kv_timeout": "fail", "tokenize_on": "decode"}
	}`
	c := mustParse(t, doc)
	want := &Config{
		Mode: ModeLMCache, ThresholdTokens: 512, TokenMethod: "chars4", RouteAt: RouteAtHeaders,
		ThresholdOn: ThresholdOnUncached, UncachedRatio: 0.25,
		PrefixIndex: PrefixIndex{BlockBytes: 256, Slots: 100, TTL: time.Minute},
		Paths:       []string{"/openai/v1/chat/completions"}, RouteHeader: "x-target",
		OriginalDstCluster: "odst", PrefillTimeout: 1500 * time.Millisecond, OnPrefillFailure: OnFailureFail,
		MaxBodyBytes: 1 << 20, StatsScrapeInterval: 0, DebugHeaders: true, SharedDataPrefix: "pd.a",
		Prefill: Pool{Strategy: PrefixAffinity, strategyGiven: true, RunningWeight: 2, WaitingWeight: 0.5, InflightWeight: 0,
			StatsMaxAge: 100 * time.Millisecond, QPSWindow: 2 * time.Second, AffinityPrefixBytes: 64,
			AffinityLoadFactor: 1, CacheLoadFactor: 2, CacheLoadSlack: 0, CacheMinGain: 0.5, FailureThreshold: 0, Cooldown: 5 * time.Millisecond,
			Endpoints: []Endpoint{{Name: "p1", Cluster: "prefill-1", MetricsCluster: "prefill-1-metrics", Host: "p1.svc"}}},
		Decode: Pool{Strategy: LeastLoaded, strategyGiven: true, RunningWeight: 1, WaitingWeight: 1, InflightWeight: 1,
			StatsMaxAge: 15 * time.Second, QPSWindow: 10 * time.Second, AffinityPrefixBytes: 1024,
			AffinityLoadFactor: 1.25, CacheLoadFactor: 1.5, CacheLoadSlack: 4, CacheMinGain: 0.1, FailureThreshold: 3, Cooldown: 10 * time.Second,
			Endpoints: []Endpoint{{Name: "d1", Address: "[fd00::2]:8000", Host: "fd00::2", MetricsCluster: "odst",
				KVReceiver: &KVReceiver{Host: "10.9.9.9", InitPorts: []int{7300, 7301}, AllocPorts: []int{7400, 7401}}}}},
		LMCache: LMCache{KVBridgeCluster: "bridge", KVWaitTimeout: 2500 * time.Millisecond,
			OnKVTimeout: OnKVTimeoutFail, TokenizeOn: TokenizeOnDecode},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("\n got %+v\nwant %+v", c, want)
	}
	if got := c.Decode.Endpoints[0].KVReceiver.TPSize(); got != 2 {
		t.Errorf("TPSize = %d, want 2", got)
	}
}

func TestParseResolvedFields(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		check func(t *testing.T, c *Config)
	}{
		{"default paths per mode", base[ModeSGLang], func(t *testing.T, c *Config) {
			want := []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate"}
			if !reflect.DeepEqual(c.Paths, want) {
				t.Errorf("sglang paths = %q", c.Paths)
			}
			if l := mustParse(t, base[ModeLMCache]).Paths; !reflect.DeepEqual(l, []string{"/v1/chat/completions", "/v1/completions"}) {
				t.Errorf("lmcache paths = %q", l)
			}
		}},
		{"null means default", edit(t, base[ModeNIXL], "threshold_tokens", "null", "paths", "null",
			"route_header", "null", "prefill.strategy", "null", "decode.endpoints.0.metrics_cluster", "null"),
			func(t *testing.T, c *Config) {
				if c.ThresholdTokens != 0 || len(c.Paths) != 3 || c.RouteHeader != "x-pdroute-cluster" ||
					c.Prefill.Strategy != CacheAware || c.Decode.Endpoints[0].MetricsCluster != "decode-1" {
					t.Errorf("null did not keep defaults: %+v", c)
				}
			}},
		{"ipv6 address gives unbracketed host", edit(t, base[ModeNIXL], "prefill.endpoints.0.address", `"[::1]:8000"`),
			func(t *testing.T, c *Config) {
				if h := c.Prefill.Endpoints[0].Host; h != "::1" {
					t.Errorf("host = %q", h)
				}
			}},
		{"explicit host wins over address", edit(t, base[ModeNIXL], "prefill.endpoints.0.host", `"engine-0.local"`),
			func(t *testing.T, c *Config) {
				if h := c.Prefill.Endpoints[0].Host; h != "engine-0.local" {
					t.Errorf("host = %q", h)
				}
			}},
		{"kv_receiver host defaults to endpoint host", base[ModeLMCache], func(t *testing.T, c *Config) {
			if h := c.Decode.Endpoints[0].KVReceiver.Host; h != "10.0.0.2" {
				t.Errorf("kv_receiver.host = %q", h)
			}
		}},
		{"kv_receiver host from explicit endpoint host on a cluster endpoint",
			edit(t, base[ModeLMCache], "decode.endpoints.0.address", nil, "decode.endpoints.0.cluster", `"d1"`,
				"decode.endpoints.0.host", `"d1.svc"`),
			func(t *testing.T, c *Config) {
				if h := c.Decode.Endpoints[0].KVReceiver.Host; h != "d1.svc" {
					t.Errorf("kv_receiver.host = %q", h)
				}
			}},
		{"bootstrap_port null is the engine default", edit(t, base[ModeSGLang], "prefill.endpoints.0.bootstrap_port", "null"),
			func(t *testing.T, c *Config) {
				if p := c.Prefill.Endpoints[0].BootstrapPort; p != 0 {
					t.Errorf("bootstrap_port = %d", p)
				}
			}},
		{"same address in both pools is allowed (kv_both engines)",
			edit(t, base[ModeNIXL], "decode.endpoints.0.cluster", nil, "decode.endpoints.0.address", `"10.0.0.1:8000"`),
			func(t *testing.T, c *Config) {
				if c.Decode.Endpoints[0].Address != c.Prefill.Endpoints[0].Address {
					t.Error("addresses differ")
				}
			}},
		{"sglang cluster prefill endpoint with host", edit(t, base[ModeSGLang], "prefill.endpoints.0.address", nil,
			"prefill.endpoints.0.cluster", `"p1"`, "prefill.endpoints.0.host", `"fd00::7"`),
			func(t *testing.T, c *Config) {
				if e := c.Prefill.Endpoints[0]; e.Host != "fd00::7" || e.MetricsCluster != "p1" {
					t.Errorf("endpoint = %+v", e)
				}
			}},
		{"empty mode sections are fine in their mode", edit(t, base[ModeSGLang], "sglang", `{}`),
			func(t *testing.T, c *Config) {
				if c.Mode != ModeSGLang {
					t.Error(c.Mode)
				}
			}},
		{"orchestrated section", edit(t, base[ModeOrchestrated], "orchestrated", `{"attach_prefill_response":true}`),
			func(t *testing.T, c *Config) {
				if !c.Orchestrated.AttachPrefillResponse {
					t.Error("attach_prefill_response not set")
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, mustParse(t, tt.doc)) })
	}
}

func TestParseProblems(t *testing.T) {
	nixl, lm, sg, orch := base[ModeNIXL], base[ModeLMCache], base[ModeSGLang], base[ModeOrchestrated]
	tests := []struct {
		name string
		doc  string
		want []string // "path: message", in order
	}{
		{"empty", "  \n", []string{"the configuration is empty"}},
		{"syntax error with position", "{\n  \"mode\": \"nixl\",\n}", []string{
			"not valid JSON: invalid character '}' looking for beginning of object key string (line 3, column 1)"}},
		{"not an object", `["nixl"]`, []string{"the configuration must be a JSON object, got an array"}},
		{"mode missing", edit(t, nixl, "mode", nil), []string{
			`mode: is required: one of "nixl", "orchestrated", "lmcache" or "sglang"`}},
		{"mode unknown", edit(t, nixl, "mode", `"vllm"`), []string{
			`mode: "vllm" is not one of "nixl", "orchestrated", "lmcache" or "sglang"`}},
		{"mode wrong type", edit(t, nixl, "mode", `1`), []string{"mode: must be a string, got a number"}},
		{"unknown fields", edit(t, nixl, "treshold_tokens", "5", "prefill.stratgy", `"random"`,
			"decode.endpoints.0.port", "80"), []string{
			"prefill.stratgy: unknown field", "decode.endpoints[0].port: unknown field", "treshold_tokens: unknown field"}},
		{"duplicate field", `{"mode":"nixl","mode":"sglang",` + nixl[len(`{"mode":"nixl",`):], []string{"mode: duplicate field"}},
		{"threshold types", edit(t, nixl, "threshold_tokens", `"512"`), []string{"threshold_tokens: must be an integer, got a string"}},
		{"threshold fraction", edit(t, nixl, "threshold_tokens", `1.5`), []string{"threshold_tokens: must be an integer, got 1.5"}},
		{"threshold exponent", edit(t, nixl, "threshold_tokens", `1e3`), []string{"threshold_tokens: must be an integer, got 1e3"}},
		{"threshold negative", edit(t, nixl, "threshold_tokens", `-1`), []string{"threshold_tokens: must be between 0 and 100000000, got -1"}},
		{"token method", edit(t, nixl, "token_method", `"tiktoken"`), []string{`token_method: "tiktoken" is not one of "default" or "chars4"`}},
		{"paths empty", edit(t, nixl, "paths", `[]`), []string{"paths: must not be empty (list the paths pdroute handles)"}},
		{"paths bad entries", edit(t, nixl, "paths", `["v1/completions","/v1/completions?x=1","/v1/chat/completions","/v1/chat/completions",7,"/v1/embeddings","/generate",""]`), []string{
			`paths[0]: "v1/completions" must start with /`,
			`paths[1]: "/v1/completions?x=1" must be a plain path (no query, fragment, spaces or control characters)`,
			`paths[3]: "/v1/chat/completions" is listed twice`,
			"paths[4]: must be a string, got a number",
			"paths[7]: must not be empty",
			`paths[1]: "/v1/embeddings": must end in /chat/completions, /completions, /responses or /generate`,
			`paths[2]: "/generate": /generate is SGLang's API: only allowed in sglang mode`}},
		{"responses in lmcache", edit(t, lm, "paths", `["/v1/responses"]`), []string{
			`paths[0]: "/v1/responses": the Responses API cannot be rewritten to token-id completions: not allowed in lmcache mode`}},
		{"route header", edit(t, nixl, "route_header", `"X-Cluster"`), []string{`route_header: "X-Cluster" must be a lower-case HTTP header name`}},
		{"route header reserved", edit(t, nixl, "route_header", `"x-envoy-original-dst-host"`), []string{
			`route_header: "x-envoy-original-dst-host" is reserved; choose a header of pdroute's own`}},
		{"cluster names", edit(t, nixl, "original_dst_cluster", `"a b"`, "decode.endpoints.0.cluster", `"d\u00e9"`), []string{
			`original_dst_cluster: "a b" must be visible ASCII without spaces`,
			`decode.endpoints[0].cluster: "dé" must be visible ASCII without spaces`}},
		{"durations", edit(t, nixl, "prefill_timeout_ms", `0`, "stats_scrape_interval_ms", `50`), []string{
			"prefill_timeout_ms: must be between 1 and 3600000, got 0",
			"stats_scrape_interval_ms: must be 0 (disabled) or at least 100, got 50"}},
		{"duration unit mistake", edit(t, nixl, "prefill_timeout_ms", `30000000`), []string{
			"prefill_timeout_ms: must be between 1 and 3600000, got 30000000"}},
		{"policies", edit(t, nixl, "on_prefill_failure", `"retry"`, "debug_headers", `"yes"`), []string{
			`on_prefill_failure: "retry" is not one of "fallback" or "fail"`,
			"debug_headers: must be true or false, got a string"}},
		{"route_at", edit(t, nixl, "route_at", `"router"`), []string{
			`route_at: "router" is not one of "auto", "body" or "headers"`}},
		{"route_at type", edit(t, nixl, "route_at", `true`), []string{
			`route_at: must be a string, got a boolean`}},
		{"body limit", edit(t, nixl, "max_body_bytes", `67108865`), []string{
			"max_body_bytes: must be between 1 and 67108864, got 67108865"}},
		{"shared data prefix", edit(t, nixl, "shared_data_prefix", `"pd/route"`), []string{
			`shared_data_prefix: "pd/route" may only contain letters, digits, '-', '_' and '.'`}},
		{"pool settings", edit(t, nixl, "prefill.strategy", `"fastest"`, "prefill.running_weight", `-1`,
			"prefill.affinity_load_factor", `0.5`, "prefill.qps_window_ms", `999`, "prefill.failure_threshold", `true`), []string{
			`prefill.strategy: "fastest" is not one of "round_robin", "random", "least_loaded", "qps", "power_of_two", "prefix_affinity" or "cache_aware"`,
			"prefill.running_weight: must be between 0 and 1e+06, got -1",
			"prefill.affinity_load_factor: must be between 1 and 100, got 0.5",
			"prefill.qps_window_ms: must be between 1000 and 3600000, got 999",
			"prefill.failure_threshold: must be an integer, got a boolean"}},
		{"least loaded without weights", edit(t, nixl, "decode.strategy", `"least_loaded"`, "decode.running_weight", `0`,
			"decode.waiting_weight", `0`, "decode.inflight_weight", `0`), []string{
			`decode: strategy "least_loaded" needs at least one of running_weight, waiting_weight, inflight_weight above 0`}},
		{"stale stats", edit(t, nixl, "decode.strategy", `"power_of_two"`, "decode.stats_max_age_ms", `1000`), []string{
			"decode.stats_max_age_ms: 1000 is below stats_scrape_interval_ms (5000): engine stats would always be stale"}},
		{"stale stats ignored when scraping is off", edit(t, nixl, "decode.strategy", `"least_loaded"`,
			"decode.stats_max_age_ms", `1000`, "stats_scrape_interval_ms", `0`), nil},
		{"pool not an object", edit(t, nixl, "decode", `[]`), []string{"decode: must be an object, got an array"}},
		{"endpoints not an array", edit(t, nixl, "decode.endpoints", `{}`), []string{"decode.endpoints: must be an array, got an object"}},
		{"pools missing", `{"mode":"nixl"}`, []string{
			"prefill.endpoints: must list at least one endpoint (to turn disaggregation off, raise threshold_tokens instead)",
			"decode.endpoints: must list at least one endpoint"}},
		{"decode empty", edit(t, nixl, "decode.endpoints", `[]`), []string{"decode.endpoints: must list at least one endpoint"}},
		{"endpoint name", edit(t, nixl, "prefill.endpoints.0.name", nil, "decode.endpoints.0.name", `"d 1"`), []string{
			`decode.endpoints[0].name: "d 1" may only contain letters, digits, '-', '_' and '.'`,
			"prefill.endpoints[0].name: is required",
		}},
		{"endpoint name unique across pools", edit(t, nixl, "decode.endpoints.0.name", `"p1"`), []string{
			`decode.endpoints[0].name: "p1" is already used by prefill.endpoints[0] (names are unique across both pools)`}},
		{"cluster and address", edit(t, nixl, "prefill.endpoints.0.cluster", `"p1"`), []string{
			`prefill.endpoints[0]: set either "cluster" or "address", not both`}},
		{"neither cluster nor address", edit(t, nixl, "prefill.endpoints.0.address", nil), []string{
			`prefill.endpoints[0]: needs "cluster" (a static Envoy cluster) or "address" (IP:port via original_dst_cluster)`}},
		{"address forms", edit(t, nixl, "prefill.endpoints", `[
			{"name":"a","address":"vllm-0.svc:8000"}, {"name":"b","address":"::1:8000"},
			{"name":"c","address":"10.0.0.1:0"}, {"name":"d","address":"10.0.0.1"},
			{"name":"e","address":"[fe80::1%eth0]:80"}, {"name":"f","address":"0.0.0.0:80"},
			{"name":"g","address":"10.0.0.1:70000"}, {"name":"h","address":"[::1]:8000"}]`), []string{
			`prefill.endpoints[0].address: "vllm-0.svc:8000" is not an IP:port: the host must be an IP address (ORIGINAL_DST does not resolve names; use "cluster" for DNS names)`,
			`prefill.endpoints[1].address: "::1:8000" is not an IP:port: IPv6 needs brackets, as [::1]:8000`,
			`prefill.endpoints[2].address: "10.0.0.1:0" has port 0`,
			`prefill.endpoints[3].address: "10.0.0.1" is not an IP:port (IPv6 as [::1]:8000)`,
			`prefill.endpoints[4].address: "[fe80::1%eth0]:80" must not carry an IPv6 zone`,
			`prefill.endpoints[5].address: "0.0.0.0:80" is an unspecified address (0.0.0.0 or ::)`,
			`prefill.endpoints[6].address: "10.0.0.1:70000" is not an IP:port: bad port "70000"`,
		}},
		{"duplicate targets in a pool", edit(t, nixl, "prefill.endpoints.1", `{"name":"p2","address":"10.0.0.1:8000"}`,
			"decode.endpoints.1", `{"name":"d2","cluster":"decode-1"}`), []string{
			`prefill.endpoints[1].address: "10.0.0.1:8000" is already used by prefill.endpoints[0] in this pool`,
			`decode.endpoints[1].cluster: "decode-1" is already used by decode.endpoints[0] in this pool`}},
		{"host", edit(t, nixl, "prefill.endpoints.0.host", `"[::1]"`, "decode.endpoints.0.host", `"-bad.example"`), []string{
			`prefill.endpoints[0].host: "[::1]" is not an IP address or DNS name (IPv6 goes without brackets)`,
			`decode.endpoints[0].host: "-bad.example" is not an IP address or DNS name`}},
		{"bootstrap port outside sglang", edit(t, nixl, "prefill.endpoints.0.bootstrap_port", `8998`), []string{
			"prefill.endpoints[0].bootstrap_port: only prefill endpoints in sglang mode have a bootstrap port"}},
		{"bootstrap port on a decode endpoint", edit(t, sg, "decode.endpoints.0.bootstrap_port", `8998`), []string{
			"decode.endpoints[0].bootstrap_port: only prefill endpoints in sglang mode have a bootstrap port"}},
		{"bootstrap port range", edit(t, sg, "prefill.endpoints.0.bootstrap_port", `0`), []string{
			"prefill.endpoints[0].bootstrap_port: must be between 1 and 65535, got 0"}},
		{"sglang cluster prefill needs host", edit(t, sg, "prefill.endpoints.0.address", nil, "prefill.endpoints.0.cluster", `"p1"`), []string{
			"prefill.endpoints[0].host: is required for a cluster endpoint in sglang mode (it becomes bootstrap_host)"}},
		{"orchestrated cluster prefill needs host", edit(t, orch, "prefill.endpoints.0.address", nil, "prefill.endpoints.0.cluster", `"p1"`), []string{
			"prefill.endpoints[0].host: is required for a cluster endpoint in orchestrated mode (it becomes remote_host)"}},
		{"kv_receiver missing in lmcache", edit(t, lm, "decode.endpoints.0.kv_receiver", nil), []string{
			"decode.endpoints[0].kv_receiver: is required on decode endpoints in lmcache mode"}},
		{"kv_receiver on a prefill endpoint", edit(t, lm, "prefill.endpoints.0.kv_receiver", `{"init_ports":[1],"alloc_ports":[2]}`), []string{
			"prefill.endpoints[0].kv_receiver: only decode endpoints in lmcache mode have a kv_receiver"}},
		{"kv_receiver outside lmcache", edit(t, nixl, "decode.endpoints.0.kv_receiver", `{"init_ports":[1],"alloc_ports":[2]}`), []string{
			"decode.endpoints[0].kv_receiver: only decode endpoints in lmcache mode have a kv_receiver"}},
		{"kv_receiver ports", edit(t, lm, "decode.endpoints.0.kv_receiver", `{"init_ports":[7300,7301],"alloc_ports":[7400]}`), []string{
			"decode.endpoints[0].kv_receiver: init_ports has 2 entries but alloc_ports has 1: both need one per decoder TP rank"}},
		{"kv_receiver empty ports", edit(t, lm, "decode.endpoints.0.kv_receiver", `{"init_ports":[],"alloc_ports":[7400]}`), []string{
			"decode.endpoints[0].kv_receiver.init_ports: must list one port per decoder TP rank"}},
		{"kv_receiver missing alloc ports", edit(t, lm, "decode.endpoints.0.kv_receiver", `{"init_ports":[7300]}`), []string{
			"decode.endpoints[0].kv_receiver.alloc_ports: must list one port per decoder TP rank"}},
		{"kv_receiver port values", edit(t, lm, "decode.endpoints.0.kv_receiver", `{"init_ports":[7300,"7301",0],"alloc_ports":[7400,7300,7401],"tp":2}`), []string{
			"decode.endpoints[0].kv_receiver.init_ports[1]: must be an integer, got a string",
			"decode.endpoints[0].kv_receiver.init_ports[2]: must be between 1 and 65535, got 0",
			"decode.endpoints[0].kv_receiver.tp: unknown field",
			"decode.endpoints[0].kv_receiver.alloc_ports[1]: port 7300 is already used by decode.endpoints[0].kv_receiver.init_ports[0]"}},
		{"kv_receiver host needed", edit(t, lm, "decode.endpoints.0.address", nil, "decode.endpoints.0.cluster", `"d1"`), []string{
			`decode.endpoints[0].kv_receiver.host: is required when the endpoint has neither "address" nor "host"`}},
		{"sections in the wrong mode", edit(t, nixl, "orchestrated", `{}`, "lmcache", `{}`, "sglang", `{}`), []string{
			`orchestrated: this section is only allowed when mode is "orchestrated" (mode is "nixl")`,
			`lmcache: this section is only allowed when mode is "lmcache" (mode is "nixl")`,
			`sglang: this section is only allowed when mode is "sglang" (mode is "nixl")`}},
		{"sglang section has no fields", edit(t, sg, "sglang", `{"bootstrap_port":1}`), []string{"sglang.bootstrap_port: unknown field"}},
		{"lmcache section values", edit(t, lm, "lmcache", `{"kvbridge_cluster":"","kv_wait_timeout_ms":0,"on_kv_timeout":"retry","tokenize_on":"any"}`), []string{
			"lmcache.kvbridge_cluster: must not be empty",
			"lmcache.kv_wait_timeout_ms: must be between 1 and 3600000, got 0",
			`lmcache.on_kv_timeout: "retry" is not one of "proceed" or "fail"`,
			`lmcache.tokenize_on: "any" is not one of "prefill" or "decode"`}},
		{"many problems at once", edit(t, lm, "mode", `"lmcache"`, "prefil", `{}`, "threshold_tokens", `-5`,
			"decode.endpoints.0.address", `"decoder:8000"`), []string{
			"prefil: unknown field",
			"threshold_tokens: must be between 0 and 100000000, got -5",
			`decode.endpoints[0].address: "decoder:8000" is not an IP:port: the host must be an IP address (ORIGINAL_DST does not resolve names; use "cluster" for DNS names)`,
			`decode.endpoints[0].kv_receiver.host: is required when the endpoint has neither "address" nor "host"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error\n%s", err, tt.doc)
			}
			if c != nil {
				t.Error("Config returned along with an error")
			}
			var got []string
			for _, p := range e.Problems {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(sorted(got), sorted(tt.want)) {
				t.Errorf("problems:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// sorted compares problem lists without depending on map order in the
// walker (sjson appends edited fields, so document order differs per case).
func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func TestTooManyEndpoints(t *testing.T) {
	eps := make([]string, 513)
	for i := range eps {
		eps[i] = fmt.Sprintf(`{"name":"d%d","address":"10.0.%d.%d:8000"}`, i, i/256, i%256)
	}
	_, err := Parse([]byte(edit(t, base[ModeNIXL], "decode.endpoints", "["+strings.Join(eps, ",")+"]")))
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != 1 || e.Problems[0].String() != "decode.endpoints: has 513 entries, at most 512 are allowed" {
		t.Errorf("got %v", err)
	}
	mustParse(t, edit(t, base[ModeNIXL], "decode.endpoints", "["+strings.Join(eps[:512], ",")+"]"))
}

func TestProblemOrderFollowsDocument(t *testing.T) {
	_, err := Parse([]byte(`{"zz":1,"mode":"x","aa":2,"prefill":{"endpoints":[]},"decode":{"endpoints":[]}}`))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatal(err)
	}
	want := []Problem{
		{"zz", "unknown field"},
		{"mode", `"x" is not one of "nixl", "orchestrated", "lmcache" or "sglang"`},
		{"aa", "unknown field"},
		{"prefill.endpoints", "must list at least one endpoint (to turn disaggregation off, raise threshold_tokens instead)"},
		{"decode.endpoints", "must list at least one endpoint"},
	}
	if !reflect.DeepEqual(e.Problems, want) {
		t.Errorf("got %q\nwant %q", e.Problems, want)
	}
	wantMsg := `invalid pdroute configuration (5 problems): zz: unknown field; mode: "x" is not one of "nixl", "orchestrated", "lmcache" or "sglang"; aa: unknown field; prefill.endpoints: must list at least one endpoint (to turn disaggregation off, raise threshold_tokens instead); decode.endpoints: must list at least one endpoint`
	if err.Error() != wantMsg {
		t.Errorf("Error() = %q", err.Error())
	}
	one := (&Error{Problems: []Problem{{"", "the configuration is empty"}}}).Error()
	if one != "invalid pdroute configuration: the configuration is empty" {
		t.Errorf("single problem: %q", one)
	}
}

func TestUpstream(t *testing.T) {
	c := mustParse(t, base[ModeNIXL])
	cluster, dst := c.Upstream(&c.Prefill.Endpoints[0])
	if cluster != "pdroute_original_dst" || dst != "10.0.0.1:8000" {
		t.Errorf("address endpoint: %q %q", cluster, dst)
	}
	cluster, dst = c.Upstream(&c.Decode.Endpoints[0])
	if cluster != "decode-1" || dst != "" {
		t.Errorf("cluster endpoint: %q %q", cluster, dst)
	}
}

func TestAPIForPath(t *testing.T) {
	tests := map[string]API{
		"/v1/chat/completions":        APIChat,
		"/openai/v1/chat/completions": APIChat,
		"/v1/completions":             APICompletions,
		"/v1/completions?stream=1":    APICompletions,
		"/v1/responses":               APIResponses,
		"/generate":                   APIGenerate,
		"/v1/embeddings":              APIUnknown,
		"/v1/completions/":            APIUnknown,
		"":                            APIUnknown,
	}
	for path, want := range tests {
		if got := APIForPath(path); got != want {
			t.Errorf("APIForPath(%q) = %v, want %v", path, got, want)
		}
	}
	if APIGenerate.String() != "generate" || API(99).String() != "unknown" {
		t.Error("API.String")
	}
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate"} {
		if got := APIForPath("/prefix" + p).Path(); got != p {
			t.Errorf("Path of /prefix%s = %q", p, got)
		}
	}
	if APIUnknown.Path() != "" {
		t.Error("APIUnknown.Path")
	}
}

// TestDocumentedExamples parses every complete example in
// docs/CONFIGURATION.md, so the documentation cannot drift from the parser.
func TestDocumentedExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	modes := map[Mode]bool{}
	for _, b := range blocks {
		if !strings.Contains(string(b[1]), `"mode"`) {
			continue // a fragment, not a whole configuration
		}
		c, err := Parse(b[1])
		if err != nil {
			t.Errorf("documented example does not parse: %v\n%s", err, b[1])
			continue
		}
		modes[c.Mode] = true
	}
	for _, m := range []Mode{ModeNIXL, ModeOrchestrated, ModeLMCache, ModeSGLang} {
		if !modes[m] {
			t.Errorf("docs/CONFIGURATION.md has no complete example for mode %q", m)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, doc := range base {
		f.Add([]byte(doc))
	}
	f.Add([]byte(`{"mode":"lmcache","prefill":{"endpoints":[{"name":"p","cluster":"p"}]},"decode":{"endpoints":[{"name":"d","address":"[::1]:1","kv_receiver":{"init_ports":[1],"alloc_ports":[2]}}]}}`))
	f.Add([]byte(`{"mode":"nixl","paths":["/v1/completions"],"threshold_tokens":1e99}`))
	f.Add([]byte(`{"mode":"sglang","prefill":{"endpoints":[{"name":"p","address":"1.2.3.4:5","bootstrap_port":null}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 || c != nil {
				t.Fatalf("error %v is not a non-empty *Error (config %v)", err, c)
			}
			return
		}
		// A valid configuration keeps every documented invariant.
		if c.Mode == "" || len(c.Paths) == 0 || len(c.Prefill.Endpoints) == 0 || len(c.Decode.Endpoints) == 0 {
			t.Fatalf("incomplete config accepted: %+v", c)
		}
		names := map[string]bool{}
		for _, pool := range []Pool{c.Prefill, c.Decode} {
			// The plugin builds its balancers from an accepted config: lb must
			// accept it too (pdroute-config check promises the filter starts).
			if _, err := lb.New("p", pool.Balancing(), lb.NewMemStore(), rand.NewPCG(1, 2)); err != nil {
				t.Fatalf("Parse accepted a pool lb rejects: %v", err)
			}
			for _, e := range pool.Endpoints {
				if (e.Cluster == "") == (e.Address == "") || e.Name == "" || names[e.Name] || e.MetricsCluster == "" {
					t.Fatalf("bad endpoint accepted: %+v", e)
				}
				names[e.Name] = true
				if r := e.KVReceiver; r != nil && (len(r.InitPorts) != len(r.AllocPorts) || r.TPSize() == 0 || r.Host == "") {
					t.Fatalf("bad kv_receiver accepted: %+v", r)
				}
			}
		}
		for _, p := range c.Paths {
			if ok, _ := apiAllowed(c.Mode, APIForPath(p)); !ok {
				t.Fatalf("path %q accepted in mode %s", p, c.Mode)
			}
		}
	})
}

// Issue 31: sglang with a threshold above 0 is valid but sends short
// requests to decoders that refuse them.
func TestWarnings(t *testing.T) {
	for _, tt := range []struct {
		mode      Mode
		threshold string
		want      int
	}{{ModeSGLang, "0", 0}, {ModeSGLang, "512", 1}, {ModeNIXL, "512", 0}, {ModeNIXL, "0", 0}} {
		c := mustParse(t, edit(t, base[tt.mode], "threshold_tokens", tt.threshold))
		if got := c.Warnings(); len(got) != tt.want {
			t.Errorf("%s threshold %s: warnings %q, want %d", tt.mode, tt.threshold, got, tt.want)
		}
	}
}
