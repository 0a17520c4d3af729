// Command kvbridge relays LMCache's KV-ready ZeroMQ notifications to the
// pdroute filter over HTTP long-polls. See hostcalls/README.md.
//
// Every flag can also be set from the environment as KVBRIDGE_<FLAG> (upper
// case, dashes as underscores: --zmq-bind is KVBRIDGE_ZMQ_BIND); a flag on
// the command line beats the environment. A bad value exits 2 with one line
// on stderr; SIGINT or SIGTERM shuts down gracefully and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/pdroute/pdroute/hostcalls/discovery"
	_ "github.com/pdroute/pdroute/hostcalls/discovery/kube" // the "kubernetes" source
	"github.com/pdroute/pdroute/hostcalls/kvbridge"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	opts, fs, err := parseOptions(args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(fs, stdout)
			return 0
		}
		fmt.Fprintf(stderr, "kvbridge: %v\n", err)
		return 2
	}
	if opts.version {
		fmt.Fprintf(stdout, "kvbridge %s (%s)\n", buildVersion(), runtime.Version())
		return 0
	}
	logger := newLogger(opts.logFormat, opts.logLevel, stderr)
	opts.cfg.Logger = logger
	if opts.discovery != "" {
		dc, err := discovery.LoadConfig(opts.discovery)
		if err != nil {
			logger.Error("kvbridge cannot start", "err", err.Error())
			return 1
		}
		sources, err := dc.Sources(logger)
		if err != nil {
			logger.Error("kvbridge cannot start", "err", err.Error())
			return 1
		}
		reg := discovery.NewRegistry(nil)
		opts.cfg.Handlers = map[string]http.Handler{"GET /v1/pools": reg.Handler()}
		go discovery.Run(ctx, reg, sources, logger)
		if opts.scrapeInterval > 0 {
			sc := discovery.NewScraper(reg, opts.scrapeInterval, logger)
			opts.cfg.Handlers["GET /v1/stats"] = sc.Handler()
			go sc.Run(ctx)
		}
	}
	svc, err := kvbridge.New(opts.cfg)
	if err != nil {
		logger.Error("kvbridge cannot start", "err", err.Error())
		return 1
	}
	if err := svc.Run(ctx); err != nil {
		logger.Error("kvbridge failed", "err", err.Error())
		return 1
	}
	return 0
}

type options struct {
	cfg       kvbridge.Config
	logFormat string
	logLevel  string
	version   bool
	discovery string
	// scrapeInterval: how often the discovery companion scrapes the engines
	// it knows (0: it does not; serves GET /v1/stats otherwise).
	scrapeInterval time.Duration
}

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// newFlagSet defines the flags, with defaults from kvbridge.Config.
func newFlagSet() (*flag.FlagSet, *options) {
	def := kvbridge.Config{}.WithDefaults()
	o := &options{}
	fs := flag.NewFlagSet("kvbridge", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by run
	fs.StringVar(&o.cfg.ZMQBind, "zmq-bind", def.ZMQBind, "ZeroMQ PULL endpoint prefillers' PUSH sockets connect to (tcp://host:port; host * = all interfaces; loopback by default: prefillers on other hosts need tcp://0.0.0.0:7500 behind a network policy)")
	fs.StringVar(&o.cfg.HTTPAddr, "http-addr", def.HTTPAddr, "host:port of the HTTP API")
	fs.DurationVar(&o.cfg.TTL, "ttl", def.TTL, "how long an id is kept after its first notification")
	fs.IntVar(&o.cfg.MaxEntries, "max-entries", def.MaxEntries, "most ids held; the oldest is evicted beyond it")
	fs.IntVar(&o.cfg.MaxWaiters, "max-waiters", def.MaxWaiters, "most concurrent long-polls; more are answered 503")
	fs.IntVar(&o.cfg.MaxPeers, "zmq-max-peers", def.MaxPeers, "most concurrent ZMQ connections; at the limit a new one evicts the least recently active peer")
	fs.IntVar(&o.cfg.MaxMessageBytes, "zmq-max-message-bytes", def.MaxMessageBytes, "largest ZMQ message; a peer sending more is disconnected")
	fs.DurationVar(&o.cfg.HandshakeTimeout, "zmq-handshake-timeout", def.HandshakeTimeout, "time a new ZMQ connection has to finish its handshake")
	fs.DurationVar(&o.cfg.IdleTimeout, "zmq-idle-timeout", def.IdleTimeout, "a ZMQ peer that sends nothing (no message, no heartbeat) for this long is disconnected")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.discovery, "discovery", "", "JSON file choosing each pool's discovery source; serves GET /v1/pools (empty: no discovery)")
	fs.DurationVar(&o.scrapeInterval, "discovery-scrape-interval", 0, "with -discovery: scrape every discovered engine's /metrics this often and serve GET /v1/stats (0: off)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	return fs, o
}

// parseOptions reads args, then the environment for every flag args did not
// set, then validates. The flag set is returned for usage.
func parseOptions(args []string, getenv func(string) string) (*options, *flag.FlagSet, error) {
	fs, o := newFlagSet()
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v := getenv(name)
		if err != nil || onCommandLine[f.Name] || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("invalid value %q for %s: %v", v, name, serr)
		}
	})
	if err != nil {
		return nil, fs, err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, fs, fmt.Errorf("log-format %q: must be text or json", o.logFormat)
	}
	if _, ok := logLevels[o.logLevel]; !ok {
		return nil, fs, fmt.Errorf("log-level %q: must be debug, info, warn or error", o.logLevel)
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, fs, err
	}
	return o, fs, nil
}

func envName(flagName string) string {
	return "KVBRIDGE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: kvbridge [flags]\n\nEvery flag may also be given as KVBRIDGE_<FLAG> in the environment (--zmq-bind: KVBRIDGE_ZMQ_BIND); the command line wins.\n\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func newLogger(format, level string, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevels[level]}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// buildVersion is the -ldflags version, else the module version go install
// recorded, else "dev".
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}
