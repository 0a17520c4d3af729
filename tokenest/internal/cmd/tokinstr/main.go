// Command tokinstr runs tokenest.Estimate on one of the benchmark bodies a
// given number of times and prints the body's length, for counting the
// instructions an estimate executes per byte under valgrind (cachegrind):
// the difference between runs with -n 21 and -n 1, over twenty calls and
// the length, is exact and repeatable where wall time on a shared machine
// is not. `.ci/bench instr` does that for every class, both methods and two
// amd64 levels.
//
//	tokinstr [-samples tokenest/testdata/samples] [-class english] [-tokens 8192] [-method default] [-n 1]
//	tokinstr -paths [-rounds 200] [-n 5] [other flags as above]
//
// With -paths it times instead: Estimate with the AVX-512 kernels and
// without them (the AVX2 ones), n calls of each by turns for a number of
// rounds in one process, so that this machine's swings in speed hit both
// alike, and prints each path's MB/s and the median of the rounds' time
// ratios. valgrind runs the AVX2 path only (it does not emulate AVX-512),
// so this is how the AVX-512 path is judged. Without AVX-512 it prints
// SKIPPED. `.ci/bench paths` runs it for every class and both methods.
//
// Classes: english, chinese, code (string prompts, as BenchmarkEstimate),
// chat (as BenchmarkEstimateChat), escaped (the Chinese prompt with every
// non-ASCII character \u-escaped, as BenchmarkEstimateEscaped), and any
// other class of the samples (german, russian, json…: string prompts, as
// BenchmarkEstimateLanguages).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/pdroute/pdroute/tokenest"
	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
	"github.com/pdroute/pdroute/tokenest/internal/simd"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tokinstr:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	// No collection at all (the body is a few megabytes at most, and
	// Estimate allocates nothing), so that runs with different -n differ
	// by the calls alone. Not runtime.GC() first: under valgrind, which
	// runs one thread at a time, its waits spin for billions of
	// instructions.
	debug.SetGCPercent(-1)
	fs := flag.NewFlagSet("tokinstr", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("samples", "tokenest/testdata/samples", "the checked-in samples")
	class := fs.String("class", "english", "english, chinese, code, chat or escaped")
	tokens := fs.Int("tokens", 8192, "cl100k tokens of the body")
	method := fs.String("method", "default", "chars4 or default")
	n := fs.Int("n", 1, "calls of Estimate (with -paths: per path and round; default 5)")
	paths := fs.Bool("paths", false, "time the AVX-512 path against the AVX2 one instead")
	rounds := fs.Int("rounds", 200, "rounds of -paths")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := tokenest.ParseMethod(*method)
	if err != nil {
		return err
	}
	var body []byte
	path := "/v1/completions"
	switch *class {
	case "chat":
		body, err = benchdata.Chat(*dir, *tokens)
		path = "/v1/chat/completions"
	case "escaped":
		body, err = benchdata.Prompt(*dir, "chinese", *tokens)
		body = benchdata.ASCIIOnly(body)
	default:
		// english, chinese, code, or any other class of the samples
		// (german, russian, json…): a string prompt
		body, err = benchdata.Prompt(*dir, *class, *tokens)
		if _, dirErr := os.Stat(*dir); errors.Is(err, iofs.ErrNotExist) && dirErr == nil {
			return fmt.Errorf("unknown class %q (english, chinese, code, chat, escaped, or a class of %s such as german or russian)", *class, *dir)
		}
	}
	if err != nil {
		return err
	}
	if *paths {
		calls := 5
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "n" {
				calls = *n
			}
		})
		return timePaths(out, body, path, m, *class, calls, *rounds)
	}
	for range *n {
		if _, err := tokenest.Estimate(body, path, m); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(out, len(body))
	return err
}

// timePaths times calls estimates of body with the AVX-512 kernels and as
// many without, by turns (which goes first alternates), for rounds rounds,
// and prints a line: the class and method, each path's MB/s at the median
// of its times and at their fastest tenth (the 10th percentile), and the
// median ratio of the rounds' times (AVX2 over AVX-512: above 1 when
// AVX-512 is faster) with the number of rounds it won.
func timePaths(out io.Writer, body []byte, path string, m tokenest.Method, class string, calls, rounds int) error {
	if !simd.Available512 {
		_, err := fmt.Fprintf(out, "%s %s: SKIPPED: no AVX-512 kernels on this machine or build; nothing was timed\n", class, m)
		return err
	}
	if calls < 1 || rounds < 1 {
		return fmt.Errorf("-n and -rounds must be at least 1")
	}
	defer simd.Force512(true)
	var fast, slow, ratios []float64
	for r := range rounds {
		var t [2]float64 // ns per call: AVX-512, AVX2
		for _, on := range []bool{r%2 == 0, r%2 != 0} {
			simd.Force512(on)
			start := time.Now()
			for range calls {
				if _, err := tokenest.Estimate(body, path, m); err != nil {
					return err
				}
			}
			d := float64(time.Since(start).Nanoseconds()) / float64(calls)
			if on {
				t[0] = d
			} else {
				t[1] = d
			}
		}
		fast, slow, ratios = append(fast, t[0]), append(slow, t[1]), append(ratios, t[1]/t[0])
	}
	won := 0
	for _, x := range ratios {
		if x > 1 {
			won++
		}
	}
	mbs := func(ns float64) float64 { return float64(len(body)) / ns * 1e3 }
	_, err := fmt.Fprintf(out, "%s %s: avx512 %.0f MB/s (fastest tenth %.0f), avx2 %.0f MB/s (fastest tenth %.0f), time ratio %.3f, avx512 faster in %d of %d rounds\n",
		class, m, mbs(quantile(fast, 0.5)), mbs(quantile(fast, 0.1)), mbs(quantile(slow, 0.5)), mbs(quantile(slow, 0.1)),
		quantile(ratios, 0.5), won, rounds)
	return err
}

// quantile returns the q-quantile of xs (sorting them), by the nearest rank
// below.
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	return xs[int(q*float64(len(xs)-1))]
}
