package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
	"github.com/pdroute/pdroute/filter/config"
)

// Stack is a running pdroute deployment on loopback: the mock engines, the
// proxy with the filter, and (lmcache mode) kvbridge.
type Stack struct {
	// Topology is the topology the stack was started from, defaults applied.
	Topology Topology
	// URL is the client-facing listener ("http://127.0.0.1:PORT") and
	// AdminURL the admin listener.
	URL, AdminURL string
	// Prefill and Decode are the mock engines, in endpoint order.
	Prefill, Decode []*Engine
	// KVBridge is the in-process kvbridge (lmcache mode), else nil.
	KVBridge *KVBridge
	// PluginConfig is the plugin configuration (JSON) and Config its parsed form.
	PluginConfig []byte
	Config       *config.Config
	// BootstrapPath is the rendered Envoy bootstrap the proxy runs.
	BootstrapPath string
	// WasmFile is the wasm module.
	WasmFile string
	// PoolsFile is the discovery companion's pools file (Topology.Discovery
	// DiscoveryFile), else "".
	PoolsFile string

	disc *discoveryRun
	// extra are engines started by StartEngine, more the proxies of
	// StartProxy.
	extra   []*Engine
	more    []proxyRunner
	proxy   proxyRunner
	logs    *lineRing
	tempDir string
	client  *http.Client
}

// Engine is one running mock engine and its endpoint.
type Engine struct {
	// Name is the endpoint's name, the mock's name and (cluster endpoints)
	// its cluster's name: prefill-0, prefill-1, …, decode-0, …
	Name string
	// Role is mocks.Prefill or mocks.Decode.
	Role mocks.Role
	// Spec is what the engine was started from.
	Spec EngineSpec
	// Addr is the mock's API address (IP:port), Addresses all its
	// listeners, and Server the mock itself.
	Addr      string
	Addresses mocks.Addresses
	Server    *mocks.Server
	// Control drives the mock's /mock/ API.
	Control *mocks.Control
}

// startTimeout bounds Start: building the module (cached after the first
// build), starting the mocks, and the proxy becoming ready.
const startTimeout = 3 * time.Minute

// Start brings a stack up; Close takes it down. On error everything started
// so far is stopped.
func Start(ctx context.Context, t Topology) (st *Stack, err error) {
	t, err = t.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	s := &Stack{Topology: t, logs: newLineRing(2000), client: &http.Client{Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	dir := t.ConfigDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pdroute-stack-"); err != nil {
			return nil, err
		}
		s.tempDir = dir
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var handlers map[string]http.Handler
	if t.Discovery == DiscoveryFile {
		s.PoolsFile = poolsPath(dir)
		_ = os.Remove(s.PoolsFile) // a dev directory's file of a previous run
		if s.disc, err = startDiscovery(s.PoolsFile, t.CompanionScrape); err != nil {
			return nil, err
		}
		handlers = s.disc.handlers()
	}
	if t.Mode == config.ModeLMCache || handlers != nil {
		zmq, httpAddr := loopback(t.Ports.KVBridgeZMQ), loopback(t.Ports.KVBridgeHTTP)
		if s.KVBridge, err = startKVBridge("tcp://"+zmq, httpAddr, handlers); err != nil {
			return nil, err
		}
	}
	err = eachEngine(t, func(e *Engine, addr string) error {
		if err := s.startEngine(e, addr); err != nil {
			return err
		}
		s.add(e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if s.PoolsFile != "" {
		if err := s.WritePools(s.Prefill, s.Decode); err != nil {
			return nil, err
		}
	}
	if s.PluginConfig, err = pluginJSON(t, s.Prefill, s.Decode); err != nil {
		return nil, err
	}
	if s.Config, err = config.Parse(s.PluginConfig); err != nil {
		return nil, fmt.Errorf("stack: plugin configuration: %w", err)
	}
	s.WasmFile = t.WasmFile
	if s.WasmFile == "" {
		if s.WasmFile, err = wasmbuild.Build(PluginPackage); err != nil {
			return nil, err
		}
	}
	listener := net.JoinHostPort(t.ListenerIP, strconv.Itoa(int(t.Ports.Listener)))
	admin := loopback(t.Ports.Admin)
	if t.Proxy == Envoy {
		// Envoy binds what the file says: pick free ports now.
		if listener, err = freePortIfZero(listener); err != nil {
			return nil, err
		}
		if admin, err = freePortIfZero(admin); err != nil {
			return nil, err
		}
	}
	yml, err := s.bootstrap(listener, admin).Render()
	if err != nil {
		return nil, fmt.Errorf("stack: bootstrap: %w", err)
	}
	s.BootstrapPath = filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(s.BootstrapPath, yml, 0o644); err != nil {
		return nil, err
	}
	switch t.Proxy {
	case Envoy:
		s.proxy, err = startEnvoy(ctx, s.BootstrapPath, dir, t, s.logs)
	default:
		s.proxy, err = startEmulator(yml, t, s.logs)
	}
	if err != nil {
		return nil, err
	}
	s.URL, s.AdminURL = "http://"+s.proxy.listenerAddr(), "http://"+s.proxy.adminAddr()
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) startEngine(e *Engine, addr string) error {
	t := s.Topology
	cfg := mocks.Config{
		Kind: engineKind(t.Mode), Role: e.Role, Name: e.Name, Addr: addr,
		Latency: e.Spec.Latency, TPSize: e.Spec.TPSize,
	}
	if cfg.Kind == mocks.LMCache && e.Role == mocks.Prefill {
		cfg.ZMQConnect = s.KVBridge.ZMQEndpoint()
	}
	if e.Spec.Mock != nil {
		e.Spec.Mock(&cfg)
	}
	srv, err := mocks.Start(cfg)
	if err != nil {
		return fmt.Errorf("stack: mock %s: %w", e.Name, err)
	}
	e.Server, e.Addr, e.Addresses, e.Control = srv, srv.Addr(), srv.Addresses(), srv.Control()
	return nil
}

// eachEngine walks the topology's engines in endpoint order, prefill first,
// with their names and listen addresses.
func eachEngine(t Topology, fn func(e *Engine, addr string) error) error {
	port := t.Ports.EngineBase
	for _, pool := range []struct {
		role  mocks.Role
		specs []EngineSpec
	}{{mocks.Prefill, t.Prefill}, {mocks.Decode, t.Decode}} {
		for i, spec := range pool.specs {
			addr := loopback(0)
			if port != 0 {
				addr = loopback(port)
				port++
			}
			e := &Engine{Name: string(pool.role) + "-" + strconv.Itoa(i), Role: pool.role, Spec: spec}
			if err := fn(e, addr); err != nil {
				return err
			}
		}
	}
	return nil
}

// add appends e to its pool.
func (s *Stack) add(e *Engine) {
	if e.Role == mocks.Prefill {
		s.Prefill = append(s.Prefill, e)
	} else {
		s.Decode = append(s.Decode, e)
	}
}

// bootstrap describes the stack's Envoy bootstrap: one static cluster per
// cluster endpoint, and the kvbridge cluster in every mode (at kvbridge's
// documented port when none runs, so every mode's file has the same shape).
func (s *Stack) bootstrap(listener, admin string) Bootstrap {
	return Bootstrap{
		Listener: listener, Admin: admin, WasmFile: s.WasmFile, Plugin: s.PluginConfig,
		Clusters: s.Clusters(), StreamIdleTimeout: s.Topology.StreamIdleTimeout,
		RequestTimeout:  s.Topology.RequestTimeout,
		NoStopIteration: s.Topology.NoStopIteration,
	}
}

// Clusters maps the name of every static cluster of the bootstrap to its
// IP:port: one per cluster endpoint, and kvbridge.
func (s *Stack) Clusters() map[string]string {
	clusters := map[string]string{}
	for _, e := range s.Engines() {
		if !e.Spec.ByAddress {
			clusters[e.Name] = e.Addr
		}
	}
	kv := loopback(DevPorts.KVBridgeHTTP)
	if s.KVBridge != nil {
		kv = s.KVBridge.HTTPAddr()
	}
	clusters[KVBridgeCluster] = kv
	return clusters
}

// waitReady waits until the listener answers the debug path: the filter is
// loaded on every path the scenarios use.
func (s *Stack) waitReady(ctx context.Context) error {
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+DebugPath, nil)
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if s.PoolsFile == "" {
					return nil
				}
				err = s.discovered(ctx, len(s.Prefill), len(s.Decode))
				if err == nil {
					return nil
				}
			} else {
				err = fmt.Errorf("debug path answered %d", resp.StatusCode)
			}
		}
		last = err
		if perr := s.proxy.exited(); perr != nil {
			return fmt.Errorf("stack: proxy exited: %w\n%s", perr, s.Logs())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack: proxy not ready: %v (last: %v)\n%s", ctx.Err(), last, s.Logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// discovered checks that the filter routes by pools of the given sizes.
func (s *Stack) discovered(ctx context.Context, prefill, decode int) error {
	d, err := s.Debug(ctx)
	if err != nil {
		return err
	}
	if len(d.Pools["prefill"]) != prefill || len(d.Pools["decode"]) != decode {
		return fmt.Errorf("filter has %d prefill and %d decode endpoints, want %d and %d",
			len(d.Pools["prefill"]), len(d.Pools["decode"]), prefill, decode)
	}
	return nil
}

// Engines returns every engine, prefill first.
func (s *Stack) Engines() []*Engine {
	return append(append([]*Engine(nil), s.Prefill...), s.Decode...)
}

// Engine returns the engine named name, or nil.
func (s *Stack) Engine(name string) *Engine {
	for _, e := range s.Engines() {
		if e.Name == name {
			return e
		}
	}
	return nil
}

// ResetMocks resets every mock: records, faults, counters and latency.
// kvbridge is left alone: ids it holds expire on their own and never match
// a new request's fresh req_id.
func (s *Stack) ResetMocks(ctx context.Context) error {
	var errs []error
	for _, e := range s.Engines() {
		errs = append(errs, e.Control.Reset(ctx))
	}
	return errors.Join(errs...)
}

// ProxyName says which proxy runs the filter, with its version for real
// Envoy ("envoy 1.36.2 (…)") and "envoyemu (Envoy 1.35 emulated)" otherwise.
func (s *Stack) ProxyName() string { return s.proxy.name() }

// Logs returns the proxy's recent log lines (the last 2000).
func (s *Stack) Logs() string { return s.logs.String() }

// Close stops the proxy, then the mocks and kvbridge, and removes the
// temporary config directory. It is safe to call more than once.
func (s *Stack) Close() error {
	var errs []error
	if s.proxy != nil {
		errs = append(errs, s.proxy.close())
		s.proxy = nil
	}
	for _, p := range s.more {
		errs = append(errs, p.close())
	}
	s.more = nil
	for _, e := range append(s.Engines(), s.extra...) {
		if e.Server != nil {
			errs = append(errs, e.Server.Close())
		}
	}
	s.Prefill, s.Decode, s.extra = nil, nil, nil
	s.disc.close()
	s.disc = nil
	if s.KVBridge != nil {
		errs = append(errs, s.KVBridge.Close())
		s.KVBridge = nil
	}
	if s.tempDir != "" {
		errs = append(errs, os.RemoveAll(s.tempDir))
		s.tempDir = ""
	}
	return errors.Join(errs...)
}
