package mocks

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// normalize replaces what changes between runs (ids, timestamps, ports, engine ids).
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"id":"[^"]*"`), `"id":"<id>"`},
	{regexp.MustCompile(`"created":\d+`), `"created":<created>`},
	{regexp.MustCompile(`"remote_engine_id":"[^"]*"`), `"remote_engine_id":"<engine>"`},
	{regexp.MustCompile(`"remote_request_id":"[^"]*"`), `"remote_request_id":"<request>"`},
	{regexp.MustCompile(`"remote_port":\d+`), `"remote_port":<port>`},
	{regexp.MustCompile(`model_name="[^"]*"`), `model_name="<model>"`},
}

// TestGoldenResponses pins the exact bytes of each response shape: what a router or
// a scenario parsing engine output depends on.
func TestGoldenResponses(t *testing.T) {
	servers := map[Kind]*Server{
		VLLM:   start(t, Config{Kind: VLLM, Role: Both}),
		SGLang: start(t, Config{Kind: SGLang, Role: Both}),
	}
	grouped := start(t, Config{Kind: VLLM, Role: Prefill, GroupedBlockIDs: true})
	chat := `"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"what is prefill"}]`
	prefillKV := `"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`
	for _, tc := range []struct {
		name   string
		server *Server
		path   string
		body   string
	}{
		{"vllm_completion", servers[VLLM], "/v1/completions", `{"model":"m","prompt":"golden prompt","max_tokens":5}`},
		{"vllm_completion_batch", servers[VLLM], "/v1/completions", `{"model":"m","prompt":["one","two"],"max_tokens":2,"ignore_eos":true}`},
		{"vllm_chat", servers[VLLM], "/v1/chat/completions", `{"model":"m",` + chat + `,"max_tokens":6}`},
		{"vllm_completion_stream_usage", servers[VLLM], "/v1/completions", `{"model":"m","prompt":"golden prompt","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`},
		{"vllm_chat_stream", servers[VLLM], "/v1/chat/completions", `{"model":"m",` + chat + `,"max_tokens":3,"stream":true}`},
		{"vllm_prefill", servers[VLLM], "/v1/chat/completions", `{"model":"m",` + chat + `,"max_tokens":1,"stream":false,` + prefillKV + `}`},
		{"vllm_prefill_grouped", grouped, "/v1/completions", `{"model":"m","prompt":"` + longPrompt(20) + `","max_tokens":1,"stream":false,` + prefillKV + `}`},
		{"vllm_error_min_tokens", servers[VLLM], "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1,"min_tokens":3}`},
		{"vllm_error_bad_json", servers[VLLM], "/v1/chat/completions", `{"model":`},
		{"vllm_tokenize_chat", servers[VLLM], "/tokenize", `{"model":"m",` + chat + `}`},
		{"sglang_generate", servers[SGLang], "/generate", `{"text":"golden prompt","rid":"rid-1","sampling_params":{"max_new_tokens":4}}`},
		{"sglang_generate_batch_stream", servers[SGLang], "/generate", `{"input_ids":[[1001,1002],[1003]],"stream":true,"sampling_params":{"max_new_tokens":2,"ignore_eos":true}}`},
		{"sglang_chat", servers[SGLang], "/v1/chat/completions", `{"model":"m",` + chat + `,"max_tokens":4}`},
		{"sglang_error", servers[SGLang], "/v1/completions", `{"model":"m","prompt":"x","max_tokens":0}`},
		{"sglang_generate_error", servers[SGLang], "/generate", `{"sampling_params":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, tc.server.URL()+tc.path, tc.body)
			checkGolden(t, tc.name, fmt.Sprintf("POST %s\n%s\n\n%d %s\n\n%s", tc.path, tc.body, r.status, r.header.Get("Content-Type"), r.body))
		})
	}
	for _, kind := range []Kind{VLLM, SGLang} {
		t.Run(fmt.Sprint(kind, "_metrics_idle"), func(t *testing.T) {
			idle := start(t, Config{Kind: kind})
			checkGolden(t, fmt.Sprint(kind, "_metrics_idle"), string(get(t, idle.URL()+"/metrics").body))
		})
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	for _, n := range normalizers {
		got = n.re.ReplaceAllString(got, n.with)
	}
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenResponses -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}
