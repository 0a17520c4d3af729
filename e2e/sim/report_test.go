package sim

import (
	"os"
	"strings"
	"testing"
)

func TestKneesAndOutputs(t *testing.T) {
	row := func(setup string, rate, ttft, itl float64, failed int) Result {
		return Result{Workload: "w", Setup: setup, Rate: rate, TTFTP90: ttft, ITLP99: itl, Failed: failed}
	}
	r := &Report{Profile: "p", TTFTBoundMs: 1000, ITLBoundMs: 50, Results: []Result{
		row("a", 4, 100, 10, 0), row("a", 8, 900, 60, 0), row("a", 16, 1200, 10, 0),
		// Under the bound again at 16 does not count: the knee is the first crossing.
		row("b", 4, 1100, 10, 0), row("b", 8, 500, 10, 0), row("b", 16, 500, 10, 0),
		row("c", 16, 500, 10, 0), row("c", 4, 500, 10, 0), row("c", 8, 500, 10, 3),
	}}
	r.ComputeKnees()
	want := map[string][2]float64{"a": {8, 4}, "b": {0, 0}, "c": {4, 4}}
	for _, k := range r.Knees {
		if w := want[k.Setup]; k.RateRPS != w[0] || k.JointRPS != w[1] {
			t.Errorf("%s: knee %v joint %v, want %v", k.Setup, k.RateRPS, k.JointRPS, w)
		}
	}
	dir := t.TempDir()
	files, err := r.WriteAll(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || !strings.HasSuffix(files[2], "ttft-p90-w.png") {
		t.Fatalf("files %v", files)
	}
	png, _ := os.ReadFile(files[2])
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Errorf("plot is %d bytes", len(png))
	}
	md, _ := os.ReadFile(files[0])
	if !strings.Contains(string(md), "| a | 8 | 4 |") {
		t.Errorf("markdown knees:\n%s", md)
	}
}
