package abi

import "github.com/pdroute/pdroute/filter/abi/abispec"

// Metric operations never panic and never fail a request: a host error is
// logged and the operation dropped. The zero value of each metric type is a
// valid no-op metric, so a metric that failed to define (already logged) or
// was never defined costs nothing.
type metric struct {
	id      uint32
	defined bool
}

// MetricCounter is a monotonically increasing counter (Envoy prefixes the
// name with "wasmcustom."). The zero value is a no-op.
type MetricCounter metric

// MetricGauge is a value that goes up and down. The zero value is a no-op.
type MetricGauge metric

// MetricHistogram records a distribution of values. The zero value is a no-op.
type MetricHistogram metric

// DefineCounterMetric defines (or finds) counter name. Define metrics once,
// in OnPluginStart: names are looked up on the host at each definition.
func DefineCounterMetric(name string) MetricCounter {
	return MetricCounter(defineMetricLogged(abispec.MetricTypeCounter, name))
}

// DefineGaugeMetric defines (or finds) gauge name.
func DefineGaugeMetric(name string) MetricGauge {
	return MetricGauge(defineMetricLogged(abispec.MetricTypeGauge, name))
}

// DefineHistogramMetric defines (or finds) histogram name.
func DefineHistogramMetric(name string) MetricHistogram {
	return MetricHistogram(defineMetricLogged(abispec.MetricTypeHistogram, name))
}

func defineMetricLogged(t abispec.MetricType, name string) metric {
	id, err := defineMetric(t, name)
	if err != nil {
		LogErrorf("pdroute: define metric %q: %v", name, err)
		return metric{}
	}
	return metric{id: id, defined: true}
}

// Increment adds offset to the counter. Offset 0 is skipped: Envoy rejects it.
func (m MetricCounter) Increment(offset uint64) {
	if m.defined && offset > 0 {
		logMetricError(m.id, addMetric(abispec.MetricTypeCounter, m.id, int64(offset)))
	}
}

// Value returns the counter's value in this process (0 if undefined).
func (m MetricCounter) Value() uint64 {
	return metricValue(metric(m), abispec.MetricTypeCounter)
}

// Add adds offset (which may be negative) to the gauge.
func (m MetricGauge) Add(offset int64) {
	if m.defined && offset != 0 {
		logMetricError(m.id, addMetric(abispec.MetricTypeGauge, m.id, offset))
	}
}

// Value returns the gauge's value (0 if undefined).
func (m MetricGauge) Value() int64 {
	return int64(metricValue(metric(m), abispec.MetricTypeGauge))
}

// Record records value in the histogram.
func (m MetricHistogram) Record(value uint64) {
	if m.defined {
		logMetricError(m.id, recordMetric(m.id, value))
	}
}

// Value returns what the host reports for the histogram. Envoy answers
// BadArgument for histograms, so this is 0 there (logged).
func (m MetricHistogram) Value() uint64 {
	return metricValue(metric(m), abispec.MetricTypeHistogram)
}

func metricValue(m metric, t abispec.MetricType) uint64 {
	if !m.defined {
		return 0
	}
	v, err := getMetric(t, m.id)
	logMetricError(m.id, err)
	return v
}

func logMetricError(id uint32, err error) {
	if err != nil {
		LogErrorf("pdroute: metric %d: %v", id, err)
	}
}
