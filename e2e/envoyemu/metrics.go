package envoyemu

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// Custom metrics live in Envoy's stats store under the "wasmcustom."
// namespace and are process-wide: the same name defined in every worker VM is
// one stat (ids are per VM). /stats prints "wasmcustom.<name>"; Prometheus
// output strips the registered namespace and adds no "envoy_" prefix.

// customNamespace is Envoy's CustomStatNamespace for wasm metrics.
const customNamespace = "wasmcustom"

// defaultHistogramBuckets are Envoy's default histogram bucket bounds.
var defaultHistogramBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
	10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// metric is one stat. Counters and gauges hold a value; histograms keep the
// recorded values.
type metric struct {
	kind abispec.MetricType
	name string
	val  atomic.Int64
	mu   sync.Mutex
	obs  []uint64
}

// add is Counter::add / Gauge::add (negative offsets subtract from gauges).
func (m *metric) add(delta int64) { m.val.Add(delta) }

// record is proxy_record_metric: counters add, gauges set, histograms record.
func (m *metric) record(v uint64) {
	switch m.kind {
	case abispec.MetricTypeCounter:
		m.val.Add(int64(v))
	case abispec.MetricTypeGauge:
		m.val.Store(int64(v))
	default:
		m.mu.Lock()
		m.obs = append(m.obs, v)
		m.mu.Unlock()
	}
}

func (m *metric) value() uint64 { return uint64(m.val.Load()) }

func (m *metric) observations() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.obs)
}

type statsStore struct {
	mu      sync.Mutex
	metrics map[string]*metric // key: kind + name
}

func (s *statsStore) metric(kind abispec.MetricType, name string) *metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metrics == nil {
		s.metrics = map[string]*metric{}
	}
	key := strconv.Itoa(int(kind)) + name
	m := s.metrics[key]
	if m == nil {
		m = &metric{kind: kind, name: name}
		s.metrics[key] = m
	}
	return m
}

func (s *statsStore) lookup(kind abispec.MetricType, name string) (*metric, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.metrics[strconv.Itoa(int(kind))+name]
	return m, ok
}

func (s *statsStore) sorted() []*metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*metric, 0, len(s.metrics))
	for _, m := range s.metrics {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// extraStat is a host stat shown next to the custom metrics (name → value).
type extraStat struct {
	name  string
	kind  abispec.MetricType
	value uint64
}

// renderText is GET /stats: "name: value" lines sorted by name.
func renderText(ms []*metric, extra []extraStat) string {
	lines := make([]string, 0, len(ms)+len(extra))
	for _, m := range ms {
		name := customNamespace + "." + m.name
		if m.kind == abispec.MetricTypeHistogram {
			lines = append(lines, name+": "+histogramSummary(m.observations()))
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %d", name, int64(m.value())))
	}
	for _, e := range extra {
		lines = append(lines, fmt.Sprintf("%s: %d", e.name, e.value))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// histogramSummary mimics Envoy's text form: quantiles as (interval, cumulative);
// the emulator has no flush intervals, so the interval part is "nan".
func histogramSummary(obs []uint64) string {
	if len(obs) == 0 {
		return "No recorded values"
	}
	slices.Sort(obs)
	qs := []float64{0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}
	parts := make([]string, len(qs))
	for i, q := range qs {
		idx := int(math.Ceil(q/100*float64(len(obs)))) - 1
		idx = max(0, min(idx, len(obs)-1))
		parts[i] = fmt.Sprintf("P%s(nan,%d)", strconv.FormatFloat(q, 'f', -1, 64), obs[idx])
	}
	return strings.Join(parts, " ")
}

// renderPrometheus is GET /stats/prometheus for the custom metrics.
func renderPrometheus(ms []*metric, extra []extraStat) string {
	var b strings.Builder
	for _, m := range ms {
		name := promName(m.name)
		switch m.kind {
		case abispec.MetricTypeCounter:
			fmt.Fprintf(&b, "# TYPE %s counter\n%s{} %d\n", name, name, m.value())
		case abispec.MetricTypeGauge:
			fmt.Fprintf(&b, "# TYPE %s gauge\n%s{} %d\n", name, name, int64(m.value()))
		default:
			obs := m.observations()
			fmt.Fprintf(&b, "# TYPE %s histogram\n", name)
			var sum uint64
			for _, o := range obs {
				sum += o
			}
			for _, le := range defaultHistogramBuckets {
				n := 0
				for _, o := range obs {
					if float64(o) <= le {
						n++
					}
				}
				fmt.Fprintf(&b, "%s_bucket{le=\"%s\"} %d\n", name, strconv.FormatFloat(le, 'f', -1, 64), n)
			}
			fmt.Fprintf(&b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum{} %d\n%s_count{} %d\n", name, len(obs), name, sum, name, len(obs))
		}
	}
	for _, e := range extra {
		name := "envoy_" + promName(e.name)
		kind := "counter"
		if e.kind == abispec.MetricTypeGauge {
			kind = "gauge"
		}
		fmt.Fprintf(&b, "# TYPE %s %s\n%s{} %d\n", name, kind, name, e.value)
	}
	return b.String()
}

// promName is Envoy's sanitizeName: characters outside [a-zA-Z0-9_] become '_'.
func promName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}
