// Command pdroute-config checks a pdroute plugin configuration with the very
// parser the filter runs in proxy_on_configure, so a configuration can be
// validated in CI before Envoy ever loads it.
//
//	pdroute-config check FILE    (FILE "-" reads standard input)
//
// Exit status: 0 and "ok: <summary>" on standard output for a valid
// configuration, with a "warning: path: message" line on standard error for
// each setting that is valid but almost certainly wrong (config.Warnings);
// 1 with every problem on standard error, one per line as "path: message";
// 2 for a usage error or an unreadable file.
//
// It is a native tool and may import anything, but it only wraps
// filter/config.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pdroute/pdroute/filter/config"
)

const usage = "usage: pdroute-config check FILE   (FILE - reads standard input)"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the whole command, with its streams passed in so tests can run it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "check" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var data []byte
	var err error
	if args[1] == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(args[1])
	}
	if err != nil {
		fmt.Fprintf(stderr, "pdroute-config: %v\n", err)
		return 2
	}
	c, err := config.Parse(data)
	if err != nil {
		var ce *config.Error
		if !errors.As(err, &ce) {
			fmt.Fprintf(stderr, "pdroute-config: %v\n", err)
			return 1
		}
		for _, p := range ce.Problems {
			fmt.Fprintln(stderr, p)
		}
		return 1
	}
	for _, w := range c.Warnings() {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	fmt.Fprintln(stdout, "ok: "+summary(c))
	return 0
}

// summary describes a valid configuration on one line.
func summary(c *config.Config) string {
	threshold := "always disaggregate"
	if c.ThresholdTokens > 0 {
		threshold = fmt.Sprintf("disaggregate at >= %d tokens", c.ThresholdTokens)
	}
	failure := "on_prefill_failure " + string(c.OnPrefillFailure)
	if c.Mode == config.ModeSGLang {
		// the decode is already running: there is nothing to fall back to
		failure = "a failed prefill fails the request (on_prefill_failure does not apply)"
	}
	out := fmt.Sprintf("mode %s, %s, paths %s, prefill %s, decode %s, %s",
		c.Mode, threshold, strings.Join(c.Paths, " "), pool(c.Prefill), pool(c.Decode), failure)
	if d := c.Discovery; d != nil {
		out += fmt.Sprintf(", pools discovered from cluster %s (%s)", d.Cluster, d.Path)
	}
	return out
}

func pool(p config.Pool) string {
	s := "s"
	if len(p.Endpoints) == 1 {
		s = ""
	}
	return fmt.Sprintf("%d endpoint%s (%s)", len(p.Endpoints), s, p.Strategy)
}
