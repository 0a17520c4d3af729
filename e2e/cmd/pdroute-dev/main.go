// Command pdroute-dev runs a whole pdroute deployment on this machine:
// the filter compiled to wasm inside an Envoy (the wazero emulator by
// default, or a real envoy binary), two mock prefill and two mock decode
// engines, and kvbridge in lmcache mode. `make dev` runs it; `make demo`
// runs it with -demo.
//
//	pdroute-dev [-proxy emulator|envoy|auto] [-demo] [-module FILE]
//	pdroute-dev -wasm
//
// -module runs the given wasm module: make demo and make dev pass
// build/pdroute.wasm, the module make build produced, so the stack runs
// what is shipped. Without it the filter is built with e2e/wasmbuild
// (the pinned toolchain, cached under build/testplugins).
//
// The mode comes from PDROUTE_DEV_MODE (nixl, the default; orchestrated,
// lmcache, sglang) and the listener from PDROUTE_DEV_ADDR (default
// 127.0.0.1:10000). The other fixed ports move with PDROUTE_DEV_ADMIN_PORT
// (9901), PDROUTE_DEV_ENGINE_PORT (8100: the four mock engines take
// 8100–8103) and PDROUTE_DEV_KVBRIDGE_PORT (7500: ZeroMQ, and the next
// port, 7501, its HTTP API; lmcache mode only); 0 picks free ports. Two
// stacks can thus run side by side.
// PDROUTE_DEV_STOP_ITERATION=off leaves allow_on_headers_stop_iteration out
// of the wasm filter's config, as Istio's WasmPlugin, Envoy Gateway and
// Envoy 1.33/1.34 do (the emulator then imitates Envoy 1.34); requests take
// pdroute's headers way. PDROUTE_DEV_DISCOVERY=file makes the pools follow
// a file watched by the discovery companion (in kvbridge) instead of the
// plugin configuration; the banner prints its path and how to add an engine
// started by hand.
// Without -demo it prints the addresses, a curl example and the generated
// envoy.yaml's path, then serves until SIGINT or SIGTERM. With -demo it
// starts the same stack on free ports, sends a short, a long and a
// streaming long request, explains what happened to each, and exits. With
// -wasm it only builds the filter module (stack.PluginPackage) and prints
// its path; e2e/envoy/run-e2e-envoy uses it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
	"github.com/pdroute/pdroute/filter/config"
)

// Environment variables read by pdroute-dev.
const (
	modeEnv         = "PDROUTE_DEV_MODE"
	addrEnv         = "PDROUTE_DEV_ADDR"
	adminPortEnv    = "PDROUTE_DEV_ADMIN_PORT"
	enginePortEnv   = "PDROUTE_DEV_ENGINE_PORT"
	kvbridgePortEnv = "PDROUTE_DEV_KVBRIDGE_PORT"
	stopIterEnv     = "PDROUTE_DEV_STOP_ITERATION"
	discoveryEnv    = "PDROUTE_DEV_DISCOVERY"
)

// envHelp is the environment pdroute-dev reads, for its usage text.
const envHelp = `Environment:
  PDROUTE_DEV_MODE           nixl (default), orchestrated, lmcache or sglang
  PDROUTE_DEV_ADDR           the listener, IP:port (default 127.0.0.1:10000)
  PDROUTE_DEV_ADMIN_PORT     Envoy's admin port (default 9901)
  PDROUTE_DEV_ENGINE_PORT    the first mock engine's port; the four take it and the next
                             three (default 8100: 8100-8103)
  PDROUTE_DEV_KVBRIDGE_PORT  kvbridge's ZeroMQ port, its HTTP API on the next (default
                             7500: 7500 and 7501; lmcache mode)
  PDROUTE_DEV_STOP_ITERATION off: an Envoy without allow_on_headers_stop_iteration
                             (as Istio's WasmPlugin); requests take the headers way
  A port of 0 is picked free. -demo always uses free ports.
`

// devConfigDir is where the dev stack writes its envoy.yaml (relative to
// the working directory, the repository root under make), and devPorts its
// ports; tests change both.
var (
	devConfigDir = "build/dev"
	devPorts     = stack.DevPorts
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr, sig))
}

// options are the parsed flags and environment.
type options struct {
	demo     bool
	wasm     bool
	module   string // a prebuilt wasm module to run
	proxy    string // emulator, envoy or auto
	mode     config.Mode
	listener netip.AddrPort
	ports    stack.Ports // the fixed ports but the listener's (make dev)
	// noStopIter: PDROUTE_DEV_STOP_ITERATION=off.
	noStopIter bool
	// discovery is stack.DiscoveryNone or stack.DiscoveryFile.
	discovery string
}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("pdroute-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: pdroute-dev [-proxy emulator|envoy|auto] [-demo] [-module FILE] | -wasm\n\n")
		fs.PrintDefaults()
		fmt.Fprint(stderr, "\n"+envHelp)
	}
	var o options
	fs.BoolVar(&o.demo, "demo", false, "send a short, a long and a streaming long request, explain each, and exit")
	fs.BoolVar(&o.wasm, "wasm", false, "build the filter module, print its path and exit")
	fs.StringVar(&o.module, "module", "", "run this wasm module (make demo and make dev: build/pdroute.wasm) instead of building the filter")
	fs.StringVar(&o.proxy, "proxy", "", `proxy that runs the filter: "emulator" (default), "envoy" (ENVOY_BIN or envoy on PATH, Envoy >= 1.35), or "auto" (envoy if one is found; the default with -demo)`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch o.proxy {
	case "":
		o.proxy = "emulator"
		if o.demo {
			o.proxy = "auto"
		}
	case "emulator", "envoy", "auto":
	default:
		return o, fmt.Errorf("-proxy %q: want emulator, envoy or auto", o.proxy)
	}
	o.mode = config.Mode(getenv(modeEnv))
	switch o.mode {
	case "":
		o.mode = config.ModeNIXL
	case config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang:
	default:
		return o, fmt.Errorf("%s=%q: want nixl, orchestrated, lmcache or sglang", modeEnv, o.mode)
	}
	switch v := getenv(stopIterEnv); v {
	case "", "on":
	case "off":
		o.noStopIter = true
	default:
		return o, fmt.Errorf("%s=%q: want on (allow_on_headers_stop_iteration: true, the default) or off (left out, as Istio's WasmPlugin does)", stopIterEnv, v)
	}
	switch o.discovery = getenv(discoveryEnv); o.discovery {
	case stack.DiscoveryNone, stack.DiscoveryFile:
	default:
		return o, fmt.Errorf("%s=%q: want %q or nothing", discoveryEnv, o.discovery, stack.DiscoveryFile)
	}
	addr := getenv(addrEnv)
	if addr == "" {
		addr = fmt.Sprintf("127.0.0.1:%d", stack.DevPorts.Listener)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return o, fmt.Errorf("%s=%q: want IP:port, e.g. 127.0.0.1:10000", addrEnv, addr)
	}
	o.listener = ap
	o.ports = devPorts
	for _, p := range []struct {
		env string
		dst *uint16
		n   int // ports taken from the value on
	}{{adminPortEnv, &o.ports.Admin, 1}, {enginePortEnv, &o.ports.EngineBase, 4}, {kvbridgePortEnv, &o.ports.KVBridgeZMQ, 2}} {
		v := getenv(p.env)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n != 0 && n+uint64(p.n)-1 > 65535 {
			return o, fmt.Errorf("%s=%q: want a port number (0 picks a free one)", p.env, v)
		}
		*p.dst = uint16(n)
	}
	o.ports.KVBridgeHTTP = 0
	if o.ports.KVBridgeZMQ != 0 {
		o.ports.KVBridgeHTTP = o.ports.KVBridgeZMQ + 1
	}
	return o, nil
}

// chooseProxy resolves "auto" and says why, for the user.
func chooseProxy(want string) (stack.Proxy, string) {
	bin, err := stack.EnvoyBinary()
	switch {
	case want == "emulator":
		return stack.Emulator, "the filter runs in pdroute's Envoy emulator (wazero); use -proxy envoy for a real Envoy"
	case want == "envoy":
		return stack.Envoy, "real Envoy: " + bin
	case err != nil:
		return stack.Emulator, "no envoy binary was found (ENVOY_BIN or PATH), so the filter runs in pdroute's Envoy emulator (wazero), which copies Envoy's wasm host"
	}
	return stack.Envoy, "found a real Envoy (" + bin + "), so the filter runs in it"
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer, sig <-chan os.Signal) int {
	o, err := parseOptions(args, getenv, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "pdroute-dev:", err)
		}
		return 2
	}
	if o.wasm {
		path, err := wasmbuild.Build(stack.PluginPackage)
		if err != nil {
			fmt.Fprintln(stderr, "pdroute-dev:", err)
			return 1
		}
		fmt.Fprintln(stdout, path)
		return 0
	}
	proxy, why := chooseProxy(o.proxy)
	topo := stack.DevTopology(o.mode)
	if err := applyPerf(&topo, getenv); err != nil {
		fmt.Fprintln(stderr, "pdroute-dev:", err)
		return 2
	}
	topo.Proxy = proxy
	topo.NoStopIteration = o.noStopIter
	topo.Discovery = o.discovery
	topo.LogLevel = "warning"
	topo.LogSink = stderr
	if o.demo {
		// Free ports: a demo must not collide with a running `make dev`.
		topo.Ports = stack.Ports{}
	} else {
		topo.Ports = o.ports
		topo.Ports.Listener = o.listener.Port()
		topo.ListenerIP = o.listener.Addr().String()
		topo.ConfigDir = devConfigDir
	}
	if o.module != "" {
		abs, err := filepath.Abs(o.module)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Stat(abs); err == nil {
				fmt.Fprintf(stdout, "pdroute-dev: starting %s mode with the module %s (%d bytes)...\n", o.mode, o.module, fi.Size())
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "pdroute-dev: -module:", err)
			return 1
		}
		topo.WasmFile = abs
	} else {
		fmt.Fprintf(stdout, "pdroute-dev: building the filter with %s (cached after the first build, which takes a minute) and starting %s mode...\n", wasmbuild.Toolchain, o.mode)
	}
	s, err := stack.Start(context.Background(), topo)
	if err != nil {
		fmt.Fprintln(stderr, "pdroute-dev:", err)
		if proxy == stack.Envoy {
			fmt.Fprintln(stderr, "pdroute-dev: real Envoy failed; -proxy emulator runs the filter without it")
		}
		return 1
	}
	defer s.Close()
	if o.demo {
		return demo(s, why, stdout, stderr)
	}
	printStack(stdout, s, why)
	got := <-sig
	fmt.Fprintf(stdout, "pdroute-dev: %v, stopping\n", got)
	return 0
}

// printStack tells a first-time user what runs where and how to try it.
func printStack(w io.Writer, s *stack.Stack, why string) {
	t := s.Topology
	fmt.Fprintf(w, "\npdroute dev stack: mode %s, %s\n", t.Mode, thresholdText(s.Config))
	fmt.Fprintf(w, "  proxy       %s, %d workers\n              (%s)\n", s.ProxyName(), t.Workers, why)
	fmt.Fprintf(w, "  requests    %s\n", wayText(s))
	fmt.Fprintf(w, "  listener    %s\n", s.URL)
	fmt.Fprintf(w, "  admin       %s/stats  (pdroute's metrics are wasmcustom.pdroute.*)\n", s.AdminURL)
	fmt.Fprintf(w, "  debug       %s%s  (balancer state: health, engine stats; in-flight counts for the strategies that keep them)\n", s.URL, stack.DebugPath)
	for _, e := range s.Engines() {
		a := e.Addresses
		extra := ""
		switch {
		case a.SideChannel != "":
			extra = ", NIXL side channel " + a.SideChannel
		case a.Bootstrap != "":
			extra = ", bootstrap server " + a.Bootstrap
		case len(a.KVAlloc) > 0:
			extra = fmt.Sprintf(", KV receivers init %v alloc %v", a.KVInit, a.KVAlloc)
		}
		fmt.Fprintf(w, "  %-11s %s  (mock %s %s%s; its log: %s/mock/requests)\n", e.Name, a.URL, a.Engine, e.Role, extra, a.URL)
	}
	if k := s.KVBridge; k != nil {
		fmt.Fprintf(w, "  kvbridge    http://%s  (ZMQ PULL %s)\n", k.HTTPAddr(), k.ZMQEndpoint())
	}
	abs, _ := filepath.Abs(s.BootstrapPath)
	fmt.Fprintf(w, "  envoy.yaml  %s\n              (the generated bootstrap; with Envoy >= 1.35: envoy -c %s)\n", abs, abs)
	if s.PoolsFile != "" {
		pools, _ := filepath.Abs(s.PoolsFile)
		fmt.Fprintf(w, "  pools file  %s\n              (watched by the discovery companion in kvbridge; the filter follows it)\n", pools)
		fmt.Fprintf(w, "\nAdd a decode engine by hand: start one,\n  build/mockengine --engine %s --role decode --addr 127.0.0.1:8200\n", engineFlag(t.Mode))
		fmt.Fprintf(w, "then add {\"name\": \"decode-9\", \"address\": \"127.0.0.1:8200\"} to the \"decode\" list of the pools file")
		switch t.Mode {
		case config.ModeLMCache:
			fmt.Fprintf(w, "\n(with its \"kv_receiver\" init_ports and alloc_ports from the JSON line mockengine prints)")
		case config.ModeSGLang:
			fmt.Fprintf(w, "\n(a prefill engine needs its \"bootstrap_port\" from the JSON line mockengine prints)")
		}
		fmt.Fprintf(w, ".\nIt serves within a second; delete the entry to take it out of service.\n")
	}
	short := "goes straight to a decoder"
	if s.Config.ThresholdTokens == 0 {
		short = "disaggregated too: in this mode every request is"
	}
	// ignore_eos: the mocks' toy model may pick its end-of-sequence token
	// first, and an empty answer tells a newcomer nothing.
	fmt.Fprintf(w, "\nTry a short prompt (%s):\n", short)
	fmt.Fprintf(w, "  curl -sD- %s/v1/chat/completions -H 'content-type: application/json' \\\n    -d '%s'\n", s.URL, shortExample)
	fmt.Fprintf(w, "and a long one (prefill on one engine, decode on another; see the x-pdroute-* and x-mock-kv headers):\n")
	fmt.Fprintf(w, "  curl -sD- %s/v1/completions -H 'content-type: application/json' \\\n    -d \"{\\\"model\\\":\\\"mock-model\\\",\\\"max_tokens\\\":8,\\\"ignore_eos\\\":true,\\\"prompt\\\":\\\"$(printf 'tell me more %%.0s' $(seq 300))\\\"}\"\n", s.URL)
	fmt.Fprintf(w, "\nStop with Ctrl-C.\n")
}

// shortExample is the body of the banner's first curl example.
const shortExample = `{"model":"mock-model","max_tokens":8,"ignore_eos":true,"messages":[{"role":"user","content":"Say hello"}]}`

// wayText says which way handled requests take through the filter.
func wayText(s *stack.Stack) string {
	if !s.Topology.NoStopIteration {
		return "body way: the wasm filter sets allow_on_headers_stop_iteration (Envoy >= 1.35), so pdroute\n" +
			"              reads each body before it chooses the decoder (PDROUTE_DEV_STOP_ITERATION=off: as Istio's WasmPlugin)"
	}
	text := "headers way: the wasm filter has no allow_on_headers_stop_iteration, as with Istio's WasmPlugin,\n" +
		"              Envoy Gateway or Envoy 1.33/1.34. pdroute notices it on the first request (about 0.3 s late),\n" +
		"              then chooses each decoder from the headers and holds the body until the prefill is done"
	for _, l := range s.Config.HeadersWayLimits() {
		text += ";\n              " + l
	}
	return text
}

// engineFlag is mockengine's --engine for a mode.
func engineFlag(m config.Mode) string {
	switch m {
	case config.ModeLMCache:
		return "lmcache"
	case config.ModeSGLang:
		return "sglang"
	}
	return "vllm"
}

// thresholdText says which requests are disaggregated.
func thresholdText(c *config.Config) string {
	if c.ThresholdTokens == 0 {
		return "every request is disaggregated (threshold_tokens 0)"
	}
	return fmt.Sprintf("requests of %d+ estimated tokens are disaggregated, shorter ones go straight to a decoder", c.ThresholdTokens)
}

// requestTimeout bounds one demo request.
const requestTimeout = 60 * time.Second
