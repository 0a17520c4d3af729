package lb

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestParseMetricsFixtures(t *testing.T) {
	cases := []struct {
		file string
		want EngineStats
	}{
		// Two data-parallel engines: summed over the engine label.
		{"vllm_dp2.txt", EngineStats{Running: 12, Waiting: 2, KVCacheUsage: 0.6125}},
		{"sglang.txt", EngineStats{Running: 11, Waiting: 4, KVCacheUsage: 0.37}},
	}
	for _, c := range cases {
		text, err := os.ReadFile(filepath.Join("testdata", "metrics", c.file))
		if err != nil {
			t.Fatal(err)
		}
		for _, variant := range []struct {
			name string
			text []byte
		}{{"LF", text}, {"CRLF", bytes.ReplaceAll(text, []byte("\n"), []byte("\r\n"))}} {
			got, err := ParseMetrics(variant.text)
			if err != nil || !closeStats(got, c.want) {
				t.Errorf("%s %s: ParseMetrics = %+v, %v; want %+v", c.file, variant.name, got, err, c.want)
			}
		}
	}
}

func TestParseMetricsLines(t *testing.T) {
	cases := []struct {
		name string
		text string
		want EngineStats
		err  error
	}{
		{"no labels", "vllm:num_requests_running 3\n", EngineStats{Running: 3}, nil},
		{"no trailing newline", "vllm:num_requests_waiting 4", EngineStats{Waiting: 4}, nil},
		{"two models summed", `vllm:num_requests_running{model_name="a",engine="0"} 1
vllm:num_requests_running{model_name="b",engine="0"} 2
`, EngineStats{Running: 3}, nil},
		{"timestamp ignored", "vllm:num_requests_running{engine=\"0\"} 5 1732275600000\n", EngineStats{Running: 5}, nil},
		{"exemplar ignored", "vllm:num_requests_running 5 # {trace_id=\"x\"} 1\n", EngineStats{Running: 5}, nil},
		{"escaped quotes and braces in labels", `vllm:num_requests_running{model_name="we\"ird} \\ name\n",engine="0"} 6` + "\n", EngineStats{Running: 6}, nil},
		{"trailing comma", `vllm:num_requests_running{engine="0",} 2`, EngineStats{Running: 2}, nil},
		{"blanks around tokens", "  \tvllm:num_requests_running { engine = \"0\" }\t 2 \n", EngineStats{Running: 2}, nil},
		{"quoted utf-8 name", `{"vllm:num_requests_running", engine="0"} 4` + "\n" + `{"sglang:num_queue_reqs"} 1`, EngineStats{Running: 4, Waiting: 1}, nil},
		{"NaN, Inf and negative skipped", `vllm:num_requests_running{engine="0"} NaN
vllm:num_requests_running{engine="1"} +Inf
vllm:num_requests_running{engine="2"} -Inf
vllm:num_requests_running{engine="3"} -1
vllm:num_requests_running{engine="4"} 2
`, EngineStats{Running: 2}, nil},
		{"scientific notation", "vllm:num_requests_waiting 1.5e1\n", EngineStats{Waiting: 15}, nil},
		{"similar names not matched", `vllm:num_requests_running_total 100
vllm:num_requests_runningx 100
xvllm:num_requests_running 100
vllm:num_requests_waiting_by_reason{reason="capacity"} 100
vllm:num_requests_running 1
`, EngineStats{Running: 1}, nil},
		{"malformed lines skipped", `vllm:num_requests_running{engine="0" 9
vllm:num_requests_running{engine=0} 9
vllm:num_requests_running{engine="0"}9
vllm:num_requests_running{"x", "y"} 9
{engine="0"} 9
vllm:num_requests_running{"vllm:num_requests_running"} 9
vllm:num_requests_running abc
vllm:num_requests_running
vllm:num_requests_running{engine="0"} 2
`, EngineStats{Running: 2}, nil},
		{"kv usage alone is not enough", "vllm:kv_cache_usage_perc 0.5\n", EngineStats{}, ErrNoEngineMetrics},
		{"only NaN", "sglang:num_running_reqs NaN\n", EngineStats{}, ErrNoEngineMetrics},
		{"empty", "", EngineStats{}, ErrNoEngineMetrics},
		{"html", "<html><body>404 page not found</body></html>", EngineStats{}, ErrNoEngineMetrics},
		{"only comments", "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n", EngineStats{}, ErrNoEngineMetrics},
		{"sum capped", "vllm:num_requests_running 1.7e308\nvllm:num_requests_running 1.7e308\n", EngineStats{Running: math.MaxFloat64}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseMetrics([]byte(c.text))
			if !errors.Is(err, c.err) || !closeStats(got, c.want) {
				t.Fatalf("ParseMetrics = %+v, %v; want %+v, %v", got, err, c.want, c.err)
			}
		})
	}
}

func closeStats(a, b EngineStats) bool {
	near := func(x, y float64) bool { return x == y || math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return near(a.Running, b.Running) && near(a.Waiting, b.Waiting) && near(a.KVCacheUsage, b.KVCacheUsage)
}

func FuzzParseMetrics(f *testing.F) {
	for _, name := range []string{"vllm_dp2.txt", "sglang.txt"} {
		text, err := os.ReadFile(filepath.Join("testdata", "metrics", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(text)
	}
	f.Add([]byte(`{"vllm:num_requests_running", a="\"}"} 1 2`))
	f.Add([]byte("vllm:num_requests_waiting{a=\"b\\\\\"} NaN\r\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		s, err := ParseMetrics(text)
		for _, x := range [3]float64{s.Running, s.Waiting, s.KVCacheUsage} {
			if !(x >= 0) || math.IsInf(x, 0) {
				t.Fatalf("ParseMetrics(%q) gave %+v", text, s)
			}
		}
		if err != nil && s != (EngineStats{}) {
			t.Fatalf("error %v with stats %+v", err, s)
		}
		if bytes.IndexByte(text, '\r') < 0 {
			crlf, errCRLF := ParseMetrics(bytes.ReplaceAll(text, []byte("\n"), []byte("\r\n")))
			if crlf != s || (err == nil) != (errCRLF == nil) {
				t.Fatalf("CRLF changes the result of %q: %+v,%v vs %+v,%v", text, s, err, crlf, errCRLF)
			}
		}
	})
}
