// Command tokinstr runs tokenest.Estimate on one of the benchmark bodies a
// given number of times and prints the body's length, for counting the
// instructions an estimate executes per byte under valgrind (cachegrind):
// the difference between runs with -n 21 and -n 1, over twenty calls and
// the length, is exact and repeatable where wall time on a shared machine
// is not. `.ci/bench instr` does that for every class, both methods and two
// amd64 levels.
//
//	tokinstr [-samples tokenest/testdata/samples] [-class english] [-tokens 8192] [-method default] [-n 1]
//
// Classes: english, chinese, code (string prompts, as BenchmarkEstimate),
// chat (as BenchmarkEstimateChat) and escaped (the Chinese prompt with
// every non-ASCII character \u-escaped, as BenchmarkEstimateEscaped).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/pdroute/pdroute/tokenest"
	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
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
	n := fs.Int("n", 1, "calls of Estimate")
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
	case "english", "chinese", "code":
		body, err = benchdata.Prompt(*dir, *class, *tokens)
	default:
		return fmt.Errorf("unknown class %q (english, chinese, code, chat, escaped)", *class)
	}
	if err != nil {
		return err
	}
	for range *n {
		if _, err := tokenest.Estimate(body, path, m); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(out, len(body))
	return err
}
