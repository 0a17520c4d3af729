package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Reading stats goes through the admin API for both proxies, so a scenario
// asserts the same thing on the emulator and on real Envoy. Custom metrics
// live under Envoy's "wasmcustom." namespace on /stats; on
// /stats/prometheus the namespace is stripped and dots become underscores.

// ErrNoStat is returned for a stat the proxy does not have (a misspelt
// name, or a metric the plugin never defined).
var ErrNoStat = errors.New("stack: no such stat")

// customNamespace is Envoy's namespace for wasm-defined metrics.
const customNamespace = "wasmcustom."

// maxAdminBody bounds an admin answer the stack reads.
const maxAdminBody = 16 << 20

// Stat returns the counter or gauge the plugin defined as name (for example
// "pdroute.requests.disagg"), from admin /stats.
func (s *Stack) Stat(ctx context.Context, name string) (int64, error) {
	body, err := s.admin(ctx, "/stats")
	if err != nil {
		return 0, err
	}
	v, ok := ParseStats(body)[customNamespace+name]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrNoStat, name)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stack: stat %s: %q is not a counter or gauge value", name, v)
	}
	return n, nil
}

// Histogram is a histogram's recorded values so far.
type Histogram struct {
	Count uint64
	Sum   float64
}

// Histogram returns the histogram the plugin defined as name, from admin
// /stats/prometheus. Real Envoy updates histograms at each stats flush
// (stats_flush_interval, 5 s by default), so poll for a change.
func (s *Stack) Histogram(ctx context.Context, name string) (Histogram, error) {
	body, err := s.admin(ctx, "/stats/prometheus")
	if err != nil {
		return Histogram{}, err
	}
	h, ok := ParsePrometheusHistogram(body, PrometheusName(name))
	if !ok {
		return Histogram{}, fmt.Errorf("%w: histogram %s", ErrNoStat, name)
	}
	return h, nil
}

func (s *Stack) admin(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.AdminURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stack: admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return nil, fmt.Errorf("stack: admin %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stack: admin %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// ParseStats reads Envoy's /stats text format: one "name: value" per line.
// The value is kept as text (counters and gauges are integers, histograms
// a list of quantiles). Lines without ": " are skipped; a repeated name
// keeps its first value.
func ParseStats(text []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(text), "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok || name == "" {
			continue
		}
		if _, dup := out[name]; !dup {
			out[name] = strings.TrimSpace(value)
		}
	}
	return out
}

// PrometheusName is Envoy's Prometheus name of a custom metric: the name
// with every character outside [a-zA-Z0-9_] turned into '_', and no prefix.
func PrometheusName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
}

// ParsePrometheusHistogram finds the untagged series name_count and
// name_sum in Prometheus text; ok is false when name_count is absent.
func ParsePrometheusHistogram(text []byte, name string) (h Histogram, ok bool) {
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, found := cutSample(line)
		if !found {
			continue
		}
		switch series {
		case name + "_count":
			n, err := strconv.ParseFloat(value, 64)
			if err != nil || n < 0 {
				return Histogram{}, false
			}
			h.Count, ok = uint64(n), true
		case name + "_sum":
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				h.Sum = v
			}
		}
	}
	if !ok {
		return Histogram{}, false
	}
	return h, true
}

// cutSample splits a sample line into its series name (without an empty
// "{}" label set) and its value. Series with labels are not ours.
func cutSample(line string) (series, value string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return "", "", false
	}
	series = strings.TrimSuffix(fields[0], "{}")
	if strings.ContainsAny(series, "{}") {
		return "", "", false
	}
	return series, fields[1], true
}

// DebugState is the plugin's debug_path answer: the pools' shared state
// (the same from every worker VM) and the answering VM's own counts.
type DebugState struct {
	Mode  string                     `json:"mode"`
	Pools map[string][]DebugEndpoint `json:"pools"`
	// VMStreams and VMKVWaiting are the answering VM's live streams and
	// lmcache streams waiting for KV.
	VMStreams   int `json:"vm_streams"`
	VMKVWaiting int `json:"vm_kv_waiting"`
	// Discovery is the discovered pools' table the answering VM routes by
	// (nil without discovery): the companion's version, the table's
	// generation, and the departed endpoints still draining per pool.
	Discovery *struct {
		Version  int64          `json:"version"`
		Gen      uint64         `json:"gen"`
		Draining map[string]int `json:"draining"`
	} `json:"discovery"`
}

// DebugEndpoint is one endpoint's shared balancer state; the fields mirror
// the plugin's debug JSON (in-flight count, passive health, the last engine
// stats and their age in ms, -1 when never scraped).
type DebugEndpoint struct {
	Name                string  `json:"name"`
	Health              string  `json:"health"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	Inflight            uint32  `json:"inflight"`
	RecentRequests      uint32  `json:"recent_requests"`
	EngineRunning       float64 `json:"engine_running"`
	EngineWaiting       float64 `json:"engine_waiting"`
	EngineKVCacheUsage  float64 `json:"engine_kv_cache_usage"`
	StatsAgeMS          int64   `json:"stats_age_ms"`
}

// Inflight sums the in-flight counts of every endpoint of both pools.
func (d DebugState) Inflight() int {
	n := 0
	for _, eps := range d.Pools {
		for _, e := range eps {
			n += int(e.Inflight)
		}
	}
	return n
}

// Endpoint returns the state of the endpoint named name.
func (d DebugState) Endpoint(name string) (DebugEndpoint, bool) {
	for _, eps := range d.Pools {
		for _, e := range eps {
			if e.Name == name {
				return e, true
			}
		}
	}
	return DebugEndpoint{}, false
}

// Debug fetches the plugin's debug_path through the listener.
func (s *Stack) Debug(ctx context.Context) (DebugState, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+DebugPath, nil)
	if err != nil {
		return DebugState{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return DebugState{}, fmt.Errorf("stack: debug path: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return DebugState{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return DebugState{}, fmt.Errorf("stack: debug path: %d %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var d DebugState
	if err := json.Unmarshal(body, &d); err != nil {
		return DebugState{}, fmt.Errorf("stack: debug path: %w: %s", err, body)
	}
	return d, nil
}
