// Command tokest prints tokenest's estimate for a request body.
//
//	tokest [-path /v1/chat/completions] [-method default|chars4] [file]
//
// It reads the body from file, or from standard input when no file is
// given, and prints one JSON object:
//
//	{"estimate":N,"exact":false,"method":"default","breakdown":{...}}
//
// On bad input it prints a one-line error to standard error and exits 1.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/pdroute/pdroute/tokenest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// output is the printed object.
type output struct {
	Estimate  int                `json:"estimate"`
	Exact     bool               `json:"exact"`
	Method    tokenest.Method    `json:"method"`
	Breakdown tokenest.Breakdown `json:"breakdown"`
}

// run is main with its inputs and outputs passed in; it returns the exit
// code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tokest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("path", "/v1/chat/completions", "request path, which selects the body's shape")
	method := tokenest.Default
	fs.TextVar(&method, "method", tokenest.Default, "estimation method: default or chars4")
	fail := func(err error) int {
		fmt.Fprintln(stderr, "tokest:", err)
		return 1
	}
	if err := fs.Parse(args); err != nil {
		return fail(err)
	}
	if fs.NArg() > 1 {
		return fail(errors.New("at most one file argument"))
	}
	var body []byte
	var err error
	if fs.NArg() == 1 {
		body, err = os.ReadFile(fs.Arg(0))
	} else {
		body, err = io.ReadAll(stdin)
	}
	if err != nil {
		return fail(err)
	}
	r, err := tokenest.Estimate(body, *path, method)
	if err != nil {
		return fail(err)
	}
	out, err := json.Marshal(output{Estimate: r.Tokens, Exact: r.Exact, Method: r.Method, Breakdown: r.Breakdown})
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return 0
}
