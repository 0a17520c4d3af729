package kvbridge

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is the service's Prometheus registry. Counters the service keeps
// anyway (atomics, store fields) are exported through Func collectors so
// that Stats and /metrics read the same values.
type metrics struct {
	registry    *prometheus.Registry
	wakeLatency prometheus.Histogram
	waits       *prometheus.CounterVec
	connections *prometheus.CounterVec
}

func newMetrics(s *Service) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		wakeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvbridge_wake_latency_seconds",
			Help: "Time from a notification waking a waiting long-poll to its answer being written.",
			// 25µs to 1s: a wake is normally tens of microseconds; the tail
			// shows scheduling stalls.
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
		}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvbridge_waits_total",
			Help: "HTTP wait requests by result: ready, timeout, pending (a slice of a longer wait ended with ids pending; the caller polls again), canceled (client left), shutdown, rejected (too many waiters), bad_request.",
		}, []string{"result"}),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvbridge_zmq_connections_total",
			Help: "ZMQ connections by result: accepted (handshake done), rejected (shutting down), handshake_failed, evicted (least recently active peer, closed for a new one at the peer limit), idle_timeout.",
		}, []string{"result"}),
	}
	counter := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, v)
	}
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v)
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.wakeLatency, m.waits, m.connections,
		counter("kvbridge_notifications_received_total", "KV-ready notifications accepted.",
			func() float64 { return float64(s.received.Load()) }),
		counter("kvbridge_frames_malformed_total", "ZMQ frames or messages dropped as malformed.",
			func() float64 { return float64(s.malformed.Load()) }),
		counter("kvbridge_frames_unknown_tag_total", "Well-formed msgpack maps whose type tag is not a KV-ready notification.",
			func() float64 { return float64(s.unknownTag.Load()) }),
		counter("kvbridge_entries_evicted_total", "Entries evicted, oldest first, at the max-entries cap.",
			func() float64 { return float64(s.store.stats().evicted) }),
		counter("kvbridge_entries_expired_total", "Entries removed after their TTL.",
			func() float64 { return float64(s.store.stats().expired) }),
		gauge("kvbridge_entries", "Request ids held.",
			func() float64 { return float64(s.store.stats().entries) }),
		gauge("kvbridge_waiters", "HTTP long-poll requests waiting.",
			func() float64 { return float64(s.store.stats().waiters) }),
		gauge("kvbridge_zmq_peers", "ZMQ peer connections open.",
			func() float64 { return float64(s.recv.peerCount()) }),
		gauge("kvbridge_zmq_max_peers", "The peer limit (--zmq-max-peers); at it, new connections evict the least recently active peer.",
			func() float64 { return float64(s.recv.maxPeers) }),
	)
	for _, r := range []result{resultReady, resultTimeout, resultPending, resultCanceled, resultShutdown, resultRejected, resultBad} {
		m.waits.WithLabelValues(string(r))
	}
	for _, r := range connectionResults {
		m.connections.WithLabelValues(string(r))
	}
	return m
}
