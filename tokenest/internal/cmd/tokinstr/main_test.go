package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/simd"
)

// TestRun runs the driver on every class and on bad flags.
func TestRun(t *testing.T) {
	for _, c := range []struct {
		args string
		err  string // a substring of the error, or "" for success
	}{
		{args: "-class english -tokens 1024 -method chars4 -n 2"},
		{args: "-class chinese -tokens 1024"},
		{args: "-class code -tokens 1024"},
		{args: "-class chat -tokens 1024 -method chars4"},
		{args: "-class escaped -tokens 1024"},
		{args: "-class klingon", err: `unknown class "klingon"`},
		{args: "-method chars5", err: "chars5"},
		{args: "-samples /nonexistent", err: "no such file"},
		{args: "-class russian"},
		{args: "-bogus", err: "bogus"},
	} {
		var out bytes.Buffer
		args := strings.Fields(c.args)
		if !strings.Contains(c.args, "-samples") {
			args = append(args, "-samples", "../../../testdata/samples")
		}
		err := run(args, &out)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.args, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one with %q", c.args, err, c.err)
		case c.err == "":
			if n, e := strconv.Atoi(strings.TrimSpace(out.String())); e != nil || n < 1024 {
				t.Errorf("%s: printed %q, want the body's length", c.args, out.String())
			}
		}
	}
}

// TestPaths runs the timing of the two kernel paths briefly: a line with
// both paths' speeds, or SKIPPED where there is no AVX-512.
func TestPaths(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-paths", "-class", "english", "-tokens", "1024", "-rounds", "4", "-n", "2", "-samples", "../../../testdata/samples"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := "avx512 faster in "
	if !simd.Available512 {
		want = "SKIPPED"
	}
	if !strings.Contains(out.String(), want) || !strings.HasPrefix(out.String(), "english default: ") {
		t.Errorf("printed %q, want a line with %q", out.String(), want)
	}
	if !simd.Available512 {
		return
	}
	if err := run([]string{"-paths", "-rounds", "0", "-tokens", "1024", "-samples", "../../../testdata/samples"}, &out); err == nil {
		t.Error("-rounds 0: no error")
	}
}
