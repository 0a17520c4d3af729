package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/filter/config"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		want  options
		error string
	}{
		{name: "defaults", want: options{proxy: "emulator", mode: config.ModeNIXL}},
		{name: "demo picks auto", args: []string{"-demo"}, want: options{demo: true, proxy: "auto", mode: config.ModeNIXL}},
		{name: "explicit proxy wins", args: []string{"-demo", "-proxy", "emulator"}, want: options{demo: true, proxy: "emulator", mode: config.ModeNIXL}},
		{name: "mode from env", env: map[string]string{modeEnv: "sglang"}, want: options{proxy: "emulator", mode: config.ModeSGLang}},
		{name: "addr from env", env: map[string]string{addrEnv: "0.0.0.0:18000"}, want: options{proxy: "emulator", mode: config.ModeNIXL}},
		{name: "bad proxy", args: []string{"-proxy", "nginx"}, error: `-proxy "nginx": want emulator, envoy or auto`},
		{name: "bad mode", env: map[string]string{modeEnv: "vllm"}, error: `PDROUTE_DEV_MODE="vllm": want nixl, orchestrated, lmcache or sglang`},
		{name: "bad addr", env: map[string]string{addrEnv: "localhost:1"}, error: `PDROUTE_DEV_ADDR="localhost:1": want IP:port`},
		{name: "stray argument", args: []string{"now"}, error: `unexpected argument "now"`},
		{name: "wasm only", args: []string{"-wasm"}, want: options{wasm: true, proxy: "emulator", mode: config.ModeNIXL}},
		{name: "file discovery", env: map[string]string{discoveryEnv: "file"}, want: options{proxy: "emulator", mode: config.ModeNIXL, discovery: "file"}},
		{name: "bad discovery", env: map[string]string{discoveryEnv: "consul"}, error: `PDROUTE_DEV_DISCOVERY="consul": want "file" or nothing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOptions(tc.args, env(tc.env), io.Discard)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("error %v, want %q", err, tc.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantAddr := "127.0.0.1:10000"
			if a := tc.env[addrEnv]; a != "" {
				wantAddr = a
			}
			if got.listener.String() != wantAddr {
				t.Errorf("listener %s, want %s", got.listener, wantAddr)
			}
			got.listener = tc.want.listener
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDemo runs `make demo` in every mode (on the emulator, with no envoy
// binary to find) and checks what a first-time user is told.
func TestDemo(t *testing.T) {
	t.Setenv("ENVOY_BIN", "/nonexistent/envoy")
	for _, mode := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
		t.Run(string(mode), func(t *testing.T) {
			var out, errs bytes.Buffer
			code := run([]string{"-demo"}, env(map[string]string{modeEnv: string(mode)}), &out, &errs, nil)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errs)
			}
			o := out.String()
			short := "direct" // sglang disaggregates everything (see stack.DevTopology)
			if mode == config.ModeSGLang {
				short = "disagg"
			}
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`no envoy binary was found .* Envoy emulator`),
				regexp.MustCompile(`1\. a short prompt .*\n\s+path\s+` + short + ` `),
				regexp.MustCompile(`2\. a long prompt .*\n\s+path\s+disagg `),
				regexp.MustCompile(`3\. a long prompt, streamed .*\n\s+path\s+disagg `),
				regexp.MustCompile(`(?s)2\. a long prompt .*?prefill\s+prefill-\d.*?decode\s+decode-\d.*?KV\s+transferred `),
				regexp.MustCompile(`(?s)3\. .*?KV\s+transferred .*?first token after [\d.]+ ms, whole answer after [\d.]+ ms`),
			} {
				if !want.MatchString(o) {
					t.Errorf("output does not match %s:\n%s", want, o)
				}
			}
		})
	}
}

func TestWasmFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-wasm"}, env(nil), &out, io.Discard, nil); code != 0 {
		t.Fatalf("exit %d", code)
	}
	path := strings.TrimSpace(out.String())
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Errorf("printed %q: not a wasm module (%v)", path, err)
	}
}

// TestDev runs `make dev` on free ports, checks the banner and that the
// listener serves, then stops it with a signal.
func TestDev(t *testing.T) {
	devPorts.Admin, devPorts.EngineBase, devPorts.KVBridgeZMQ, devPorts.KVBridgeHTTP = 0, 0, 0, 0
	devConfigDir = t.TempDir()
	sig := make(chan os.Signal, 1)
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(nil, env(map[string]string{modeEnv: "lmcache", addrEnv: "127.0.0.1:0"}), out, io.Discard, sig)
	}()
	url := regexp.MustCompile(`listener\s+(http://\S+)`)
	deadline := time.Now().Add(2 * time.Minute)
	var m []string
	for m == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no banner:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
		m = url.FindStringSubmatch(out.String())
		if m != nil && !strings.Contains(out.String(), "Stop with Ctrl-C") {
			m = nil
		}
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(m[1] + "/_pdroute/state")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("debug path: %d", resp.StatusCode)
	}
	o := out.String()
	for _, want := range []string{"mode lmcache", "kvbridge    http://127.0.0.1:", "envoy.yaml  " + devConfigDir, "prefill-0", "decode-1", "curl -sD-"} {
		if !strings.Contains(o, want) {
			t.Errorf("banner lacks %q:\n%s", want, o)
		}
	}
	sig <- os.Interrupt
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop on SIGINT")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevDiscovery runs `PDROUTE_DEV_DISCOVERY=file make dev` on free ports:
// the banner names the pools file, and a decode engine started by hand and
// added to the file serves requests.
func TestDevDiscovery(t *testing.T) {
	devPorts.Admin, devPorts.EngineBase, devPorts.KVBridgeZMQ, devPorts.KVBridgeHTTP = 0, 0, 0, 0
	devConfigDir = t.TempDir()
	sig := make(chan os.Signal, 1)
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(nil, env(map[string]string{discoveryEnv: "file", addrEnv: "127.0.0.1:0"}), out, io.Discard, sig)
	}()
	defer func() {
		sig <- os.Interrupt
		if code := <-done; code != 0 {
			t.Errorf("exit %d", code)
		}
	}()
	banner := regexp.MustCompile(`(?s)listener\s+(http://\S+).*pools file  (\S+)`)
	var m []string
	for deadline := time.Now().Add(2 * time.Minute); m == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no banner:\n%s", out.String())
		}
		if strings.Contains(out.String(), "Stop with Ctrl-C") {
			m = banner.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("banner without a pools file:\n%s", out.String())
			}
		}
	}
	url, path := m[1], m[2]
	srv, err := mocks.Start(mocks.Config{Kind: mocks.VLLM, Role: mocks.Decode, Name: "decode-9"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pools map[string][]map[string]any
	if err := json.Unmarshal(data, &pools); err != nil || len(pools["decode"]) != 2 {
		t.Fatalf("pools file %s: %v", data, err)
	}
	pools["decode"] = append(pools["decode"], map[string]any{"name": "decode-9", "address": srv.Addr()})
	data, _ = json.Marshal(pools)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"mock-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if resp.Header.Get("x-pdroute-decode") == "decode-9" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the engine added to the pools file never served")
		}
	}
}
