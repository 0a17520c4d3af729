package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/e2e/mocks"
)

// TestRunPrintsAddressesAndServes runs the command in-process for each engine and
// role, reads its one JSON line, calls the listed listeners, and stops it.
func TestRunPrintsAddressesAndServes(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(t *testing.T, a mocks.Addresses)
	}{
		{[]string{"--engine", "vllm", "--role", "prefill", "--name", "p1", "--engine-id", "eng-1"}, func(t *testing.T, a mocks.Addresses) {
			if a.Name != "p1" || a.EngineID != "eng-1" || a.SideChannel == "" || a.Bootstrap != "" {
				t.Errorf("addresses %+v", a)
			}
		}},
		{[]string{"--engine", "lmcache", "--role", "decode", "--tp", "2"}, func(t *testing.T, a mocks.Addresses) {
			if len(a.KVInit) != 2 || len(a.KVAlloc) != 2 || a.SideChannel != "" {
				t.Errorf("addresses %+v", a)
			}
		}},
		{[]string{"--engine", "sglang", "--role", "prefill", "--model", "org/m"}, func(t *testing.T, a mocks.Addresses) {
			resp, err := http.Get("http://" + a.Bootstrap + "/health")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "OK" {
				t.Errorf("bootstrap /health %q", b)
			}
		}},
	} {
		t.Run(strings.Join(tc.args[:4], " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stdoutR, stdoutW := io.Pipe()
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, tc.args, stdoutW, io.Discard)
				stdoutW.Close()
			}()
			line, err := bufio.NewReader(stdoutR).ReadBytes('\n')
			if err != nil {
				t.Fatalf("no address line: %v", err)
			}
			var a mocks.Addresses
			if err := json.Unmarshal(line, &a); err != nil || a.URL != "http://"+a.Addr || !strings.HasPrefix(a.Addr, "127.0.0.1:") {
				t.Fatalf("address line %s: %v", line, err)
			}
			tc.check(t, a)
			resp, err := http.Get(a.URL + "/health")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("/health: %v", err)
			}
			resp.Body.Close()
			st, err := mocks.NewControl(a.URL).Stats(ctx)
			if err != nil || st.Requests["health"] != 1 || st.Name != a.Name {
				t.Errorf("stats %+v, %v", st, err)
			}
			cancel() // what SIGINT does through signal.NotifyContext
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run returned %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("run did not stop")
			}
			if _, err := http.Get(a.URL + "/health"); err == nil {
				t.Error("still serving after stop")
			}
		})
	}
}

func TestRunFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `unknown engine kind ""`},
		{[]string{"--engine", "tgi"}, `unknown engine kind "tgi"`},
		{[]string{"--engine", "vllm", "--role", "router"}, `unknown role "router"`},
		{[]string{"--engine", "lmcache", "--role", "prefill"}, "needs ZMQConnect"},
		{[]string{"--engine", "vllm", "--lease", "soon"}, `invalid value "soon" for flag -lease`},
		{[]string{"--engine", "vllm", "extra"}, `unexpected arguments: ["extra"]`},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), tc.args, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
