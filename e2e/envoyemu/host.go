package envoyemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// Options are the emulator knobs that Envoy takes as command-line flags, not
// config.
type Options struct {
	// Concurrency is the number of worker threads, each with its own VM per
	// plugin (Envoy's --concurrency). Default 2: enough to catch per-VM state
	// a plugin wrongly assumes is global, cheap on a 2-core machine.
	Concurrency int
	// EnvoyVersion selects the WASI profile and the config fields that exist.
	// Zero means DefaultEnvoyVersion (1.33, strict).
	EnvoyVersion EnvoyVersion
	// LogSink receives Envoy-style log lines; nil discards them (tests read
	// Host.Logs instead).
	LogSink io.Writer
	// LogLevel filters LogSink and is the level proxy_get_log_level reports.
	// The zero value is LevelTrace; Envoy's default is LevelInfo.
	LogLevel LogLevel
	// ShutdownTimeout bounds Close's wait for in-flight requests and for
	// roots whose proxy_on_done returned false. Default 2 s.
	ShutdownTimeout time.Duration
}

// Host is a running emulated Envoy: listeners, admin, clusters, worker
// threads and the plugin VMs.
type Host struct {
	cfg      *Config
	opts     Options
	proc     *process
	clusters map[string]*upstreamCluster
	workers  []*worker
	plugins  []*pluginRuntime
	lis      []*listenerRuntime
	admin    *http.Server
	adminLn  net.Listener
	nextConn atomic.Uint64
	rr       atomic.Uint64

	streamsDone atomic.Int64
	closeOnce   sync.Once
}

// pluginRuntime is one wasm filter config: its module and per-worker VMs.
type pluginRuntime struct {
	spec *PluginSpec
	mod  *module

	reloads, reloadFailures, reloadBackoffs atomic.Int64
	mu                                      sync.Mutex
	retired                                 []VMStats
}

func (p *pluginRuntime) retire(v *vm) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = append(p.retired, v.stats())
}

// listenerRuntime is a listener at run time.
type listenerRuntime struct {
	host   *Host
	cfg    *ListenerConfig
	plugin *pluginRuntime
	ln     net.Listener
	srv    *http.Server
}

// debugLog routes net/http's own messages to the host log at debug level.
type debugLog struct{ p *process }

func (d debugLog) Write(b []byte) (int, error) {
	d.p.logf(LevelDebug, "", "%s", strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

type workerKey struct{}
type connIDKey struct{}

// StartFile loads an Envoy bootstrap YAML file and starts it.
func StartFile(path string, opts Options) (*Host, error) {
	cfg, err := LoadConfig(path, opts.EnvoyVersion)
	if err != nil {
		return nil, err
	}
	return Start(cfg, opts)
}

// StartYAML parses bootstrap YAML and starts it.
func StartYAML(data []byte, opts Options) (*Host, error) {
	cfg, err := ParseConfig(data, opts.EnvoyVersion)
	if err != nil {
		return nil, err
	}
	return Start(cfg, opts)
}

// Start runs a validated config: for each plugin it loads the module, runs
// the base VM (initialisation only) and a canary VM (full start sequence,
// then discarded; a failure rejects the config), then one VM per worker; it
// then opens the listeners (port 0 picks a free port) and the admin listener.
func Start(cfg *Config, opts Options) (*Host, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 2
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 2 * time.Second
	}
	h := &Host{cfg: cfg, opts: opts, clusters: map[string]*upstreamCluster{}}
	h.proc = newProcess(cfg.Clusters, opts.LogSink, opts.LogLevel)
	for name, c := range cfg.Clusters {
		h.clusters[name] = newUpstreamCluster(c)
	}
	for i := 0; i < opts.Concurrency; i++ {
		h.workers = append(h.workers, newWorker(h, i))
	}
	fail := func(err error) (*Host, error) {
		h.Close()
		return nil, err
	}
	for _, lc := range cfg.Listeners {
		l := &listenerRuntime{host: h, cfg: lc}
		if lc.Plugin != nil {
			p, err := h.loadPlugin(lc.Plugin)
			if err != nil {
				return fail(fmt.Errorf("listener %q: Unable to create Wasm HTTP filter %s: %w", lc.Name, lc.Plugin.Name, err))
			}
			l.plugin = p
		}
		h.lis = append(h.lis, l)
	}
	for _, l := range h.lis {
		if err := l.listen(); err != nil {
			return fail(err)
		}
	}
	if cfg.AdminAddr != "" {
		if err := h.startAdmin(cfg.AdminAddr); err != nil {
			return fail(err)
		}
	}
	h.proc.logf(LevelInfo, "", "envoyemu started as Envoy %s with %d workers", opts.EnvoyVersion, opts.Concurrency)
	return h, nil
}

func (h *Host) loadPlugin(spec *PluginSpec) (*pluginRuntime, error) {
	mod, err := loadModule(context.Background(), spec.Code, h.opts.EnvoyVersion)
	if err != nil {
		return nil, err
	}
	p := &pluginRuntime{spec: spec, mod: mod}
	h.plugins = append(h.plugins, p)
	base, err := newVM(mod, spec, h.proc, baseEnv{}, "main")
	if err != nil {
		return nil, fmt.Errorf("Failed to initialize Wasm code: %w", err)
	}
	base.close()
	canary, err := newVM(mod, spec, h.proc, baseEnv{}, "canary")
	if err != nil {
		return nil, fmt.Errorf("Failed to initialize Wasm code: %w", err)
	}
	err = canary.startPlugin()
	canary.close()
	if err != nil {
		return nil, err
	}
	for _, w := range h.workers {
		wp := &workerPlugin{p: p, w: w, streams: map[*vm]int{}}
		var loadErr error
		w.run(func() {
			wp.cur, loadErr = wp.load()
			wp.lastLoad = time.Now()
			w.vms[p] = wp
		})
		if loadErr != nil {
			return nil, fmt.Errorf("%s: %w", w.name, loadErr)
		}
	}
	return p, nil
}

// baseEnv is the environment of the base and canary VMs on the main thread:
// their timers, posts and calls die with them.
type baseEnv struct{}

func (baseEnv) post(func())                                 {}
func (baseEnv) after(time.Duration, func()) (cancel func()) { return func() {} }
func (baseEnv) dispatch(*vm, *callout)                      {}

// newFilter is PluginConfig::createContext for a new stream on this worker:
// a stream context in the worker's VM (reloaded under FAIL_RELOAD), nothing
// under FAIL_OPEN when the VM has failed, an empty failing context under
// FAIL_CLOSED.
func (wp *workerPlugin) newFilter(s *stream) *ctxState {
	v := wp.vm()
	policy := wp.p.spec.FailurePolicy
	if v == nil || v.failed != "" {
		if policy == FailOpen {
			return nil
		}
		return &ctxState{kind: kindStream, hooks: s}
	}
	c := v.newContext(kindStream, v.root.id)
	c.hooks = s
	c.failOpen = policy == FailOpen
	c.allowStopIter = wp.p.spec.AllowOnHeadersStopIteration
	s.vm = v
	wp.streamStarted(v)
	return c
}

// dispatchCallout runs a proxy_http_call over loopback; the answer is posted
// to the calling VM's worker.
func (h *Host) dispatchCallout(w *worker, v *vm, co *callout) {
	cluster := h.clusters[co.cluster]
	ctx, cancel := context.WithCancel(context.Background())
	co.cancel = cancel
	go func() {
		defer cancel()
		res := doCallout(ctx, cluster, co)
		if res == nil {
			return
		}
		w.post(func() { v.deliverCallout(co, res) })
	}()
}

func (l *listenerRuntime) listen() error {
	ln, err := net.Listen("tcp", l.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listener %q: cannot bind %s: %w", l.cfg.Name, l.cfg.Addr, err)
	}
	l.ln = ln
	h := l.host
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(l.serve),
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          log.New(debugLog{h.proc}, "", 0),
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			w := h.workers[(h.rr.Add(1)-1)%uint64(len(h.workers))]
			ctx = context.WithValue(ctx, workerKey{}, w)
			return context.WithValue(ctx, connIDKey{}, h.nextConn.Add(1))
		},
	}
	go l.srv.Serve(ln)
	return nil
}

// match is the route table lookup: virtual host by :authority (exact, then
// "*.suffix", then "prefix.*", then "*"), then the first route whose prefix
// (on the whole :path) or path (query excluded) matches.
func (l *listenerRuntime) match(h *headerMap) *RouteConfig {
	authority, _ := h.get(":authority")
	path, _ := h.get(":path")
	vh := pickVirtualHost(l.cfg.Routes, strings.ToLower(authority))
	if vh == nil {
		return nil
	}
	noQuery, _, _ := strings.Cut(path, "?")
	for _, r := range vh.Routes {
		if r.IsPath && noQuery == r.Path || !r.IsPath && strings.HasPrefix(path, r.Prefix) {
			return r
		}
	}
	return nil
}

func pickVirtualHost(vhs []*VirtualHostConfig, host string) *VirtualHostConfig {
	var best *VirtualHostConfig
	bestRank, bestLen := 0, -1
	for _, vh := range vhs {
		for _, d := range vh.Domains {
			d = strings.ToLower(d)
			rank, n := 0, len(d)
			switch {
			case d == host:
				return vh
			case d == "*":
				rank = 1
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1:
				rank = 3
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1:
				rank = 2
			}
			if rank > bestRank || rank == bestRank && rank > 0 && n > bestLen {
				best, bestRank, bestLen = vh, rank, n
			}
		}
	}
	return best
}

// Addr returns the address of the first listener ("127.0.0.1:PORT").
func (h *Host) Addr() string { return h.lis[0].ln.Addr().String() }

// ListenerAddr returns the address of the named listener, or "".
func (h *Host) ListenerAddr(name string) string {
	for _, l := range h.lis {
		if l.cfg.Name == name && l.ln != nil {
			return l.ln.Addr().String()
		}
	}
	return ""
}

// AdminAddr returns the admin listener address, or "" without an admin block.
func (h *Host) AdminAddr() string {
	if h.adminLn == nil {
		return ""
	}
	return h.adminLn.Addr().String()
}

// Close stops the listeners (waiting up to ShutdownTimeout for in-flight
// requests), shuts every VM down (proxy_on_done, proxy_on_delete; roots
// whose on_done returned false get until the timeout to call proxy_done) and
// releases the modules. It is safe to call more than once.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.ShutdownTimeout)
		defer cancel()
		for _, l := range h.lis {
			if l.srv != nil {
				if err := l.srv.Shutdown(ctx); err != nil {
					l.srv.Close()
				}
			}
		}
		if h.admin != nil {
			h.admin.Close()
		}
		deadline := time.Now().Add(h.opts.ShutdownTimeout)
		for _, w := range h.workers {
			w.run(func() {
				for _, wp := range w.vms {
					if wp.cur != nil {
						wp.cur.shutdown()
					}
				}
			})
			for time.Now().Before(deadline) && w.pendingDone() {
				time.Sleep(10 * time.Millisecond)
			}
			w.run(func() {
				for _, wp := range w.vms {
					for v := range wp.streams {
						v.close()
					}
					if wp.cur != nil {
						wp.cur.close()
					}
				}
			})
			w.stop()
		}
		for _, p := range h.plugins {
			p.mod.close(context.Background())
		}
		for _, c := range h.clusters {
			c.transport.CloseIdleConnections()
		}
	})
	return nil
}

// pendingDone reports whether a root of this worker still waits for proxy_done.
func (w *worker) pendingDone() bool {
	pending := false
	w.run(func() {
		for _, wp := range w.vms {
			if wp.cur != nil && len(wp.cur.pendingDone) > 0 {
				pending = true
			}
		}
	})
	return pending
}

// Metric returns the value of a plugin-defined metric by the name the plugin
// gave it (without Envoy's "wasmcustom." namespace): the counter or gauge
// value, or a histogram's number of recorded values. Metrics are
// process-wide: every worker VM defining the name shares one stat.
func (h *Host) Metric(kind abispec.MetricType, name string) (uint64, bool) {
	return metricValue(h.proc, kind, name)
}

// SharedData returns a shared-data value of vmID and its CAS.
func (h *Host) SharedData(vmID, key string) ([]byte, uint32, bool) {
	return h.proc.shared.get(vmID, []byte(key))
}

// Logs returns every captured log line (host and plugin).
func (h *Host) Logs() []LogEntry { return h.proc.log.snapshot() }

// GuestLogs returns the messages the plugins logged at level.
func (h *Host) GuestLogs(level LogLevel) []string { return guestLogs(h.proc, level) }

// PluginStats describe one plugin's VMs.
type PluginStats struct {
	Name string
	// Workers has the current VM of each worker.
	Workers []VMStats
	// Retired has the VMs FAIL_RELOAD replaced.
	Retired []VMStats
	// Reloads, ReloadFailures and ReloadBackoffs count FAIL_RELOAD events
	// (Envoy's vm_reload_success, _failure and _backoff).
	Reloads, ReloadFailures, ReloadBackoffs int64
}

// Calls sums the calls into every VM of the plugin, retired ones included.
func (p PluginStats) Calls() int64 {
	var n int64
	for _, v := range append(append([]VMStats(nil), p.Workers...), p.Retired...) {
		n += v.Calls
	}
	return n
}

// Traps sums the traps of every VM of the plugin, retired ones included.
func (p PluginStats) Traps() int64 {
	var n int64
	for _, v := range append(append([]VMStats(nil), p.Workers...), p.Retired...) {
		n += v.Traps
	}
	return n
}

// Plugins reports every plugin's VMs.
func (h *Host) Plugins() []PluginStats {
	var out []PluginStats
	for _, p := range h.plugins {
		ps := PluginStats{Name: p.spec.Name, Reloads: p.reloads.Load(),
			ReloadFailures: p.reloadFailures.Load(), ReloadBackoffs: p.reloadBackoffs.Load()}
		for _, w := range h.workers {
			w.run(func() {
				if wp := w.vms[p]; wp != nil && wp.cur != nil {
					ps.Workers = append(ps.Workers, wp.cur.stats())
				}
			})
		}
		p.mu.Lock()
		ps.Retired = append([]VMStats(nil), p.retired...)
		p.mu.Unlock()
		out = append(out, ps)
	}
	return out
}

// InjectTrap makes the current VM of the named plugin on worker (every
// worker if worker < 0) trap at its next host call, as a fault inside the
// guest does (the Go runtime throwing on poll_oneoff, golang/go#78513): the
// VM fails in the middle of a callback, with whatever it had in flight, and
// the plugin's failure policy applies. It is a test hook; it returns how many
// VMs it armed.
func (h *Host) InjectTrap(plugin string, worker int) int {
	n := 0
	for _, p := range h.plugins {
		if p.spec.Name != plugin {
			continue
		}
		for _, w := range h.workers {
			if worker >= 0 && w.id != worker {
				continue
			}
			w.run(func() {
				if wp := w.vms[p]; wp != nil && wp.cur != nil && wp.cur.failed == "" {
					wp.cur.trapNext = true
					n++
				}
			})
		}
	}
	return n
}

// StreamsDone counts the streams that have ended (completed or reset).
func (h *Host) StreamsDone() int64 { return h.streamsDone.Load() }

// --- admin ---

func (h *Host) startAdmin(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin: cannot bind %s: %w", addr, err)
	}
	h.adminLn = ln
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/plain; charset=UTF-8")
		io.WriteString(w, renderText(h.proc.stats.sorted(), h.hostStats()))
	})
	mux.HandleFunc("GET /stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/plain; charset=UTF-8")
		io.WriteString(w, renderPrometheus(h.proc.stats.sorted(), h.hostStats()))
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "LIVE\n")
	})
	h.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := h.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.proc.logf(LevelError, "", "admin: %v", err)
		}
	}()
	return nil
}

// hostStats are the few Envoy stats the emulator keeps besides custom metrics.
func (h *Host) hostStats() []extraStat {
	var out []extraStat
	for _, p := range h.plugins {
		prefix := "wasm." + p.spec.Name + "."
		out = append(out,
			extraStat{prefix + "vm_reload_success", abispec.MetricTypeCounter, uint64(p.reloads.Load())},
			extraStat{prefix + "vm_reload_failure", abispec.MetricTypeCounter, uint64(p.reloadFailures.Load())},
			extraStat{prefix + "vm_reload_backoff", abispec.MetricTypeCounter, uint64(p.reloadBackoffs.Load())},
		)
	}
	return out
}
