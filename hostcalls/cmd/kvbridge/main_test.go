package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pdroute/pdroute/hostcalls/kvbridge"
)

// With KVBRIDGE_TEST_MAIN=1 the test binary is kvbridge itself, so the
// signal test runs the real main in a child process.
func TestMain(m *testing.M) {
	if os.Getenv("KVBRIDGE_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseOptions(t *testing.T) {
	def := kvbridge.Config{}.WithDefaults()
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
		check  func(o *options) bool
		err    string
	}{
		{"defaults", nil, env(), func(o *options) bool {
			return o.cfg.ZMQBind == "tcp://127.0.0.1:7500" && o.cfg.HTTPAddr == "127.0.0.1:7501" &&
				o.cfg.TTL == 120*time.Second && o.cfg.MaxEntries == 1_000_000 && o.cfg.MaxWaiters == def.MaxWaiters &&
				o.cfg.MaxPeers == def.MaxPeers && o.cfg.MaxMessageBytes == def.MaxMessageBytes &&
				o.cfg.HandshakeTimeout == def.HandshakeTimeout && o.logFormat == "text" && o.logLevel == "info"
		}, ""},
		{"flags", []string{"--zmq-bind=tcp://*:8500", "--http-addr", "0.0.0.0:9000", "--ttl=30s", "--max-entries=5", "--log-format=json"}, env(),
			func(o *options) bool {
				return o.cfg.ZMQBind == "tcp://*:8500" && o.cfg.HTTPAddr == "0.0.0.0:9000" && o.cfg.TTL == 30*time.Second &&
					o.cfg.MaxEntries == 5 && o.logFormat == "json"
			}, ""},
		{"environment", nil, env("KVBRIDGE_ZMQ_BIND", "tcp://127.0.0.1:1", "KVBRIDGE_HTTP_ADDR", "127.0.0.1:2", "KVBRIDGE_TTL", "1m",
			"KVBRIDGE_MAX_ENTRIES", "7", "KVBRIDGE_MAX_WAITERS", "8", "KVBRIDGE_ZMQ_MAX_PEERS", "9",
			"KVBRIDGE_ZMQ_MAX_MESSAGE_BYTES", "100", "KVBRIDGE_ZMQ_HANDSHAKE_TIMEOUT", "2s", "KVBRIDGE_LOG_LEVEL", "debug"),
			func(o *options) bool {
				return o.cfg.ZMQBind == "tcp://127.0.0.1:1" && o.cfg.HTTPAddr == "127.0.0.1:2" && o.cfg.TTL == time.Minute &&
					o.cfg.MaxEntries == 7 && o.cfg.MaxWaiters == 8 && o.cfg.MaxPeers == 9 && o.cfg.MaxMessageBytes == 100 &&
					o.cfg.HandshakeTimeout == 2*time.Second && o.logLevel == "debug"
			}, ""},
		{"flag beats environment", []string{"-ttl=5s"}, env("KVBRIDGE_TTL", "1m", "KVBRIDGE_MAX_ENTRIES", "3"),
			func(o *options) bool { return o.cfg.TTL == 5*time.Second && o.cfg.MaxEntries == 3 }, ""},
		{"bad flag value", []string{"--ttl=soon"}, env(), nil, `invalid value "soon" for flag -ttl: parse error`},
		{"bad environment value", nil, env("KVBRIDGE_MAX_ENTRIES", "many"), nil, `invalid value "many" for KVBRIDGE_MAX_ENTRIES: parse error`},
		{"unknown flag", []string{"--zmq-bnd=x"}, env(), nil, "flag provided but not defined: -zmq-bnd"},
		{"positional argument", []string{"serve"}, env(), nil, `unexpected argument "serve"`},
		{"negative ttl", []string{"--ttl=-1s"}, env(), nil, "ttl: must be positive"},
		{"bad endpoint", []string{"--zmq-bind=ipc:///x"}, env(), nil, `zmq-bind "ipc:///x": only tcp:// endpoints are supported`},
		{"bad log format", []string{"--log-format=xml"}, env(), nil, `log-format "xml": must be text or json`},
		{"bad log level", nil, env("KVBRIDGE_LOG_LEVEL", "loud"), nil, `log-level "loud": must be debug, info, warn or error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _, err := parseOptions(tt.args, tt.getenv)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(o) {
				t.Fatalf("options %+v", *o)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // prefix
		stderr string // substring
	}{
		{"version", []string{"--version"}, 0, "kvbridge dev (" + runtime.Version() + ")\n", ""},
		{"help", []string{"-h"}, 0, "Usage: kvbridge [flags]\n", ""},
		{"bad flag", []string{"--max-entries=-3"}, 2, "", "kvbridge: max-entries: must be positive\n"},
		{"address in use", []string{"--zmq-bind=tcp://127.0.0.1:0", "--http-addr=" + busy.Addr().String()}, 1, "", "address already in use"},
		{"no discovery file", []string{"--discovery=/nonexistent/discovery.json"}, 1, "", "no such file"},
		{"bad discovery file", []string{"--discovery=" + writeTemp(t, `{"prefill":{"zookeeper":{}}}`)}, 1, "", "unknown source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tt.args, env(), &stdout, &stderr)
			if code != tt.code || !strings.HasPrefix(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
			if tt.code == 2 && strings.Count(stderr.String(), "\n") != 1 {
				t.Fatalf("a bad flag must give one line, got %q", stderr.String())
			}
		})
	}
}

// SIGTERM answers pending waiters, closes everything and exits 0.
func TestSignalGracefulShutdown(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "--zmq-bind=tcp://127.0.0.1:0", "--http-addr=127.0.0.1:0")
			cmd.Env = append(os.Environ(), "KVBRIDGE_TEST_MAIN=1", "KVBRIDGE_LOG_FORMAT=json")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			logs := bufio.NewScanner(stderr)
			var listening struct{ Msg, HTTP, ZMQ string }
			for logs.Scan() {
				if err := json.Unmarshal(logs.Bytes(), &listening); err != nil {
					t.Fatalf("log line is not JSON: %s", logs.Text())
				}
				if listening.Msg == "kvbridge listening" {
					break
				}
			}
			if listening.HTTP == "" || !strings.HasPrefix(listening.ZMQ, "tcp://127.0.0.1:") {
				t.Fatalf("no listening log line: %+v", listening)
			}

			waiting := make(chan *http.Response, 1)
			go func() {
				resp, err := http.Get("http://" + listening.HTTP + "/v1/kv/x?wait_ms=30000")
				if err != nil {
					t.Error(err)
				}
				waiting <- resp
			}()
			waitForWaiter(t, listening.HTTP)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			resp := <-waiting
			if resp == nil {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || string(body) != `{"error":"kvbridge is shutting down"}`+"\n" {
				t.Fatalf("pending waiter got %d %s", resp.StatusCode, body)
			}
			var rest strings.Builder
			for logs.Scan() {
				rest.WriteString(logs.Text() + "\n")
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("kvbridge exited with %v; logs:\n%s", err, rest.String())
			}
			if !strings.Contains(rest.String(), `"msg":"kvbridge stopped"`) {
				t.Fatalf("no stop log line:\n%s", rest.String())
			}
		})
	}
}

func waitForWaiter(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "\nkvbridge_waiters 1\n") {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the waiter never registered")
}

func writeTemp(t *testing.T, content string) string {
	path := t.TempDir() + "/discovery.json"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// -discovery serves GET /v1/pools from the configured sources, and
// -discovery-scrape-interval GET /v1/stats.
func TestDiscoveryFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := writeTemp(t, `{"prefill":{"static":[{"name":"p0","address":"127.0.0.1:1"}]},"decode":{"static":[]}}`)
	cmd := exec.CommandContext(ctx, os.Args[0], "--zmq-bind=tcp://127.0.0.1:0", "--http-addr=127.0.0.1:0",
		"--discovery="+cfg, "--discovery-scrape-interval=1s")
	cmd.Env = append(os.Environ(), "KVBRIDGE_TEST_MAIN=1", "KVBRIDGE_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	logs := bufio.NewScanner(stderr)
	var listening struct{ Msg, HTTP string }
	for logs.Scan() {
		if json.Unmarshal(logs.Bytes(), &listening) == nil && listening.Msg == "kvbridge listening" {
			break
		}
	}
	go func() {
		for logs.Scan() {
		}
	}()
	for _, path := range []string{"/v1/pools", "/v1/stats"} {
		var body []byte
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get("http://" + listening.HTTP + path)
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v %s", path, err, body)
			}
		}
		if path == "/v1/pools" && !strings.Contains(string(body), `"prefill":[{"name":"p0","address":"127.0.0.1:1"}],"decode":[]`) {
			t.Errorf("%s answered %s", path, body)
		}
		if path == "/v1/stats" && !strings.HasPrefix(string(body), `{"stats":{`) {
			t.Errorf("%s answered %s", path, body)
		}
	}
}
