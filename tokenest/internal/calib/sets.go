package calib

import (
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// Seeds of the two sample sets; the checked-in set and the fitting set also
// draw from disjoint files (IsTestFile).
const (
	testSeed = 20261122
	fitSeed  = 7
)

// Sample windows: log-uniform lengths in bytes.
const (
	testMinLen, testMaxLen = 100, 3000
	fitMinLen, fitMaxLen   = 100, 6000
)

// WriteSampleSet regenerates n samples of every class whose sources are
// installed, measures them, and writes one JSONL file per class into dir.
func WriteSampleSet(dir string, n int, log io.Writer) error {
	tk, err := NewTokenizers()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, class := range append(append([]string{}, Required...), Informational...) {
		g := NewGenerator(testSeed, true, testMinLen, testMaxLen)
		if class != ClassJSON && class != ClassChat && !g.Available(class) {
			fmt.Fprintf(log, "%-9s skipped: no source files installed\n", class)
			continue
		}
		want := n
		if slices.Contains(Informational, class) {
			want = n * 2 / 3
		}
		samples := make([]Sample, 0, want)
		for len(samples) < want {
			var s Sample
			if class == ClassChat {
				s.Body = g.Chat()
			} else if s.Text = g.Text(class); s.Text == "" {
				return fmt.Errorf("%s: no text could be drawn", class)
			}
			if err := tk.Measure(&s); err != nil {
				return fmt.Errorf("%s: %w", class, err)
			}
			samples = append(samples, s)
		}
		if err := WriteSamples(SampleFile(dir, class), samples); err != nil {
			return err
		}
		fmt.Fprintf(log, "%-9s %d samples\n", class, len(samples))
	}
	return nil
}

// ReadSampleSet reads every class file present in dir.
func ReadSampleSet(dir string) (map[string][]Sample, error) {
	set := map[string][]Sample{}
	for _, class := range append(append([]string{}, Required...), Informational...) {
		s, err := ReadSamples(SampleFile(dir, class))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		set[class] = s
	}
	return set, nil
}

// FitWeights draws n texts per class from the fitting files, fits the
// default method's weights on all their pre-tokens (every class weighted
// equally), and returns weights.go.
func FitWeights(n int, log io.Writer) ([]byte, error) {
	tk, err := NewTokenizers()
	if err != nil {
		return nil, err
	}
	f := NewFitter(tk)
	g := NewGenerator(fitSeed, false, fitMinLen, fitMaxLen)
	classes := 0
	for _, class := range append(append([]string{ClassOtherLatin}, Required...), Informational...) {
		if class == ClassChat {
			continue // chat text is drawn from the other classes
		}
		if class != ClassJSON && !g.Available(class) {
			continue
		}
		start := time.Now()
		texts := make([]string, 0, n)
		pieces := 0
		for range n {
			t := g.Text(class)
			texts = append(texts, t)
			p, _, _ := Pieces(t)
			pieces += len(p)
		}
		w := 1e5 / float64(max(pieces, 1)) // every class carries the same weight
		for _, t := range texts {
			if err := f.Add(t, w); err != nil {
				return nil, err
			}
		}
		classes++
		fmt.Fprintf(log, "%-9s %d texts, %d pieces (%s)\n", class, n, pieces, time.Since(start).Round(time.Millisecond))
	}
	prior := Prior()
	w := f.Solve(&prior, 1)
	return WeightsFile(w, fmt.Sprintf("%d texts of each of %d classes drawn by tokcalib fit -n %d", n, classes, n))
}
