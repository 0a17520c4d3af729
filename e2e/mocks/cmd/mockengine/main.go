// Command mockengine runs one mock inference engine (vLLM + NixlConnector, vLLM +
// LMCache NIXL push, or SGLang) on loopback, prints its addresses as one JSON line on
// stdout, and runs until SIGINT or SIGTERM.
//
//	mockengine --engine vllm --role prefill --addr 127.0.0.1:0
//	mockengine --engine lmcache --role prefill --zmq-connect tcp://127.0.0.1:7500
//	mockengine --engine sglang --role decode --default-bootstrap-port 8998
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	perfengine "github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/e2e/mocks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockengine:", err)
		os.Exit(2)
	}
}

// run parses args, starts the mock, prints its addresses and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	s, err := mocks.Start(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	line, err := json.Marshal(s.Addresses())
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// parseFlags maps the command line onto a mocks.Config. Zero values keep the
// library's defaults, which the flag help repeats.
func parseFlags(args []string, stderr io.Writer) (mocks.Config, error) {
	d, err := mocks.Config{Kind: mocks.VLLM}.WithDefaults()
	if err != nil {
		return d, err
	}
	var c mocks.Config
	fs := flag.NewFlagSet("mockengine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engine := fs.String("engine", "", "engine to emulate: vllm, lmcache or sglang (required)")
	role := fs.String("role", "both", "prefill, decode or both")
	verbose := fs.Bool("v", false, "log engine events to stderr")
	initAddrs := fs.String("kv-init-addrs", "", "lmcache decode: comma-separated receiver init listen addresses, one per TP rank (default --tp times 127.0.0.1:0)")
	allocAddrs := fs.String("kv-alloc-addrs", "", "lmcache decode: comma-separated receiver alloc listen addresses, one per TP rank (default --tp times 127.0.0.1:0)")
	fs.StringVar(&c.Name, "name", "", "instance name for x-mock-name (default <engine>-<role>-<port>)")
	fs.StringVar(&c.Addr, "addr", d.Addr, "OpenAI API listen address")
	fs.StringVar(&c.Model, "model", d.Model, "served model name")
	fs.IntVar(&c.MaxModelLen, "max-model-len", d.MaxModelLen, "context length")
	fs.IntVar(&c.MaxConcurrency, "max-concurrency", d.MaxConcurrency, "requests running at once; negative for unlimited")
	fs.IntVar(&c.KVCacheBlocks, "kv-cache-blocks", d.KVCacheBlocks, "KV-cache capacity in blocks (usage gauge)")
	fs.IntVar(&c.BlockSize, "block-size", d.BlockSize, "tokens per KV block")
	fs.DurationVar(&c.Latency.PrefillPerToken, "prefill-per-token", d.Latency.PrefillPerToken, "compute time per prompt token")
	fs.DurationVar(&c.Latency.TransferredPrefill, "transferred-prefill", d.Latency.TransferredPrefill, "time to first token when KV was transferred")
	fs.DurationVar(&c.Latency.PerOutputToken, "per-output-token", d.Latency.PerOutputToken, "time per generated token")
	fs.Float64Var(&c.Latency.Slowdown, "slowdown", d.Latency.Slowdown, "multiplies every latency")
	perf := fs.String("perf", "", "time answers with the engine performance model of this profile (llama-3.1-8b-h100, llama-3.1-70b-h100-tp4) instead of the latencies above")
	fs.Float64Var(&c.PerfScale, "perf-scale", 1, "with -perf: wall time per model time (0.5 answers twice as fast)")
	fs.IntVar(&c.RecordLimit, "record-limit", d.RecordLimit, "requests kept for GET /mock/requests")
	fs.Uint64Var(&c.Seed, "seed", d.Seed, "seed of probabilistic faults")
	fs.StringVar(&c.EngineID, "engine-id", "", "vllm: remote_engine_id (default a random UUID)")
	fs.StringVar(&c.SideChannelAddr, "side-channel", d.SideChannelAddr, "vllm prefill: block-pull listen address (remote_host:remote_port)")
	fs.DurationVar(&c.LeaseDuration, "lease", d.LeaseDuration, "vllm prefill: how long unpulled blocks stay held")
	fs.BoolVar(&c.GroupedBlockIDs, "grouped-block-ids", false, "vllm prefill: newer kv_transfer_params (remote_block_ids as list of lists, extra keys)")
	fs.IntVar(&c.TPSize, "tp", d.TPSize, "tensor-parallel size (vllm tp_size; lmcache ranks)")
	fs.DurationVar(&c.PullTimeout, "pull-timeout", d.PullTimeout, "bound of one engine-to-engine call")
	fs.StringVar(&c.ZMQConnect, "zmq-connect", "", "lmcache prefill: router PULL endpoint, e.g. tcp://127.0.0.1:7500 (required)")
	fs.StringVar(&c.NotifTag, "notif-tag", d.NotifTag, "lmcache prefill: notification tag (older LMCache: NixlProxyNotif)")
	fs.DurationVar(&c.KVBufferTTL, "kv-buffer-ttl", d.KVBufferTTL, "lmcache decode: how long pushed KV waits for its decode")
	fs.StringVar(&c.BootstrapAddr, "bootstrap-addr", d.BootstrapAddr, "sglang prefill: bootstrap server listen address")
	fs.IntVar(&c.DefaultBootstrapPort, "default-bootstrap-port", d.DefaultBootstrapPort, "sglang decode: port used when bootstrap_port is null")
	fs.DurationVar(&c.BootstrapTimeout, "bootstrap-timeout", d.BootstrapTimeout, "sglang: how long a decode waits for its room")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.Kind, c.Role = mocks.Kind(*engine), mocks.Role(*role)
	if *perf != "" {
		p, err := perfengine.Profile(*perf)
		if err != nil {
			return c, err
		}
		c.Perf = &p
	}
	c.KVInitAddrs, c.KVAllocAddrs = splitList(*initAddrs), splitList(*allocAddrs)
	if *verbose {
		c.Logger = log.New(stderr, "mockengine: ", log.LstdFlags|log.Lmicroseconds)
	}
	return c, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
