// Package config owns pdroute's plugin configuration — the JSON given to the
// filter in Envoy's plugin configuration — and the routing decision made from
// it: which requests pdroute handles, whether one is disaggregated, and what
// happens when the prefill leg fails.
//
// Parse is the only way to build a Config: it parses and validates once (in
// proxy_on_configure, and in `pdroute-config check`), applies every default,
// and reports all problems with their field paths. The hot path reads the
// resulting struct and never re-parses.
//
// It is pure Go compiled into the wasm filter: stdlib, gjson, the sibling
// apierr package, lb (whose pool settings a Pool carries; Pool.Balancing
// hands them over) and lb/prefix (the index's parameters) only; it must not import proxy-wasm packages or tokenest,
// and it starts no goroutines or timers.
package config

import (
	"time"

	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/lb/prefix"
)

// Mode selects the connector: how the prefill and decode requests are built
// and what gates the decode leg. There is no default: the modes speak to
// incompatible engine set-ups, so a configuration must name one.
type Mode string

// The modes.
const (
	// ModeNIXL is vLLM's NixlConnector: the prefill answer's kv_transfer_params
	// are handed to the decoder verbatim.
	ModeNIXL Mode = "nixl"
	// ModeOrchestrated is vLLM production-stack's orchestrated flow: as nixl,
	// with remote_host overwritten by the prefill endpoint's host.
	ModeOrchestrated Mode = "orchestrated"
	// ModeLMCache is LMCache's NIXL push: tokenize, prefill with a disagg_spec
	// naming the decoder, wait for the KV-ready notification, decode from
	// token ids.
	ModeLMCache Mode = "lmcache"
	// ModeSGLang is SGLang's bootstrap protocol: the same body, with
	// bootstrap_host/port/room, goes to prefill and decode at once.
	ModeSGLang Mode = "sglang"
)

// FailurePolicy says what happens when the prefill leg fails.
type FailurePolicy string

// The prefill failure policies.
const (
	// OnFailureFallback sends the client's original request to the decoder,
	// which then prefills locally: slower, but the client gets an answer.
	OnFailureFallback FailurePolicy = "fallback"
	// OnFailureFail answers the client with an OpenAI-style 502/503/504 error.
	OnFailureFail FailurePolicy = "fail"
)

// KVTimeoutPolicy says what happens when an lmcache KV-ready notification
// does not arrive in time.
type KVTimeoutPolicy string

// The KV timeout policies.
const (
	// OnKVTimeoutProceed sends the decode request anyway; the decoder
	// recomputes what it lacks (as production-stack does after its 10 s wait).
	OnKVTimeoutProceed KVTimeoutPolicy = "proceed"
	// OnKVTimeoutFail answers the client with a 504.
	OnKVTimeoutFail KVTimeoutPolicy = "fail"
)

// TokenizeOn says which endpoint answers the lmcache /tokenize call.
type TokenizeOn string

// Where to tokenize.
const (
	// TokenizeOnPrefill asks the chosen prefill endpoint, as the reference
	// LMCache proxies do.
	TokenizeOnPrefill TokenizeOn = "prefill"
	// TokenizeOnDecode asks the chosen decode endpoint.
	TokenizeOnDecode TokenizeOn = "decode"
)

// RouteAt says when a handled request's decoder is chosen, and so which way
// the request takes through the filter (RATIONALE: "Two ways through a
// request").
type RouteAt string

// The ways.
const (
	// RouteAtAuto takes the body way where Envoy delivers the body to a
	// filter that paused the headers, and the headers way where it does not
	// (noticed on the first request; shared by every VM of the proxy).
	RouteAtAuto RouteAt = "auto"
	// RouteAtBody pauses the headers, reads the whole body, then chooses
	// the decoder with everything the request says (prefix affinity) and
	// continues. Needs allow_on_headers_stop_iteration: true on the wasm
	// filter (Envoy >= 1.35); without it a request whose body does not come
	// within 10 s continues the headers way.
	RouteAtBody RouteAt = "body"
	// RouteAtHeaders chooses the decoder from the headers (load and health),
	// continues the headers at once and holds the body in the filter until
	// the prefill is done. Works on every Envoy >= 1.33, Istio's WasmPlugin
	// and Envoy Gateway's EnvoyExtensionPolicy as they are.
	RouteAtHeaders RouteAt = "headers"
)

// Strategy names the load-balancing strategy of a pool (implemented by lb).
type Strategy string

// The strategies, spelled as in the configuration.
const (
	RoundRobin     Strategy = "round_robin"
	Random         Strategy = "random"
	LeastLoaded    Strategy = "least_loaded"
	QPS            Strategy = "qps"
	PowerOfTwo     Strategy = "power_of_two"
	PrefixAffinity Strategy = "prefix_affinity"
	CacheAware     Strategy = "cache_aware"
)

// ThresholdOn says what threshold_tokens is compared with.
type ThresholdOn string

// What the threshold is compared with.
const (
	// ThresholdOnPrompt compares the whole prompt's estimated tokens.
	ThresholdOnPrompt ThresholdOn = "prompt"
	// ThresholdOnUncached compares the estimated tokens the chosen decoder
	// does not hold in its prefix cache (from the shared prefix index): a
	// decoder that holds most of a long prompt prefills the rest faster
	// itself than a transfer would take.
	ThresholdOnUncached ThresholdOn = "uncached"
)

// PrefixIndex sizes the shared prefix index (lb/prefix) that cache_aware
// and threshold_on "uncached" read.
type PrefixIndex struct {
	// BlockBytes ("block_bytes"): rendered prompt bytes per block. Default
	// 512 (about 128 tokens).
	BlockBytes int
	// Slots ("slots"): shared-data keys the index may use, each at most
	// 294 bytes. Default 4096 (1.2 MB at most).
	Slots int
	// TTL ("ttl_ms"): a prefix an endpoint has not served for this long is
	// forgotten. Default 10 min.
	TTL time.Duration
}

// Config is a parsed and validated plugin configuration with every default
// applied. Build it with Parse; never modify it afterwards (it is shared by
// all streams of a VM).
type Config struct {
	// Mode is the connector ("mode"). Required.
	Mode Mode
	// ThresholdTokens ("threshold_tokens"): a request whose estimated input
	// tokens are >= this is disaggregated, shorter ones go straight to a
	// decoder. Default 0 = always disaggregate, as production-stack and the
	// vLLM/LMCache reference proxies do: configuring a PD mode should do PD
	// until the operator has measured where the break-even lies.
	ThresholdTokens int
	// RouteAt ("route_at") is when the decoder is chosen: "auto", "body" or
	// "headers". Default "auto": the user never needs to know which Envoy
	// setting the body way depends on.
	RouteAt RouteAt
	// ThresholdOn ("threshold_on") is "prompt" (default: the whole prompt's
	// estimate is compared with threshold_tokens) or "uncached" (the estimate
	// minus what the chosen decoder holds in its prefix cache, as recorded by
	// the prefix index). Not in sglang mode, whose decode engines cannot
	// prefill a request alone.
	ThresholdOn ThresholdOn
	// UncachedRatio ("uncached_ratio"), with threshold_on "uncached": a
	// request is disaggregated only if its uncached tokens are also at least
	// this share of its estimate (0 to 1). Default 0 (the threshold alone).
	UncachedRatio float64
	// PrefixIndex ("prefix_index") sizes the shared prefix index.
	PrefixIndex PrefixIndex
	// TokenMethod ("token_method") is the tokenest estimation method:
	// "default" or "chars4". Default "default".
	TokenMethod string
	// Paths ("paths") are the request paths pdroute handles, matched exactly
	// against :path without its query string. Default: /v1/chat/completions,
	// /v1/completions, /v1/responses (lmcache: no /v1/responses, which cannot
	// be rewritten to token-id completions; sglang: plus /generate). Each
	// path must end in /chat/completions, /completions, /responses or
	// /generate, which tells the connector how to read the body.
	Paths []string
	// RouteHeader ("route_header") is the request header the filter sets to
	// the chosen endpoint's cluster; the Envoy route reads it with
	// cluster_header. Default "x-pdroute-cluster".
	RouteHeader string
	// OriginalDstCluster ("original_dst_cluster") is the ORIGINAL_DST cluster
	// (use_http_header: true) used for endpoints given by address; the filter
	// sets x-envoy-original-dst-host to the address. Default
	// "pdroute_original_dst".
	OriginalDstCluster string
	// PrefillTimeout ("prefill_timeout_ms") bounds the prefill leg. Default
	// 30 s: a 128k-token prefill on a loaded engine takes seconds, and a
	// client should learn of a hung prefiller long before typical client
	// timeouts (60 s+).
	PrefillTimeout time.Duration
	// OnPrefillFailure ("on_prefill_failure") is "fallback" or "fail".
	// Default "fallback": the decoder can always prefill itself, so a broken
	// prefiller degrades latency instead of failing requests. See
	// Config.OnPrefill for what it means per mode.
	OnPrefillFailure FailurePolicy
	// MaxBodyBytes ("max_body_bytes") is the largest request body pdroute
	// buffers; larger handled requests get 413. Default 4 MiB: a 128k-token
	// chat prompt is ~0.5–1 MiB of JSON. Envoy's own buffer limit
	// (per_connection_buffer_limit_bytes, default 1 MiB) must be raised to
	// match. At most 64 MiB: wasm memory never shrinks.
	MaxBodyBytes int
	// StatsScrapeInterval ("stats_scrape_interval_ms") is how often each
	// engine's /metrics is scraped for load-aware strategies; 0 disables
	// scraping. Default 5 s: engine queues change on that scale, and
	// scraping every endpoint from every VM costs real requests.
	StatsScrapeInterval time.Duration
	// DebugHeaders ("debug_headers") adds x-pdroute-path, -prefill, -decode and
	// -tokens response headers. Default false: they reveal topology.
	DebugHeaders bool
	// DebugPath ("debug_path"): when set, a GET of exactly this path is
	// answered by the filter itself with a JSON snapshot of the balancers'
	// shared state (in-flight counts, health, engine stats) and of this VM's
	// waiters. Default "" (off): it reveals topology. Tests and operators use
	// it to check that nothing is left behind after failures.
	DebugPath string
	// SharedDataPrefix ("shared_data_prefix") namespaces pdroute's shared-data
	// keys. Default "pdroute". Istio runs all plugins in one VM id, so two
	// pdroute plugins in one proxy need different prefixes.
	SharedDataPrefix string
	// Prefill ("prefill") is the prefill pool. It must have at least one
	// endpoint (to turn disaggregation off, raise threshold_tokens instead).
	Prefill Pool
	// Decode ("decode") is the decode pool; it must have at least one endpoint.
	Decode Pool
	// Orchestrated ("orchestrated") holds the orchestrated-mode settings;
	// the section is rejected in other modes.
	Orchestrated Orchestrated
	// LMCache ("lmcache") holds the lmcache-mode settings; the section is
	// rejected in other modes.
	LMCache LMCache
	// SGLang ("sglang") has no settings today; the (empty) section is
	// accepted in sglang mode only, so a misplaced section is caught.
	SGLang SGLang
	// Discovery ("discovery"), when set, makes both pools follow the
	// discovery companion (hostcalls/discovery): the pools' endpoints may
	// then be empty, and those listed serve until the companion first
	// answers. Nil: the pools are the fixed lists above.
	Discovery *Discovery
}

// Discovery holds the discovery settings: where the filter asks for the
// current endpoint sets (see ParseDiscovered for the answer).
type Discovery struct {
	// Cluster ("cluster") is the Envoy cluster of the companion. Default
	// "kvbridge": the discovery API is served by the kvbridge binary.
	Cluster string
	// Path ("path") is the companion's pools path. Default "/v1/pools".
	Path string
	// Wait ("wait_ms") is the long poll: the companion answers as soon as
	// the sets change, or after Wait with the same version. Default 5 s;
	// 0 makes every VM-elected poll an immediate answer (then the filter
	// polls every PollInterval). At most 30 s.
	Wait time.Duration
	// PollInterval ("poll_interval_ms") is the pause after a failed poll
	// (and between polls when wait_ms is 0); after a long poll answered the
	// filter asks again at once. Default 500 ms: a failure is retried twice
	// a second. At most 1 s.
	PollInterval time.Duration
	// Stats ("stats"): engine stats come from the companion's GET
	// /v1/stats (kvbridge -discovery-scrape-interval), one call per
	// stats_scrape_interval_ms per proxy, instead of every engine's
	// /metrics: the engines see one scrape per interval per companion,
	// whatever the number of proxies. Default false.
	Stats bool
	// StatsPath ("stats_path") is the companion's stats path. Default
	// "/v1/stats".
	StatsPath string
}

// Pool is one pool of engine endpoints and how to balance over them. The
// JSON field names are shared with lb.PoolConfig (docs/CONTRACTS.md).
type Pool struct {
	// Strategy ("strategy"). Default cache_aware (lb.DefaultPoolConfig says
	// why), except round_robin for the decode pool in sglang mode: SGLang's
	// PD decode engines keep no prefix cache unless started with
	// --disaggregation-decode-enable-radix-cache, so there is nothing for
	// cache_aware to find on them.
	Strategy Strategy
	// strategyGiven: the configuration set "strategy" (not null). Only an
	// explicit strategy draws a headers-way limit (HeadersWayLimits); a
	// default one was not asked for.
	strategyGiven bool
	// RunningWeight ("running_weight") weighs the engine's running requests
	// in least_loaded and power_of_two. Default 1.
	RunningWeight float64
	// WaitingWeight ("waiting_weight") weighs the engine's waiting requests.
	// Default 1.
	WaitingWeight float64
	// InflightWeight ("inflight_weight") weighs pdroute's own in-flight count
	// to the endpoint, which is fresh where engine stats lag. Default 1.
	InflightWeight float64
	// StatsMaxAge ("stats_max_age_ms"): engine stats older than this are
	// ignored (the strategy falls back to round robin). Default 15 s, three
	// default scrape intervals. Must not be below stats_scrape_interval_ms
	// for least_loaded/power_of_two, or stats would always be stale.
	StatsMaxAge time.Duration
	// QPSWindow ("qps_window_ms") is the sliding window of the qps strategy.
	// Default 10 s; at least 1 s.
	QPSWindow time.Duration
	// AffinityPrefixBytes ("affinity_prefix_bytes") is how much leading prompt
	// text prefix_affinity hashes. Default 1024: a system prompt's worth,
	// which is what prefix caches share.
	AffinityPrefixBytes int
	// AffinityLoadFactor ("affinity_load_factor") bounds prefix_affinity: no
	// endpoint takes more than factor × mean load. Default 1.25; at least 1.
	AffinityLoadFactor float64
	// CacheLoadFactor ("cache_load_factor") and CacheLoadSlack
	// ("cache_load_slack") bound cache_aware: an endpoint keeps the requests
	// whose prefix it holds while its in-flight + 1 ≤ factor × mean + slack.
	// Defaults 1.5 and 4 (lb.PoolConfig says why).
	CacheLoadFactor float64
	CacheLoadSlack  float64
	// CacheMinGain ("cache_min_gain"): cache_aware treats cached prefixes
	// that differ by less than this share of the prompt as equal and lets
	// load decide. Default 0.1; 0 to 1.
	CacheMinGain float64
	// FailureThreshold ("failure_threshold") is how many consecutive failures
	// put an endpoint in cool-down; 0 disables passive health. Default 3.
	FailureThreshold int
	// Cooldown ("cooldown_ms") is how long a failing endpoint is skipped
	// before one half-open probe. Default 10 s.
	Cooldown time.Duration
	// Endpoints ("endpoints") are the engine endpoints, in configuration
	// order; at most 512 per pool.
	Endpoints []Endpoint
}

// Endpoint is one engine endpoint. Exactly one of Cluster and Address is set.
type Endpoint struct {
	// Name ("name") identifies the endpoint in metrics, headers and shared
	// data; unique across both pools. Required.
	Name string
	// Cluster ("cluster") is a static Envoy cluster for this engine, reached
	// through the route header.
	Cluster string
	// Address ("address") is the engine's IP:port (IPv6 as [::1]:8000),
	// reached through original_dst_cluster. It must be an IP: ORIGINAL_DST
	// does not resolve names.
	Address string
	// Host ("host") is the engine's host as other engines reach it: SGLang's
	// bootstrap_host, orchestrated mode's remote_host, the default of
	// kv_receiver.host. An IP (IPv6 without brackets) or a DNS name. Default:
	// the IP of Address. Required for cluster prefill endpoints in the
	// sglang and orchestrated modes.
	Host string
	// MetricsCluster ("metrics_cluster") is the cluster /metrics is scraped
	// through. Default: Cluster, or original_dst_cluster for address
	// endpoints (with the original-dst header set to Address).
	MetricsCluster string
	// BootstrapPort ("bootstrap_port") is the SGLang bootstrap port of a
	// prefill endpoint in sglang mode; 0 when absent or null, which is sent as
	// JSON null so the engine applies its own default (8998).
	BootstrapPort int
	// KVReceiver ("kv_receiver") describes where LMCache pushes KV to this
	// decode endpoint; required on every decode endpoint in lmcache mode and
	// nil everywhere else.
	KVReceiver *KVReceiver
}

// KVReceiver is an lmcache decode endpoint's NIXL receiver.
type KVReceiver struct {
	// Host ("host") is the receiver's host (an IP without brackets, or a DNS
	// name). Default: the endpoint's Host.
	Host string
	// InitPorts ("init_ports") has one port per decoder TP rank. Required.
	InitPorts []int
	// AllocPorts ("alloc_ports") has one port per decoder TP rank, as many
	// as InitPorts. Required.
	AllocPorts []int
}

// TPSize is the decoder's tensor-parallel size: how many KV-ready
// notifications (one per rank) make a request's KV complete.
func (r *KVReceiver) TPSize() int { return len(r.InitPorts) }

// Orchestrated holds the orchestrated-mode settings.
type Orchestrated struct {
	// AttachPrefillResponse ("attach_prefill_response") adds the whole prefill
	// answer to the decode body as disagg_prefill_resp. Default false: it
	// doubles the decode body's size for no benefit to stock vLLM.
	AttachPrefillResponse bool
}

// LMCache holds the lmcache-mode settings.
type LMCache struct {
	// KVBridgeCluster ("kvbridge_cluster") is the Envoy cluster of the
	// kvbridge companion service. Default "kvbridge".
	KVBridgeCluster string
	// KVWaitTimeout ("kv_wait_timeout_ms") bounds the wait for the KV-ready
	// notifications after the prefill answered. Default 10 s, as
	// production-stack.
	KVWaitTimeout time.Duration
	// OnKVTimeout ("on_kv_timeout") is "proceed" or "fail". Default
	// "proceed": the decoder can recompute, as production-stack does.
	OnKVTimeout KVTimeoutPolicy
	// TokenizeOn ("tokenize_on") is "prefill" or "decode". Default "prefill",
	// as the reference proxies do; "decode" spreads tokenize load to the
	// usually larger decode pool.
	TokenizeOn TokenizeOn
}

// SGLang holds the sglang-mode settings (none yet).
type SGLang struct{}

// Balancing is the pool's balancer configuration: its settings and its
// endpoints' names, index for index.
func (p *Pool) Balancing() lb.PoolConfig {
	c := lb.PoolConfig{
		RunningWeight:       p.RunningWeight,
		WaitingWeight:       p.WaitingWeight,
		InflightWeight:      p.InflightWeight,
		StatsMaxAge:         p.StatsMaxAge,
		QPSWindow:           p.QPSWindow,
		AffinityPrefixBytes: p.AffinityPrefixBytes,
		AffinityLoadFactor:  p.AffinityLoadFactor,
		CacheLoadFactor:     p.CacheLoadFactor,
		CacheLoadSlack:      p.CacheLoadSlack,
		CacheMinGain:        p.CacheMinGain,
		FailureThreshold:    p.FailureThreshold,
		Cooldown:            p.Cooldown,
		Endpoints:           make([]lb.Endpoint, len(p.Endpoints)),
	}
	c.Strategy, _ = lb.ParseStrategy(string(p.Strategy)) // Parse validated the name
	for i, e := range p.Endpoints {
		c.Endpoints[i] = lb.Endpoint{Name: e.Name}
	}
	return c
}

// Upstream returns where to send a request for e: the cluster for the route
// header (or proxy_http_call), and the value of x-envoy-original-dst-host,
// empty for cluster endpoints.
func (c *Config) Upstream(e *Endpoint) (cluster, originalDstHost string) {
	if e.Address != "" {
		return c.OriginalDstCluster, e.Address
	}
	return e.Cluster, ""
}

// UsesPrefixIndex reports whether routing reads the shared prefix index:
// a cache_aware pool, or threshold_on "uncached".
func (c *Config) UsesPrefixIndex() bool {
	return c.Prefill.Strategy == CacheAware || c.Decode.Strategy == CacheAware || c.ThresholdOn == ThresholdOnUncached
}

// IndexParams is the prefix index's configuration.
func (c *Config) IndexParams() prefix.Params {
	return prefix.Params{BlockBytes: c.PrefixIndex.BlockBytes, Slots: c.PrefixIndex.Slots, TTL: c.PrefixIndex.TTL}
}
