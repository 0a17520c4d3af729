package stack

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/filter/config"
)

// PluginPackage is the Go package built into the wasm module every stack
// loads (with e2e/wasmbuild): the shipped module, what `make wasm` builds.
var PluginPackage = "./filter"

// Proxy selects the Envoy that runs the filter.
type Proxy string

const (
	// Emulator is e2e/envoyemu in this process: Envoy's wasm host on wazero.
	Emulator Proxy = "emulator"
	// Envoy is a real envoy binary (ENVOY_BIN, else envoy on PATH), started
	// as a child process.
	Envoy Proxy = "envoy"
)

// ProxyEnv is the environment variable scenario runs read to pick the
// proxy: empty or "emulator" for the emulator, "envoy" for real Envoy.
const ProxyEnv = "PDROUTE_E2E_PROXY"

// ProxyFromEnv returns the proxy ProxyEnv asks for.
func ProxyFromEnv() (Proxy, error) {
	switch v := os.Getenv(ProxyEnv); v {
	case "", string(Emulator):
		return Emulator, nil
	case string(Envoy):
		return Envoy, nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", ProxyEnv, v, Emulator, Envoy)
	}
}

// Topology describes a stack: the mode, the mock engines, the plugin
// configuration and the proxy. The zero value of every field but Mode is
// its default.
type Topology struct {
	// Mode is the pdroute mode; it also picks the mock engine kind (vllm for
	// nixl and orchestrated, lmcache, sglang). Required.
	Mode config.Mode
	// Prefill and Decode are the mock engines of each pool, in endpoint
	// order. Nil means two default engines each; an empty non-nil slice is
	// an error (the plugin needs both pools).
	Prefill, Decode []EngineSpec
	// Workers is the proxy's worker count (Envoy --concurrency), one wasm VM
	// each. Default 2: enough to catch state a VM wrongly keeps to itself.
	Workers int
	// Proxy runs the filter. Default Emulator.
	Proxy Proxy
	// EnvoyVersion is the Envoy release the emulator imitates. Default
	// EmulatedEnvoy (1.35: strict WASI). Real Envoy ignores it.
	EnvoyVersion envoyemu.EnvoyVersion
	// Plugin holds plugin configuration fields laid over the generated ones:
	// objects merge key by key, anything else replaces. For example
	// {"on_prefill_failure":"fail","decode":{"strategy":"least_loaded"}}.
	// The generated configuration sets mode, threshold_tokens (256),
	// debug_headers, debug_path (DebugPath) and the pools' endpoints.
	Plugin map[string]any
	// Ports fixes the listening ports; zero ports are picked by the kernel.
	Ports Ports
	// ListenerIP is the client-facing listener's IP. Default 127.0.0.1;
	// everything else always listens on 127.0.0.1.
	ListenerIP string
	// NoStopIteration runs the wasm filter without
	// allow_on_headers_stop_iteration, as Istio's WasmPlugin, Envoy
	// Gateway and Envoy 1.33/1.34 do; the emulator then imitates Envoy 1.34
	// unless EnvoyVersion says otherwise. Requests take the headers way.
	NoStopIteration bool
	// StreamIdleTimeout is the HCM stream_idle_timeout (zero:
	// DefaultStreamIdleTimeout).
	StreamIdleTimeout time.Duration
	// RequestTimeout is the HCM request_timeout (zero: DefaultRequestTimeout).
	RequestTimeout time.Duration
	// WasmFile is a prebuilt module to load. Default: PluginPackage built
	// with e2e/wasmbuild (cached, so only the first stack of a run builds).
	WasmFile string
	// ConfigDir is where the bootstrap (envoy.yaml) and Envoy's log are
	// written. Default: a temporary directory removed by Close.
	ConfigDir string
	// LogSink, when set, also receives the proxy's log lines (the stack keeps
	// the last ones for Logs either way). Default: none.
	LogSink io.Writer
	// LogLevel is the proxy's log level: trace, debug, info, warning, error
	// or critical. Default "info".
	LogLevel string
	// Discovery is how the filter learns the pools: "" (DiscoveryNone) lists
	// them in the plugin configuration; DiscoveryFile runs the discovery
	// companion (in kvbridge) on a pools file the stack writes (PoolsFile),
	// every engine by address, and the plugin configuration lists none.
	Discovery string
	// CompanionScrape, with DiscoveryFile, makes the companion scrape every
	// engine this often and serve GET /v1/stats (kvbridge
	// -discovery-scrape-interval); the plugin configuration then needs
	// "discovery": {"stats": true} to read them. Zero: off.
	CompanionScrape time.Duration
}

// Discovery kinds of a Topology.
const (
	DiscoveryNone = ""
	DiscoveryFile = "file"
)

// EngineSpec describes one mock engine and its endpoint entry.
type EngineSpec struct {
	// ByAddress makes the endpoint an "address" endpoint, reached through
	// the ORIGINAL_DST cluster; the default is a "cluster" endpoint with its
	// own STATIC cluster named like the endpoint.
	ByAddress bool
	// Host is the endpoint's "host" (what other engines use to reach it).
	// Default: unset for address endpoints (the plugin uses the address's
	// IP), "127.0.0.1" for cluster endpoints whose mode needs it.
	Host string
	// Latency is the mock's timing model; zero fields keep the mocks'
	// defaults.
	Latency mocks.Latency
	// TPSize is the engine's tensor-parallel size (lmcache: ranks that push
	// and notify, or receive). Default 1.
	TPSize int
	// Mock, when set, edits the mock's configuration last.
	Mock func(*mocks.Config)
	// Endpoint, when set, edits the endpoint's generated JSON object last
	// (for example to break one kv_receiver port).
	Endpoint func(map[string]any)
}

// Ports are fixed ports for a stack on 127.0.0.1. A zero port is chosen by
// the kernel (free ports are picked up front for real Envoy).
type Ports struct {
	// Listener is the client-facing port.
	Listener uint16
	// Admin is the admin port.
	Admin uint16
	// EngineBase numbers the mock engines' API ports: prefill engines
	// first, then decode engines.
	EngineBase uint16
	// KVBridgeZMQ and KVBridgeHTTP are kvbridge's ports (lmcache mode).
	KVBridgeZMQ, KVBridgeHTTP uint16
}

// DevPorts are the documented ports of `make dev` and e2e/envoy/envoy.yaml.
var DevPorts = Ports{Listener: 10000, Admin: 9901, EngineBase: 8100, KVBridgeZMQ: 7500, KVBridgeHTTP: 7501}

// Generated configuration defaults.
const (
	// DebugPath is the plugin's debug_path in every stack.
	DebugPath = "/_pdroute/state"
	// DefaultThreshold is threshold_tokens unless Plugin overrides it:
	// small, so scenario prompts stay small and fast.
	DefaultThreshold = 256
	// KVBridgeCluster is the kvbridge cluster's name.
	KVBridgeCluster = "kvbridge"
)

func (t Topology) withDefaults() (Topology, error) {
	switch t.Mode {
	case config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang:
	default:
		return t, fmt.Errorf("stack: unknown mode %q", t.Mode)
	}
	if t.Prefill == nil {
		t.Prefill = make([]EngineSpec, 2)
	}
	if t.Decode == nil {
		t.Decode = make([]EngineSpec, 2)
	}
	if len(t.Prefill) == 0 || len(t.Decode) == 0 {
		return t, fmt.Errorf("stack: both pools need at least one engine")
	}
	if t.Workers <= 0 {
		t.Workers = 2
	}
	if t.Proxy == "" {
		t.Proxy = Emulator
	}
	if t.Proxy != Emulator && t.Proxy != Envoy {
		return t, fmt.Errorf("stack: unknown proxy %q", t.Proxy)
	}
	if t.EnvoyVersion == (envoyemu.EnvoyVersion{}) {
		t.EnvoyVersion = EmulatedEnvoy
		if t.NoStopIteration {
			t.EnvoyVersion = EmulatedEnvoyNoFlag
		}
	}
	if t.ListenerIP == "" {
		t.ListenerIP = "127.0.0.1"
	}
	if t.LogLevel == "" {
		t.LogLevel = "info"
	}
	switch t.Discovery {
	case DiscoveryNone:
	case DiscoveryFile:
		// Discovered endpoints are reached by address.
		t.Prefill, t.Decode = byAddress(t.Prefill), byAddress(t.Decode)
	default:
		return t, fmt.Errorf("stack: unknown discovery %q (want %q or %q)", t.Discovery, DiscoveryNone, DiscoveryFile)
	}
	return t, nil
}

func byAddress(specs []EngineSpec) []EngineSpec {
	out := make([]EngineSpec, len(specs))
	for i, s := range specs {
		s.ByAddress = true
		out[i] = s
	}
	return out
}

// engineKind is the mock engine a mode talks to.
func engineKind(m config.Mode) mocks.Kind {
	switch m {
	case config.ModeLMCache:
		return mocks.LMCache
	case config.ModeSGLang:
		return mocks.SGLang
	}
	return mocks.VLLM
}

// endpointJSON is an engine's endpoint entry in the plugin configuration.
func endpointJSON(mode config.Mode, e *Engine) map[string]any {
	ep := map[string]any{"name": e.Name}
	if e.Spec.ByAddress {
		ep["address"] = e.Addr
	} else {
		ep["cluster"] = e.Name
	}
	host := e.Spec.Host
	needsHost := e.Role == mocks.Prefill && (mode == config.ModeSGLang || mode == config.ModeOrchestrated) ||
		e.Role == mocks.Decode && mode == config.ModeLMCache
	if host == "" && needsHost && !e.Spec.ByAddress {
		host = "127.0.0.1"
	}
	if host != "" {
		ep["host"] = host
	}
	a := e.Addresses
	if mode == config.ModeSGLang && e.Role == mocks.Prefill {
		ep["bootstrap_port"] = a.BootstrapPort()
	}
	if mode == config.ModeLMCache && e.Role == mocks.Decode {
		ep["kv_receiver"] = map[string]any{"init_ports": a.KVInitPorts(), "alloc_ports": a.KVAllocPorts()}
	}
	if e.Spec.Endpoint != nil {
		e.Spec.Endpoint(ep)
	}
	return ep
}

// pluginJSON is the stack's plugin configuration: the generated one with
// t.Plugin laid over it, indented (it is read by people in envoy.yaml).
func pluginJSON(t Topology, prefill, decode []*Engine) ([]byte, error) {
	pool := func(es []*Engine) map[string]any {
		if t.Discovery != DiscoveryNone {
			return map[string]any{}
		}
		list := make([]any, len(es))
		for i, e := range es {
			list[i] = endpointJSON(t.Mode, e)
		}
		return map[string]any{"endpoints": list}
	}
	cfg := map[string]any{
		"mode":             string(t.Mode),
		"threshold_tokens": DefaultThreshold,
		"debug_headers":    true,
		"debug_path":       DebugPath,
		"prefill":          pool(prefill),
		"decode":           pool(decode),
	}
	if t.Mode == config.ModeLMCache {
		cfg["lmcache"] = map[string]any{"kvbridge_cluster": KVBridgeCluster}
	}
	if t.Discovery != DiscoveryNone {
		cfg["discovery"] = map[string]any{"cluster": KVBridgeCluster}
	}
	merge(cfg, t.Plugin)
	return json.MarshalIndent(cfg, "", "  ")
}

// merge lays src over dst: nested objects merge, other values replace.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				merge(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

// loopback is "127.0.0.1:port".
func loopback(port uint16) string { return "127.0.0.1:" + strconv.Itoa(int(port)) }
