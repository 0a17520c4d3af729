package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRunReport(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"report", "-dir", "../../../testdata/samples"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 11 || !strings.HasPrefix(lines[2], "| english | 30 |") {
		t.Errorf("report:\n%s", out.String())
	}
	for _, args := range [][]string{nil, {"dance"}, {"report", "-bogus"}} {
		if err := run(args, &out); err == nil {
			t.Errorf("run(%q): no error", args)
		}
	}
}
