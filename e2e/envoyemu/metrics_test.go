package envoyemu

import (
	"testing"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

func TestRenderStats(t *testing.T) {
	var s statsStore
	s.metric(abispec.MetricTypeCounter, "req.total").add(3)
	s.metric(abispec.MetricTypeGauge, "inflight").add(-2)
	h := s.metric(abispec.MetricTypeHistogram, "lat")
	for _, v := range []uint64{1, 7, 700} {
		h.record(v)
	}
	extra := []extraStat{{"wasm.p.vm_reload_success", abispec.MetricTypeCounter, 1}}
	wantText := "wasm.p.vm_reload_success: 1\n" +
		"wasmcustom.inflight: -2\n" +
		"wasmcustom.lat: P0(nan,1) P25(nan,1) P50(nan,7) P75(nan,700) P90(nan,700) P95(nan,700) P99(nan,700) P99.5(nan,700) P99.9(nan,700) P100(nan,700)\n" +
		"wasmcustom.req.total: 3\n"
	if got := renderText(s.sorted(), extra); got != wantText {
		t.Errorf("text:\n%s\nwant:\n%s", got, wantText)
	}
	wantProm := "# TYPE inflight gauge\ninflight{} -2\n" +
		"# TYPE lat histogram\n" +
		"lat_bucket{le=\"0.5\"} 0\nlat_bucket{le=\"1\"} 1\nlat_bucket{le=\"5\"} 1\nlat_bucket{le=\"10\"} 2\n" +
		"lat_bucket{le=\"25\"} 2\nlat_bucket{le=\"50\"} 2\nlat_bucket{le=\"100\"} 2\nlat_bucket{le=\"250\"} 2\n" +
		"lat_bucket{le=\"500\"} 2\nlat_bucket{le=\"1000\"} 3\nlat_bucket{le=\"2500\"} 3\nlat_bucket{le=\"5000\"} 3\n" +
		"lat_bucket{le=\"10000\"} 3\nlat_bucket{le=\"30000\"} 3\nlat_bucket{le=\"60000\"} 3\nlat_bucket{le=\"300000\"} 3\n" +
		"lat_bucket{le=\"600000\"} 3\nlat_bucket{le=\"1800000\"} 3\nlat_bucket{le=\"3600000\"} 3\n" +
		"lat_bucket{le=\"+Inf\"} 3\nlat_sum{} 708\nlat_count{} 3\n" +
		"# TYPE req_total counter\nreq_total{} 3\n" +
		"# TYPE envoy_wasm_p_vm_reload_success counter\nenvoy_wasm_p_vm_reload_success{} 1\n"
	if got := renderPrometheus(s.sorted(), extra); got != wantProm {
		t.Errorf("prometheus:\n%s\nwant:\n%s", got, wantProm)
	}
	if got := histogramSummary(nil); got != "No recorded values" {
		t.Errorf("empty histogram %q", got)
	}
}
