package mocks

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A stream arrives token by token: the first event long before the last.
func TestStreamIsIncremental(t *testing.T) {
	s := start(t, Config{Kind: VLLM, Latency: Latency{PrefillPerToken: time.Microsecond, TransferredPrefill: time.Microsecond, PerOutputToken: 25 * time.Millisecond}})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := map[string]any{"model": "m", "max_tokens": 10, "ignore_eos": true, "stream": true, "prompt": "stream me",
			"messages": []map[string]any{{"role": "user", "content": "stream me"}}}
		began := time.Now()
		resp, err := send(testCtx(t), s.URL()+path, body)
		if err != nil {
			t.Fatal(err)
		}
		var arrivals []time.Duration
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				arrivals = append(arrivals, time.Since(began))
				events = append(events, d)
			}
		}
		resp.Body.Close()
		if len(events) < 11 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("%s: %d events: %q", path, len(events), events)
		}
		first, last := arrivals[0], arrivals[len(arrivals)-1]
		if last-first < 200*time.Millisecond {
			t.Errorf("%s: first event after %v, last after %v: not incremental", path, first, last)
		}
		if got := streamText(t, events); len(Tokenize(got)) != 10 {
			t.Errorf("%s: streamed %q, want 10 tokens", path, got)
		}
	}
}

// The OpenAI APIs honour the token limits and the stream flags.
func TestOpenAIShapes(t *testing.T) {
	s := start(t, Config{Kind: VLLM})
	chat := []map[string]any{{"role": "user", "content": "shape"}}
	for _, tc := range []struct {
		name      string
		path      string
		body      map[string]any
		wantToks  int
		wantUsage bool
	}{
		{"completion max_tokens", "/v1/completions", map[string]any{"prompt": "shape", "max_tokens": 3, "ignore_eos": true}, 3, true},
		{"chat max_completion_tokens", "/v1/chat/completions", map[string]any{"messages": chat, "max_tokens": 9, "max_completion_tokens": 2, "ignore_eos": true}, 2, true},
		{"chat min_tokens", "/v1/chat/completions", map[string]any{"messages": chat, "max_tokens": 40, "min_tokens": 30}, -30, true},
		{"stream without usage", "/v1/completions", map[string]any{"prompt": "shape", "max_tokens": 4, "ignore_eos": true, "stream": true}, 4, false},
		{"stream with usage", "/v1/chat/completions", map[string]any{"messages": chat, "max_tokens": 4, "ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}, 4, true},
	} {
		r := post(t, s.URL()+tc.path, tc.body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
		}
		var got string
		var usage map[string]any
		if tc.body["stream"] == true {
			if ct := r.header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
				t.Errorf("%s: content type %q", tc.name, ct)
			}
			events := r.events()
			got = streamText(t, events)
			if events[len(events)-1] != "[DONE]" {
				t.Errorf("%s: no [DONE]", tc.name)
			}
			var last map[string]any
			json.Unmarshal([]byte(events[len(events)-2]), &last)
			usage, _ = last["usage"].(map[string]any)
			if usage != nil && len(last["choices"].([]any)) != 0 {
				t.Errorf("%s: the usage chunk must have no choices: %s", tc.name, events[len(events)-2])
			}
		} else {
			m := r.json(t)
			got = text(t, m)
			usage, _ = m["usage"].(map[string]any)
		}
		n := len(Tokenize(got))
		if tc.wantToks >= 0 && n != tc.wantToks || tc.wantToks < 0 && n < -tc.wantToks {
			t.Errorf("%s: %d tokens (%q), want %d", tc.name, n, got, tc.wantToks)
		}
		if (usage != nil) != tc.wantUsage || usage != nil && int(usage["completion_tokens"].(float64)) != n {
			t.Errorf("%s: usage %v for %d tokens", tc.name, usage, n)
		}
	}
	// Errors come in vLLM's shape.
	r := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 1, "min_tokens": 2})
	e, _ := r.json(t)["error"].(map[string]any)
	if r.status != 400 || e["type"] != "BadRequestError" || e["code"] != 400.0 || !strings.HasPrefix(e["message"].(string), "min_tokens must be") {
		t.Errorf("error %d %s", r.status, r.body)
	}
	if r := post(t, s.URL()+"/generate", map[string]any{"text": "x"}); r.status != 404 || string(r.body) != `{"detail":"Not Found"}` {
		t.Errorf("vLLM has no /generate: %d %s", r.status, r.body)
	}
	if r := get(t, s.URL()+"/health"); r.status != 200 || len(r.body) != 0 {
		t.Errorf("/health %d %q", r.status, r.body)
	}
}

// metricValue reads one sample from Prometheus text.
func metricValue(t testing.TB, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("bad sample %q", line)
			}
			return v
		}
	}
	t.Fatalf("no %s in\n%s", name, text)
	return 0
}

// The running and waiting gauges follow the requests in flight.
func TestMetricsGaugesMove(t *testing.T) {
	for _, tc := range []struct {
		kind                    Kind
		running, waiting, usage string
	}{
		{VLLM, "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"},
		{SGLang, "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			s := start(t, Config{Kind: tc.kind, MaxConcurrency: 2, KVCacheBlocks: 10,
				Latency: Latency{PrefillPerToken: time.Microsecond, TransferredPrefill: time.Microsecond, PerOutputToken: 40 * time.Millisecond}})
			gauges := func() (float64, float64, float64) {
				r := get(t, s.URL()+"/metrics")
				if ct := r.header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
					t.Fatalf("content type %q", ct)
				}
				return metricValue(t, string(r.body), tc.running), metricValue(t, string(r.body), tc.waiting), metricValue(t, string(r.body), tc.usage)
			}
			if r, w, u := gauges(); r != 0 || w != 0 || u != 0 {
				t.Fatalf("idle gauges %v %v %v", r, w, u)
			}
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					post(t, s.URL()+"/v1/completions", map[string]any{"prompt": longPrompt(20), "max_tokens": 10, "ignore_eos": true})
				}()
			}
			eventually(t, "2 running and 1 waiting", func() bool {
				r, w, u := gauges()
				return r == 2 && w == 1 && u == 0.4 // 2 requests × 2 blocks of 10
			})
			if st := stats(t, s); st.Running != 2 || st.Waiting != 1 || st.InFlight != 3 {
				t.Errorf("stats gauges %+v", st)
			}
			wg.Wait()
			if r, w, u := gauges(); r != 0 || w != 0 || u != 0 {
				t.Errorf("gauges after the requests: %v %v %v", r, w, u)
			}
			body := string(get(t, s.URL()+"/metrics").body)
			prefix := strings.SplitN(tc.running, ":", 2)[0]
			if metricValue(t, body, prefix+":prompt_tokens_total") != 60 || metricValue(t, body, prefix+":generation_tokens_total") != 30 {
				t.Errorf("token counters:\n%s", body)
			}
		})
	}
}

func TestMetricsFormat(t *testing.T) {
	s := start(t, Config{Kind: VLLM, Model: "org/model-7b"})
	body := string(get(t, s.URL()+"/metrics").body)
	for _, want := range []string{
		"# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n" +
			`vllm:num_requests_running{model_name="org/model-7b",engine="0"} 0.0` + "\n",
		"# TYPE vllm:prompt_tokens_total counter\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q in\n%s", want, body)
		}
	}
	for _, tc := range []struct {
		v    float64
		want string
	}{{0, "0.0"}, {3, "3.0"}, {0.25, "0.25"}, {123456789, "123456789.0"}, {1e-5, "1e-05"}, {1.5e-7, "1.5e-07"}, {1e16, "1e+16"}, {-2, "-2.0"}} {
		if got := pyFloat(tc.v); got != tc.want {
			t.Errorf("pyFloat(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestControlAPI(t *testing.T) {
	s := start(t, Config{Kind: VLLM, RecordLimit: 3})
	ctl := s.Control()
	ctx := testCtx(t)
	for i := range 5 {
		r := post(t, s.URL()+"/v1/completions", fmt.Sprintf(`{"prompt":"request %d","max_tokens":1}`, i), "X-Request-Id", fmt.Sprint("id-", i))
		if r.status != 200 || r.header.Get("X-Mock-Name") != s.Addresses().Name {
			t.Fatalf("%d %v", r.status, r.header)
		}
	}
	post(t, s.URL()+"/tokenize", `{"prompt":"x"}`)
	post(t, s.URL()+"/v1/completions", `{"prompt":`) // bad JSON is recorded too
	recs, err := ctl.Requests(ctx, RequestFilter{})
	must(t, err)
	if len(recs) != 3 || recs[0].Seq != 5 || recs[1].Seq != 6 || recs[2].Seq != 7 {
		t.Fatalf("ring of 3 must keep the last three, got %+v", recs)
	}
	if r := recs[0]; r.Path != "/v1/completions" || r.Method != "POST" || r.Header.Get("X-Request-Id") != "id-4" ||
		r.Body != `{"prompt":"request 4","max_tokens":1}` || r.Kind != kindDecode || r.Status != 200 || r.KV != KVRecomputed || r.Time.IsZero() {
		t.Errorf("record %+v", r)
	}
	if m, err := recs[0].JSON(); err != nil || m["max_tokens"] != 1.0 {
		t.Errorf("JSON() = %v, %v", m, err)
	}
	if recs[1].Kind != kindTokenize || recs[2].Status != 400 {
		t.Errorf("records %+v", recs[1:])
	}
	for _, tc := range []struct {
		f    RequestFilter
		want []uint64
	}{
		{RequestFilter{Since: 5}, []uint64{6, 7}},
		{RequestFilter{Path: "/tokenize"}, []uint64{6}},
		{RequestFilter{Kind: kindDecode}, []uint64{5, 7}},
	} {
		got, err := ctl.Requests(ctx, tc.f)
		must(t, err)
		var seqs []uint64
		for _, r := range got {
			seqs = append(seqs, r.Seq)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(tc.want) {
			t.Errorf("filter %+v: %v, want %v", tc.f, seqs, tc.want)
		}
	}

	// Latency can change at run time and reset restores it.
	l, err := ctl.Latency(ctx)
	must(t, err)
	if l != fast {
		t.Errorf("latency %+v", l)
	}
	l.Slowdown = 50000 // 1µs steps become 50 ms
	must(t, ctl.SetLatency(ctx, l))
	began := time.Now()
	post(t, s.URL()+"/v1/completions", `{"prompt":"slow","max_tokens":1}`)
	if time.Since(began) < 50*time.Millisecond {
		t.Errorf("slowdown ignored: %v", time.Since(began))
	}
	r := post(t, s.URL()+"/mock/latency", `{"per_output_token":"-1ms"}`)
	if r.status != 400 {
		t.Errorf("negative latency accepted: %d", r.status)
	}

	must(t, ctl.SetFaults(ctx, Fault{Type: FaultHang}))
	must(t, ctl.Reset(ctx))
	if recs, _ := ctl.Requests(ctx, RequestFilter{}); len(recs) != 0 {
		t.Errorf("records after reset: %d", len(recs))
	}
	if f, _ := ctl.Faults(ctx); len(f) != 0 {
		t.Errorf("faults after reset: %+v", f)
	}
	if l, _ := ctl.Latency(ctx); l != fast {
		t.Errorf("latency after reset: %+v", l)
	}
	if st := stats(t, s); len(st.Requests) != 0 || st.Recomputed != 0 {
		t.Errorf("stats after reset: %+v", st)
	}
	post(t, s.URL()+"/v1/completions", `{"prompt":"after","max_tokens":1}`)
	if recs, _ := ctl.Requests(ctx, RequestFilter{}); len(recs) != 1 || recs[0].Seq != 9 {
		t.Errorf("seq must keep counting across resets: %+v", recs)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, `unknown engine kind ""`},
		{Config{Kind: VLLM, Role: "leader"}, `unknown role "leader"`},
		{Config{Kind: LMCache, Role: Prefill}, "needs ZMQConnect"},
		{Config{Kind: LMCache, Role: Decode, TPSize: 2, KVAllocAddrs: []string{"127.0.0.1:0"}}, "1 KV receiver addresses for TPSize 2"},
		{Config{Kind: VLLM, BlockSize: -1}, "must be positive"},
		{Config{Kind: VLLM, Addr: "256.0.0.1:0"}, "listen 256.0.0.1:0"},
	} {
		if _, err := Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
