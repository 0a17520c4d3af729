package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
)

// EmulatedEnvoy is the Envoy release the emulator imitates: 1.35, the
// first with allow_on_headers_stop_iteration (pdroute reads the body before
// routing), and still the strict WASI profile of Envoy 1.33–1.38.
var EmulatedEnvoy = envoyemu.EnvoyVersion{Minor: 35}

// EmulatedEnvoyNoFlag is the Envoy the emulator imitates for a topology
// with NoStopIteration: 1.34, the last release without
// allow_on_headers_stop_iteration (still shipped by Istio 1.26).
var EmulatedEnvoyNoFlag = envoyemu.EnvoyVersion{Minor: 34}

// EnvoyBinEnv names the real Envoy binary; when unset, envoy is looked up
// on PATH.
const EnvoyBinEnv = "ENVOY_BIN"

// proxyRunner is a running proxy: the emulator in this process or an
// envoy child process.
type proxyRunner interface {
	listenerAddr() string
	adminAddr() string
	name() string
	// exited is non-nil once the proxy has died on its own.
	exited() error
	close() error
}

// --- emulator ---

type emulator struct {
	h       *envoyemu.Host
	version envoyemu.EnvoyVersion
}

func startEmulator(yml []byte, t Topology, logs *lineRing) (proxyRunner, error) {
	level, err := envoyemu.ParseLogLevel(t.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	var sink io.Writer = logs
	if t.LogSink != nil {
		sink = io.MultiWriter(logs, t.LogSink)
	}
	h, err := envoyemu.StartYAML(yml, envoyemu.Options{
		Concurrency: t.Workers, EnvoyVersion: t.EnvoyVersion, LogSink: sink, LogLevel: level,
	})
	if err != nil {
		return nil, fmt.Errorf("stack: envoyemu: %w", err)
	}
	return emulator{h, t.EnvoyVersion}, nil
}

func (e emulator) listenerAddr() string { return e.h.Addr() }
func (e emulator) adminAddr() string    { return e.h.AdminAddr() }
func (e emulator) name() string {
	return "envoyemu (Envoy " + e.version.String() + " emulated on wazero)"
}
func (e emulator) exited() error { return nil }
func (e emulator) close() error  { return e.h.Close() }

// Emulator returns the emulator host, or nil when real Envoy runs the
// filter. Scenarios use it only for checks real Envoy cannot expose (shared
// data, VM memory); benchmarks for VM statistics.
func (s *Stack) Emulator() *envoyemu.Host {
	if e, ok := s.proxy.(emulator); ok {
		return e.h
	}
	return nil
}

// --- real Envoy ---

type envoyProcess struct {
	cmd           *exec.Cmd
	listen, admin string
	version       string
	done          chan struct{}
	waitErr       error
	logFile       *os.File
}

// envoyReadyTimeout bounds the wait for Envoy's admin /ready.
const envoyReadyTimeout = 30 * time.Second

// EnvoyBinary finds the real Envoy binary: ENVOY_BIN, else envoy on PATH.
func EnvoyBinary() (string, error) {
	if p := os.Getenv(EnvoyBinEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvoyBinEnv, p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		return "", fmt.Errorf("no envoy binary: set %s or put envoy on PATH", EnvoyBinEnv)
	}
	return p, nil
}

// EnvoyVersion runs `envoy --version` and returns its output's first line.
func EnvoyVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", bin, err, bytes.TrimSpace(out))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

func startEnvoy(ctx context.Context, bootstrap, dir string, t Topology, logs *lineRing) (proxyRunner, error) {
	bin, err := EnvoyBinary()
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	version, err := EnvoyVersion(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	logPath := filepath.Join(dir, "envoy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	var out io.Writer = io.MultiWriter(logFile, logs)
	if t.LogSink != nil {
		out = io.MultiWriter(out, t.LogSink)
	}
	level := t.LogLevel
	if level == "info" {
		level = "warn" // Envoy's info level logs every cluster and listener update
	}
	// --disable-hot-restart: several stacks may run at once; hot restart
	// would make them share one shared-memory region.
	cmd := exec.Command(bin, "-c", bootstrap, "--concurrency", strconv.Itoa(t.Workers),
		"--log-level", level, "--disable-hot-restart")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("stack: start %s: %w", bin, err)
	}
	p := &envoyProcess{cmd: cmd, version: version, done: make(chan struct{}), logFile: logFile}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if p.listen, p.admin, err = bootstrapAddrs(bootstrap); err != nil {
		p.close()
		return nil, err
	}
	if err := p.waitReady(ctx); err != nil {
		p.close()
		return nil, fmt.Errorf("stack: envoy (%s) not ready: %w\n%s", version, err, logs.String())
	}
	return p, nil
}

// waitReady polls admin /ready until Envoy says LIVE.
func (p *envoyProcess) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, envoyReadyTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if err := p.exited(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/ready", nil)
		if resp, err := client.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "LIVE" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *envoyProcess) listenerAddr() string { return p.listen }
func (p *envoyProcess) adminAddr() string    { return p.admin }
func (p *envoyProcess) name() string         { return "envoy " + p.version }

func (p *envoyProcess) exited() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return errors.New("envoy exited with status 0")
		}
		return p.waitErr
	default:
		return nil
	}
}

// close sends SIGTERM to Envoy's process group, then SIGKILL after 5 s.
func (p *envoyProcess) close() error {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	return p.logFile.Close()
}

// bootstrapAddrs reads the listener and admin addresses back from a
// rendered bootstrap.
func bootstrapAddrs(path string) (listener, admin string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	cfg, err := envoyemu.ParseConfig(data, EmulatedEnvoy)
	if err != nil {
		return "", "", fmt.Errorf("stack: reread %s: %w", path, err)
	}
	return cfg.Listeners[0].Addr, cfg.AdminAddr, nil
}

// freePortIfZero replaces port 0 in addr with a port free right now. Envoy
// must be told its ports; the small race with other processes is accepted.
func freePortIfZero(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		return addr, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// lineRing keeps the last lines written to it.
type lineRing struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func newLineRing(max int) *lineRing { return &lineRing{max: max} }

func (r *lineRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partial = append(r.partial, p...)
	for {
		i := bytes.IndexByte(r.partial, '\n')
		if i < 0 {
			break
		}
		r.lines = append(r.lines, string(r.partial[:i]))
		r.partial = r.partial[i+1:]
		if len(r.lines) > r.max {
			r.lines = r.lines[len(r.lines)-r.max:]
		}
	}
	return len(p), nil
}

func (r *lineRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}
