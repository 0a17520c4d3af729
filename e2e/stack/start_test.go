package stack

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/hostcalls/kvbridge"
	"github.com/pdroute/pdroute/hostcalls/zmqpush"
)

// TestStartModes starts a stack per mode and checks that the generated
// plugin configuration names the mocks' real listeners and that the admin
// and debug readers work.
func TestStartModes(t *testing.T) {
	for _, tc := range []struct {
		mode  config.Mode
		check func(t *testing.T, s *Stack)
	}{
		{config.ModeNIXL, func(t *testing.T, s *Stack) {
			if e := s.Config.Decode.Endpoints[1]; e.Cluster != "decode-1" || e.Address != "" {
				t.Errorf("decode-1 endpoint %+v, want cluster decode-1", e)
			}
			if e := s.Config.Prefill.Endpoints[0]; e.Address != s.Prefill[0].Addr || e.Cluster != "" {
				t.Errorf("prefill-0 (by address) endpoint %+v, want address %s", e, s.Prefill[0].Addr)
			}
		}},
		{config.ModeOrchestrated, func(t *testing.T, s *Stack) {
			if h := s.Config.Prefill.Endpoints[1].Host; h != "127.0.0.1" {
				t.Errorf("orchestrated prefill host %q, want 127.0.0.1", h)
			}
		}},
		{config.ModeLMCache, func(t *testing.T, s *Stack) {
			for i, e := range s.Config.Decode.Endpoints {
				a := s.Decode[i].Addresses
				if r := e.KVReceiver; r == nil || jsonOf(r.InitPorts) != jsonOf(a.KVInitPorts()) || jsonOf(r.AllocPorts) != jsonOf(a.KVAllocPorts()) {
					t.Errorf("%s kv_receiver %+v, want the mock's %v %v", e.Name, e.KVReceiver, a.KVInit, a.KVAlloc)
				}
			}
			if s.KVBridge == nil || s.Config.LMCache.KVBridgeCluster != KVBridgeCluster {
				t.Fatalf("kvbridge %v cluster %q", s.KVBridge, s.Config.LMCache.KVBridgeCluster)
			}
			if v, err := s.Stat(context.Background(), "pdroute.kv_wait.waiting"); err != nil || v != 0 {
				t.Errorf("kv_wait.waiting = %d, %v", v, err)
			}
		}},
		{config.ModeSGLang, func(t *testing.T, s *Stack) {
			for i, e := range s.Config.Prefill.Endpoints {
				if want := s.Prefill[i].Addresses.BootstrapPort(); e.BootstrapPort != want || want == 0 {
					t.Errorf("%s bootstrap_port %d, want %d", e.Name, e.BootstrapPort, want)
				}
			}
		}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			topo := Topology{Mode: tc.mode}
			if tc.mode == config.ModeNIXL {
				topo.Prefill = []EngineSpec{{ByAddress: true}, {}}
			}
			s := StartT(t, topo)
			tc.check(t, s)
			ctx := context.Background()
			if v, err := s.Stat(ctx, "pdroute.requests.direct"); err != nil || v != 0 {
				t.Errorf("requests.direct = %d, %v", v, err)
			}
			if _, err := s.Stat(ctx, "pdroute.no_such_metric"); !errors.Is(err, ErrNoStat) {
				t.Errorf("missing stat: %v, want ErrNoStat", err)
			}
			if h, err := s.Histogram(ctx, "pdroute.estimated_tokens"); err != nil || h.Count != 0 {
				t.Errorf("estimated_tokens histogram %+v, %v", h, err)
			}
			d, err := s.Debug(ctx)
			if err != nil || d.Mode != string(tc.mode) || len(d.Pools["prefill"]) != 2 || len(d.Pools["decode"]) != 2 || d.Inflight() != 0 {
				t.Errorf("debug state %+v, %v", d, err)
			}
			yml, err := os.ReadFile(s.BootstrapPath)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := envoyemu.ParseConfig(yml, EmulatedEnvoy); err != nil {
				t.Errorf("written bootstrap does not load: %v", err)
			}
			if !strings.Contains(s.ProxyName(), "envoyemu") {
				t.Errorf("proxy %q", s.ProxyName())
			}
		})
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := Start(context.Background(), Topology{Mode: config.ModeNIXL, Prefill: make([]EngineSpec, 1), Decode: make([]EngineSpec, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.BootstrapPath
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary bootstrap %s not removed: %v", dir, err)
	}
}

func TestStartErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		topo Topology
		want string
	}{
		{"no mode", Topology{}, `unknown mode ""`},
		{"empty pool", Topology{Mode: config.ModeNIXL, Decode: []EngineSpec{}}, "both pools need at least one engine"},
		{"bad plugin override", Topology{Mode: config.ModeNIXL, Plugin: map[string]any{"on_prefill_failure": "retry"}}, "on_prefill_failure"},
		{"bad proxy", Topology{Mode: config.ModeNIXL, Proxy: "nginx"}, `unknown proxy "nginx"`},
		{"bad discovery", Topology{Mode: config.ModeNIXL, Discovery: "consul"}, `unknown discovery "consul"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(context.Background(), tc.topo)
			if err == nil {
				s.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("no envoy binary", func(t *testing.T) {
		t.Setenv(EnvoyBinEnv, "/nonexistent/envoy")
		_, err := Start(context.Background(), Topology{Mode: config.ModeNIXL, Proxy: Envoy})
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/envoy") {
			t.Errorf("error %v, want one naming ENVOY_BIN's path", err)
		}
	})
}

// TestKVBridgeRestart: Restart keeps both addresses, forgets the ids, and
// the new instance counts notifications.
func TestKVBridgeRestart(t *testing.T) {
	k, err := StartKVBridge("tcp://127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	zmq, httpAddr := k.ZMQEndpoint(), k.HTTPAddr()
	push := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		snd, err := zmqpush.Dial(ctx, k.ZMQEndpoint())
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close()
		if err := snd.Send(kvbridge.EncodeNotification("ProxyNotif", "r1")); err != nil {
			t.Fatal(err)
		}
	}
	waitReceived := func(n uint64) {
		deadline := time.Now().Add(5 * time.Second)
		for k.Stats().Received != n {
			if time.Now().After(deadline) {
				t.Fatalf("received %d, want %d", k.Stats().Received, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	push()
	waitReceived(1)
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if k.ZMQEndpoint() != zmq || k.HTTPAddr() != httpAddr {
		t.Errorf("addresses moved: %s %s → %s %s", zmq, httpAddr, k.ZMQEndpoint(), k.HTTPAddr())
	}
	if st := k.Stats(); st.Received != 0 || st.Entries != 0 {
		t.Errorf("restarted kvbridge remembers %+v", st)
	}
	push()
	waitReceived(1)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestEnvoyProcess drives the real-Envoy path (a child process started from
// the bootstrap file, admin /ready, free ports, log capture, shutdown) with
// envoyemu's command behind Envoy's command line, since no envoy binary is
// available here.
func TestEnvoyProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/envoyemu")
	}
	dir := t.TempDir()
	emu := filepath.Join(dir, "envoyemu")
	build := exec.Command(goBin(), "build", "-o", emu, "./e2e/envoyemu/cmd/envoyemu")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build envoyemu: %v\n%s", err, out)
	}
	standIn := filepath.Join(dir, "envoy")
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = --version ]; then echo 'envoy stand-in/1.35.0/envoyemu'; exit 0; fi\n" +
		"args=; for a in \"$@\"; do [ \"$a\" = --disable-hot-restart ] || args=\"$args $a\"; done\n" +
		"exec " + emu + " --envoy-version 1.35 $args\n"
	if err := os.WriteFile(standIn, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvoyBinEnv, standIn)
	s := StartT(t, Topology{Mode: config.ModeNIXL, Proxy: Envoy, Prefill: make([]EngineSpec, 1), Decode: make([]EngineSpec, 1)})
	if !strings.HasPrefix(s.ProxyName(), "envoy envoy stand-in/1.35.0") || s.Emulator() != nil {
		t.Errorf("proxy %q (emulator %v)", s.ProxyName(), s.Emulator() != nil)
	}
	ctx := context.Background()
	r, err := Send(ctx, nil, "POST", s.URL+"/v1/completions", []byte(`{"model":"m","prompt":"hi","max_tokens":2}`), nil)
	if err != nil || r.Status != 200 || r.Header.Get("x-pdroute-path") != "direct" {
		t.Fatalf("request through the envoy process: %v %+v", err, r)
	}
	if v, err := s.Stat(ctx, "pdroute.requests.direct"); err != nil || v != 1 {
		t.Errorf("requests.direct = %d, %v", v, err)
	}
	log, err := os.ReadFile(filepath.Join(filepath.Dir(s.BootstrapPath), "envoy.log"))
	if err != nil || !strings.Contains(string(log), "envoyemu: listening on") {
		t.Errorf("envoy.log: %v %q", err, log)
	}
	p := s.proxy.(*envoyProcess)
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if p.exited() == nil {
		t.Error("the envoy process still runs after Close")
	}
}

func goBin() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
