// Command envoyemu runs an Envoy bootstrap config (the subset envoyemu
// emulates) with the proxy-wasm plugins it names, on loopback, until SIGINT
// or SIGTERM:
//
//	envoyemu -c envoy.yaml [--concurrency 2] [--envoy-version 1.35] [--log-level info] [--drain-time-s 5]
//
// The flags mean what they mean to Envoy; --envoy-version picks the WASI
// profile (1.33–1.38 strict, 1.39+ full) and the config fields that exist.
// Logs go to stderr in Envoy's format.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("envoyemu", flag.ContinueOnError)
	config := fs.String("c", "", "path to the Envoy bootstrap YAML (required)")
	fs.StringVar(config, "config-path", "", "same as -c")
	concurrency := fs.Int("concurrency", 2, "number of worker threads (one VM per plugin each)")
	version := fs.String("envoy-version", envoyemu.DefaultEnvoyVersion.String(), "Envoy version to emulate: 1.33–1.38 (strict WASI) or 1.39+")
	level := fs.String("log-level", "info", "log level: trace, debug, info, warning, error, critical")
	fs.StringVar(level, "l", "info", "same as --log-level")
	drain := fs.Int("drain-time-s", 5, "seconds to let in-flight requests finish on shutdown")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *config == "" {
		fmt.Fprintln(os.Stderr, "envoyemu: -c is required")
		fs.Usage()
		return 2
	}
	v, err := envoyemu.ParseEnvoyVersion(*version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "envoyemu:", err)
		return 2
	}
	lvl, err := envoyemu.ParseLogLevel(*level)
	if err != nil {
		fmt.Fprintln(os.Stderr, "envoyemu:", err)
		return 2
	}
	// Catch signals before starting, so one sent once we serve is never fatal.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	h, err := envoyemu.StartFile(*config, envoyemu.Options{
		Concurrency: *concurrency, EnvoyVersion: v, LogSink: os.Stderr, LogLevel: lvl,
		ShutdownTimeout: time.Duration(*drain) * time.Second,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoyemu: error initializing configuration '%s': %v\n", *config, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "envoyemu: listening on %s", h.Addr())
	if a := h.AdminAddr(); a != "" {
		fmt.Fprintf(os.Stderr, ", admin on %s", a)
	}
	fmt.Fprintln(os.Stderr)
	s := <-sig
	fmt.Fprintf(os.Stderr, "envoyemu: caught %v, draining\n", s)
	h.Close()
	fmt.Fprintln(os.Stderr, "envoyemu: exiting")
	return 0
}
