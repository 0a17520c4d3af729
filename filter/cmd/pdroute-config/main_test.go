package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := write("valid.json", `{"mode":"nixl","threshold_tokens":512,
		"prefill":{"endpoints":[{"name":"p1","address":"10.0.0.1:8000"}]},
		"decode":{"strategy":"least_loaded","endpoints":[{"name":"d1","cluster":"d1"},{"name":"d2","cluster":"d2"}]}}`)
	always := write("always.json", `{"mode":"sglang",
		"prefill":{"endpoints":[{"name":"p1","address":"[::1]:30000"}]},
		"decode":{"endpoints":[{"name":"d1","address":"[::1]:30001"}]}}`)
	invalid := write("invalid.json", `{"mode":"lmcache","prefil":{},
		"prefill":{"endpoints":[{"name":"p1","address":"vllm-0:8000"}]},
		"decode":{"endpoints":[{"name":"d1","address":"10.0.0.2:8000"}]}}`)
	broken := write("broken.json", `{"mode":`)

	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout string
		stderr string
	}{
		{"valid", []string{"check", valid}, "", 0,
			"ok: mode nixl, disaggregate at >= 512 tokens, paths /v1/chat/completions /v1/completions /v1/responses, prefill 1 endpoint (cache_aware), decode 2 endpoints (least_loaded), on_prefill_failure fallback\n", ""},
		{"valid sglang", []string{"check", always}, "", 0,
			"ok: mode sglang, always disaggregate, paths /v1/chat/completions /v1/completions /v1/responses /generate, prefill 1 endpoint (cache_aware), decode 1 endpoint (round_robin), a failed prefill fails the request (on_prefill_failure does not apply)\n", ""},
		// issue 31: valid, but short requests would meet PD decoders that refuse them
		{"sglang with a threshold", []string{"check", "-"}, `{"mode":"sglang","threshold_tokens":512,"prefill":{"endpoints":[{"name":"p","address":"10.0.0.1:30000"}]},"decode":{"endpoints":[{"name":"d","cluster":"d"}]}}`, 0,
			"ok: mode sglang, disaggregate at >= 512 tokens, paths /v1/chat/completions /v1/completions /v1/responses /generate, prefill 1 endpoint (cache_aware), decode 1 endpoint (round_robin), a failed prefill fails the request (on_prefill_failure does not apply)\n",
			"warning: threshold_tokens: 512 in sglang mode sends requests below it straight to a decoder"},
		{"stdin", []string{"check", "-"}, `{"mode":"nixl","prefill":{"endpoints":[{"name":"p","cluster":"p"}]},"decode":{"endpoints":[{"name":"d","cluster":"d"}]}}`, 0,
			"ok: mode nixl, always disaggregate, paths /v1/chat/completions /v1/completions /v1/responses, prefill 1 endpoint (cache_aware), decode 1 endpoint (cache_aware), on_prefill_failure fallback\n", ""},
		{"every problem, one per line", []string{"check", invalid}, "", 1, "",
			"prefil: unknown field\n" +
				`prefill.endpoints[0].address: "vllm-0:8000" is not an IP:port: the host must be an IP address (ORIGINAL_DST does not resolve names; use "cluster" for DNS names)` + "\n" +
				"decode.endpoints[0].kv_receiver: is required on decode endpoints in lmcache mode\n"},
		{"syntax error", []string{"check", broken}, "", 1, "",
			"not valid JSON: unexpected end of JSON input (line 1, column 8)\n"},
		{"missing file", []string{"check", filepath.Join(dir, "nope.json")}, "", 2, "", "pdroute-config: open "},
		{"no arguments", nil, "", 2, "", "usage: pdroute-config check FILE"},
		{"unknown command", []string{"lint", valid}, "", 2, "", "usage: pdroute-config check FILE"},
		{"extra argument", []string{"check", valid, valid}, "", 2, "", "usage: pdroute-config check FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(tt.stdin), &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if stdout.String() != tt.stdout {
				t.Errorf("stdout %q\nwant   %q", stdout.String(), tt.stdout)
			}
			if tt.code == 1 && stderr.String() != tt.stderr || tt.code != 1 && !strings.HasPrefix(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q\nwant   %q", stderr.String(), tt.stderr)
			}
		})
	}
}
