package plugin

import (
	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
)

// Metric names follow Envoy's stat naming (lower case, dot-separated, the
// varying part last). Envoy exposes them as wasmcustom.<name> on /stats and
// without the prefix on /stats/prometheus (pdroute_requests_disagg, …).
const (
	metricPrefix = "pdroute."
)

// Request paths, the label of pdroute.requests.<path> and of the
// x-pdroute-path debug header.
const (
	pathPassthrough = "passthrough"
	pathDirect      = "direct"
	pathDisagg      = "disagg"
	pathFallback    = "fallback"
	// pathRelayed: the prefill's 4xx went back to the client.
	pathRelayed = "relayed"
	// pathError: the filter answered with an error of its own (400, 413,
	// 502, 503, 504, 500) before the request took another path.
	pathError = "error"
)

// requestPaths are the labels of pdroute.requests.<path>, in the order of
// metrics.requests.
var requestPaths = [...]string{pathPassthrough, pathDirect, pathDisagg, pathFallback, pathRelayed, pathError}

// metrics are defined once per root in proxy_on_configure. The labelled
// counters are arrays, not maps: a request counts without the runtime's map
// code.
type metrics struct {
	// requests are by requestPaths (countRequest)
	requests        [len(requestPaths)]abi.MetricCounter
	prefillFailures [config.PrefillBadAnswer + 1]abi.MetricCounter
	local4xx        abi.MetricCounter
	local5xx        abi.MetricCounter
	sanitized       abi.MetricCounter
	prefillLatency  abi.MetricHistogram
	tokens          abi.MetricHistogram
	toolHits        abi.MetricCounter // tool definitions the root's cache held
	toolMisses      abi.MetricCounter // and those it did not
	// lmcache
	kvReady       abi.MetricCounter
	kvTimeout     abi.MetricCounter
	kvWait        abi.MetricHistogram
	kvPollErrors  abi.MetricCounter
	waitingGauge  abi.MetricGauge
	scrapeErrors  abi.MetricCounter
	scrapeSuccess abi.MetricCounter
	// ways counts handled requests by the way they took (route_at.body
	// counts those that paused for the body; a request a tick continued
	// counts in both); wayWithheld counts the times this VM found that
	// Envoy withholds the body of a paused request.
	// (countWay)
	wayBody, wayHeaders abi.MetricCounter
	wayWithheld         abi.MetricCounter
}

var prefillFailureOutcomes = []config.PrefillOutcome{
	config.PrefillRejected, config.PrefillServerError, config.PrefillReset,
	config.PrefillTimeout, config.PrefillNoEndpoint, config.PrefillBadAnswer,
}

func defineMetrics(mode config.Mode) *metrics {
	m := &metrics{}
	for i, p := range requestPaths {
		m.requests[i] = abi.DefineCounterMetric(metricPrefix + "requests." + p)
	}
	for _, o := range prefillFailureOutcomes {
		m.prefillFailures[o] = abi.DefineCounterMetric(metricPrefix + "prefill_failures." + o.String())
	}
	m.wayBody = abi.DefineCounterMetric(metricPrefix + "route_at.body")
	m.wayHeaders = abi.DefineCounterMetric(metricPrefix + "route_at.headers")
	m.wayWithheld = abi.DefineCounterMetric(metricPrefix + "route_at.body_withheld")
	m.local4xx = abi.DefineCounterMetric(metricPrefix + "local_replies.4xx")
	m.local5xx = abi.DefineCounterMetric(metricPrefix + "local_replies.5xx")
	m.sanitized = abi.DefineCounterMetric(metricPrefix + "sanitized_requests")
	m.prefillLatency = abi.DefineHistogramMetric(metricPrefix + "prefill_latency_ms")
	m.tokens = abi.DefineHistogramMetric(metricPrefix + "estimated_tokens")
	m.toolHits = abi.DefineCounterMetric(metricPrefix + "tool_cache.hits")
	m.toolMisses = abi.DefineCounterMetric(metricPrefix + "tool_cache.misses")
	m.scrapeSuccess = abi.DefineCounterMetric(metricPrefix + "stats_scrapes.ok")
	m.scrapeErrors = abi.DefineCounterMetric(metricPrefix + "stats_scrapes.error")
	if mode == config.ModeLMCache {
		m.kvReady = abi.DefineCounterMetric(metricPrefix + "kv_wait.ready")
		m.kvTimeout = abi.DefineCounterMetric(metricPrefix + "kv_wait.timeout")
		m.kvPollErrors = abi.DefineCounterMetric(metricPrefix + "kv_wait.poll_errors")
		m.kvWait = abi.DefineHistogramMetric(metricPrefix + "kv_wait_ms")
		m.waitingGauge = abi.DefineGaugeMetric(metricPrefix + "kv_wait.waiting")
	}
	return m
}

// countRequest counts a request that took path (one of requestPaths).
func (m *metrics) countRequest(path string) {
	for i, p := range requestPaths {
		if p == path {
			m.requests[i].Increment(1)
			return
		}
	}
}

// countWay counts a handled request by the way it took: config.RouteAtBody
// or config.RouteAtHeaders.
func (m *metrics) countWay(way config.RouteAt) {
	switch way {
	case config.RouteAtBody:
		m.wayBody.Increment(1)
	case config.RouteAtHeaders:
		m.wayHeaders.Increment(1)
	}
}

// toolCache counts the lookups of tool definitions of one estimate: the
// cache's counts after it less those before.
func (m *metrics) toolCache(hits0, misses0, hits1, misses1 uint64) {
	if hits1 > hits0 {
		m.toolHits.Increment(hits1 - hits0)
	}
	if misses1 > misses0 {
		m.toolMisses.Increment(misses1 - misses0)
	}
}

// localReply counts an answer the filter made itself, by status class.
func (m *metrics) localReply(status int) {
	switch {
	case status >= 500:
		m.local5xx.Increment(1)
	case status >= 400:
		m.local4xx.Increment(1)
	}
}
