package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
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
		{name: "module", args: []string{"-module", "build/pdroute.wasm"}, want: options{module: "build/pdroute.wasm", proxy: "emulator", mode: config.ModeNIXL}},
		{name: "ports from env", env: map[string]string{adminPortEnv: "19901", enginePortEnv: "18100", kvbridgePortEnv: "0"},
			want: options{proxy: "emulator", mode: config.ModeNIXL, ports: stack.Ports{Listener: 10000, Admin: 19901, EngineBase: 18100}}},
		{name: "bad port", env: map[string]string{enginePortEnv: "65534"}, error: `PDROUTE_DEV_ENGINE_PORT="65534": want a port number`},
		{name: "not a port", env: map[string]string{adminPortEnv: "admin"}, error: `PDROUTE_DEV_ADMIN_PORT="admin": want a port number`},
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
			if tc.want.ports == (stack.Ports{}) {
				tc.want.ports = stack.DevPorts
				tc.want.ports.KVBridgeHTTP = tc.want.ports.KVBridgeZMQ + 1
			}
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
	for _, stopIter := range []string{"on", "off"} {
		for _, mode := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
			t.Run(string(mode)+"/stop_iteration_"+stopIter, func(t *testing.T) {
				var out, errs bytes.Buffer
				code := run([]string{"-demo"}, env(map[string]string{modeEnv: string(mode), stopIterEnv: stopIter}), &out, &errs, nil)
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errs)
				}
				o := out.String()
				short := "direct" // sglang disaggregates everything (see stack.DevTopology)
				if mode == config.ModeSGLang {
					short = "disagg"
				}
				long := "disagg"
				way := `requests: body way`
				if stopIter == "off" {
					way = `requests: headers way: the wasm filter has no allow_on_headers_stop_iteration`
					if mode == config.ModeLMCache {
						long = "direct" // chat; /v1/completions is request 4
					}
				}
				wants := []*regexp.Regexp{
					regexp.MustCompile(`no envoy binary was found .* Envoy emulator`),
					regexp.MustCompile(regexp.QuoteMeta(way)),
					regexp.MustCompile(`1\. a short prompt .*\n\s+path\s+` + short + ` `),
					regexp.MustCompile(`2\. a long prompt .*\n\s+path\s+` + long + ` `),
					regexp.MustCompile(`3\. a long prompt, streamed .*\n\s+path\s+` + long + ` `),
				}
				if long == "disagg" {
					wants = append(wants,
						regexp.MustCompile(`(?s)2\. a long prompt .*?prefill\s+prefill-\d.*?decode\s+decode-\d.*?KV\s+transferred `),
						regexp.MustCompile(`(?s)3\. .*?KV\s+transferred .*?first token after [\d.]+ ms, whole answer after [\d.]+ ms`))
				} else {
					wants = append(wants,
						regexp.MustCompile(`(?s)4\. a long prompt to /v1/completions, streamed .*?path\s+disagg .*?KV\s+transferred .*?first token after`))
				}
				for _, want := range wants {
					if !want.MatchString(o) {
						t.Errorf("output does not match %s:\n%s", want, o)
					}
				}
			})
		}
	}
}

// TestDemoRunsGivenModule: make demo passes build/pdroute.wasm, and the
// stack runs exactly that file, without building another (issue 31).
func TestDemoRunsGivenModule(t *testing.T) {
	t.Setenv("ENVOY_BIN", "/nonexistent/envoy")
	built, err := wasmbuild.Build(stack.PluginPackage)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(t.TempDir(), "shipped.wasm")
	if err := os.WriteFile(module, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PDROUTE_WASM_CACHE", t.TempDir()) // a build would land here
	var out, errs bytes.Buffer
	if code := run([]string{"-demo", "-proxy", "emulator", "-module", module}, env(nil), &out, &errs, nil); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errs)
	}
	if want := fmt.Sprintf("with the module %s (%d bytes)", module, len(b)); !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, &out)
	}
	if strings.Contains(out.String(), "first build") {
		t.Errorf("output speaks of a build:\n%s", &out)
	}
	if got, _ := filepath.Glob(filepath.Join(os.Getenv("PDROUTE_WASM_CACHE"), "*")); len(got) != 0 {
		t.Errorf("built %v though a module was given", got)
	}
	var errs2 bytes.Buffer
	if code := run([]string{"-demo", "-module", filepath.Join(t.TempDir(), "none.wasm")}, env(nil), io.Discard, &errs2, nil); code != 1 || !strings.Contains(errs2.String(), "no such file") {
		t.Errorf("a missing module: exit %d, %s", code, &errs2)
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

// startDev runs `make dev` in mode on free ports until the banner is out;
// it returns the banner, the listener's URL and a stop function that checks
// the exit on SIGINT.
func startDev(t *testing.T, mode config.Mode) (banner, url string, stop func()) {
	t.Helper()
	saved := devPorts
	devPorts.Admin, devPorts.EngineBase, devPorts.KVBridgeZMQ, devPorts.KVBridgeHTTP = 0, 0, 0, 0
	devConfigDir = t.TempDir()
	sig := make(chan os.Signal, 1)
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(nil, env(map[string]string{modeEnv: string(mode), addrEnv: "127.0.0.1:0"}), out, io.Discard, sig)
	}()
	listener := regexp.MustCompile(`listener\s+(http://\S+)`)
	deadline := time.Now().Add(2 * time.Minute)
	var m []string
	for m == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no banner:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
		m = listener.FindStringSubmatch(out.String())
		if m != nil && !strings.Contains(out.String(), "Stop with Ctrl-C") {
			m = nil
		}
	}
	devPorts = saved
	return out.String(), m[1], func() {
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
}

// TestDev runs `make dev` on free ports, checks the banner and that the
// listener serves, then stops it with a signal.
func TestDev(t *testing.T) {
	o, url, stop := startDev(t, config.ModeLMCache)
	defer stop()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url + "/_pdroute/state")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("debug path: %d", resp.StatusCode)
	}
	for _, want := range []string{"mode lmcache", "kvbridge    http://127.0.0.1:", "envoy.yaml  " + devConfigDir, "prefill-0", "decode-1", "curl -sD-"} {
		if !strings.Contains(o, want) {
			t.Errorf("banner lacks %q:\n%s", want, o)
		}
	}
}

// Issue 31: the banner's first curl example answered empty content in every
// mode, and sglang mode said a short prompt goes straight to a decoder.
func TestDevFirstExample(t *testing.T) {
	for _, mode := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
		t.Run(string(mode), func(t *testing.T) {
			banner, url, stop := startDev(t, mode)
			defer stop()
			m := regexp.MustCompile(`(?s)Try a short prompt \(([^)]*)\):\n\s+curl -sD- (\S+) .*?-d '(\{[^']*\})'`).FindStringSubmatch(banner)
			if m == nil {
				t.Fatalf("no first example in the banner:\n%s", banner)
			}
			if disagg := mode == config.ModeSGLang; disagg != strings.Contains(m[1], "every request is") || disagg == strings.Contains(m[1], "straight to a decoder") {
				t.Errorf("%s mode says the short prompt is %q", mode, m[1])
			}
			if !strings.HasPrefix(m[2], url) {
				t.Errorf("example goes to %s, listener %s", m[2], url)
			}
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(m[2], "application/json", strings.NewReader(m[3]))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var answer struct {
				Choices []struct {
					Message struct{ Content string }
				}
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d, %v", resp.StatusCode, err)
			}
			if len(answer.Choices) != 1 || strings.TrimSpace(answer.Choices[0].Message.Content) == "" || answer.Usage.CompletionTokens == 0 {
				t.Errorf("empty answer: %+v", answer)
			}
		})
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

// Issue 31: the dev stack's ports are documented where a newcomer looks
// (pdroute-dev -h, make help), and make test says how long it takes.
func TestPortsAndDurationDocumented(t *testing.T) {
	var usage bytes.Buffer
	if code := run([]string{"-h"}, env(nil), io.Discard, &usage, nil); code != 2 {
		t.Errorf("-h: exit %d", code)
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	help, err := exec.Command(makeBin, "-s", "-C", "../../..", "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{addrEnv, adminPortEnv, enginePortEnv, kvbridgePortEnv} {
		if !strings.Contains(usage.String(), v) {
			t.Errorf("pdroute-dev -h does not mention %s:\n%s", v, &usage)
		}
		if !strings.Contains(string(help), v) {
			t.Errorf("make help does not mention %s:\n%s", v, help)
		}
	}
	dry, err := exec.Command(makeBin, "-n", "--no-print-directory", "-C", "../../..", "test").Output()
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(dry), "\n")
	if !strings.Contains(first, "minutes") {
		t.Errorf("make test does not start by saying how long it takes: %q", first)
	}
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
