// Command tokcalib builds and measures tokenest's accuracy data.
//
//	tokcalib samples [-dir tokenest/testdata/samples] [-n 30]
//	    regenerate the checked-in samples from the installed packages
//	    (see BENCHMARKS.md (token estimation) for the apt-get line) and count their
//	    tokens with cl100k_base and o200k_base;
//	tokcalib report [-dir tokenest/testdata/samples]
//	    print the accuracy table of chars4 and default against both;
//	tokcalib fit [-n 400] [-out tokenest/internal/textmodel/weights.go]
//	    fit the default method's weights on text from the files the samples
//	    do not use, and write them as Go source.
//
// Run it from the repository root. It imports the tokenizer vocabularies,
// so it is a development tool only; the filter never links it.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/pdroute/pdroute/tokenest/internal/calib"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tokcalib:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: tokcalib samples|report|fit [flags]")
	}
	fs := flag.NewFlagSet("tokcalib "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "tokenest/testdata/samples", "sample directory")
	n := fs.Int("n", 0, "samples per class (default 30 for samples, 400 for fit)")
	outFile := fs.String("out", "tokenest/internal/textmodel/weights.go", "fit: weights file to write")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "samples":
		return calib.WriteSampleSet(*dir, or(*n, 30), out)
	case "report":
		set, err := calib.ReadSampleSet(*dir)
		if err != nil {
			return err
		}
		rows, err := calib.Evaluate(set)
		if err != nil {
			return err
		}
		return calib.WriteReport(out, rows)
	case "fit":
		src, err := calib.FitWeights(or(*n, 400), out)
		if err != nil {
			return err
		}
		return os.WriteFile(*outFile, src, 0o644)
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
