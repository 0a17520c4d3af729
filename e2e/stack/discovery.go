package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/hostcalls/discovery"
)

// discoveryRun is the stack's discovery companion: the sources and registry
// of hostcalls/discovery, served by the stack's kvbridge.
type discoveryRun struct {
	reg     *discovery.Registry
	scraper *discovery.Scraper
	cancel  context.CancelFunc
	done    chan struct{}
}

// PoolsFileName is the pools file's name in the stack's config directory.
const PoolsFileName = "pools.json"

// startDiscovery runs a file source per pool on path, and a scraper of the
// engines every scrape (0: none).
func startDiscovery(path string, scrape time.Duration) (*discoveryRun, error) {
	src := fmt.Sprintf(`{"file":{"path":%q,"interval_ms":100}}`, path)
	cfg, err := discovery.ParseConfig([]byte(`{"prefill":` + src + `,"decode":` + src + `}`))
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sources, err := cfg.Sources(log)
	if err != nil {
		return nil, err
	}
	d := &discoveryRun{reg: discovery.NewRegistry(nil), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); discovery.Run(ctx, d.reg, sources, log) }()
	if scrape > 0 {
		d.scraper = discovery.NewScraper(d.reg, scrape, log)
		wg.Add(1)
		go func() { defer wg.Done(); d.scraper.Run(ctx) }()
	}
	go func() { wg.Wait(); close(d.done) }()
	return d, nil
}

func (d *discoveryRun) handlers() map[string]http.Handler {
	h := map[string]http.Handler{"GET /v1/pools": d.reg.Handler()}
	if d.scraper != nil {
		h["GET /v1/stats"] = d.scraper.Handler()
	}
	return h
}

// CompanionScrapes counts the /metrics requests the companion made
// (Topology.CompanionScrape), 0 without.
func (s *Stack) CompanionScrapes() uint64 {
	if s.disc == nil || s.disc.scraper == nil {
		return 0
	}
	return s.disc.scraper.Scrapes.Load()
}

func (d *discoveryRun) close() {
	if d != nil {
		d.cancel()
		<-d.done
	}
}

// WritePools writes the pools file of a DiscoveryFile stack: the engines'
// endpoint entries, as the plugin configuration would list them. It writes
// a temporary file and renames it over the old one, as an operator's tools
// and a ConfigMap update do.
func (s *Stack) WritePools(prefill, decode []*Engine) error {
	if s.PoolsFile == "" {
		return fmt.Errorf("stack: no pools file (Topology.Discovery is %q)", s.Topology.Discovery)
	}
	list := func(es []*Engine) []any {
		out := make([]any, 0, len(es))
		for _, e := range es {
			out = append(out, endpointJSON(s.Topology.Mode, e))
		}
		return out
	}
	data, err := json.MarshalIndent(map[string]any{"prefill": list(prefill), "decode": list(decode)}, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.PoolsFile + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.PoolsFile)
}

// StartEngine starts one more mock engine of the stack's kind in role, by
// address, without listing it anywhere: WritePools brings it into service.
// It is named like the others (decode-2 after decode-0 and decode-1) and
// closed with the stack.
func (s *Stack) StartEngine(role mocks.Role, spec EngineSpec) (*Engine, error) {
	spec.ByAddress = true
	n := 0
	for _, e := range append(s.Engines(), s.extra...) {
		if e.Role == role {
			n++
		}
	}
	e := &Engine{Name: string(role) + "-" + strconv.Itoa(n), Role: role, Spec: spec}
	if err := s.startEngine(e, loopback(0)); err != nil {
		return nil, err
	}
	s.extra = append(s.extra, e)
	return e, nil
}

// poolsPath is where a DiscoveryFile stack keeps its pools file.
func poolsPath(dir string) string { return filepath.Join(dir, PoolsFileName) }

// StartProxy starts one more emulated proxy with the stack's bootstrap (the
// same filter configuration, clusters and engines; its own listener on a
// port the kernel picks), as a second gateway replica would be, and returns
// its URL. It is closed with the stack. Emulator stacks only.
func (s *Stack) StartProxy() (string, error) {
	if s.Topology.Proxy != Emulator {
		return "", fmt.Errorf("stack: StartProxy needs the emulator")
	}
	yml, err := os.ReadFile(s.BootstrapPath)
	if err != nil {
		return "", err
	}
	// The first proxy's listener and admin ports are in the file: let the
	// kernel pick this one's.
	for _, addr := range []string{s.proxy.listenerAddr(), s.proxy.adminAddr()} {
		_, port, _ := strings.Cut(addr, ":")
		yml = []byte(strings.Replace(string(yml), "port_value: "+port+"\n", "port_value: 0\n", 1))
	}
	p, err := startEmulator(yml, s.Topology, s.logs)
	if err != nil {
		return "", err
	}
	s.more = append(s.more, p)
	return "http://" + p.listenerAddr(), nil
}
