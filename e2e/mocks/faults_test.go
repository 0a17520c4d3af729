package mocks

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		body    string
		want    []Fault
		wantErr string
	}{
		{`{"faults":[]}`, []Fault{}, ""},
		{`{"faults":[{"type":"status"}]}`, []Fault{{Type: "status", Status: 500}}, ""},
		{`{"faults":[{"type":"status","status":503,"body":"busy","count":2,"kind":"decode"}]}`, []Fault{{Type: "status", Status: 503, Body: "busy", Count: 2, Kind: "decode"}}, ""},
		{`{"faults":[{"type":"reset","after_tokens":3,"probability":0.5}]}`, []Fault{{Type: "reset", AfterTokens: 3, Probability: 0.5}}, ""},
		{`{"faults":[{"type":"notify_drop","ranks":[1]}]}`, []Fault{{Type: "notify_drop", Ranks: []int{1}}}, ""},
		{`{"faults":[{"type":"explode"}]}`, nil, "faults[0]: unknown type \"explode\""},
		{`{"faults":[{"type":"status","status":99}]}`, nil, "faults[0]: status 99 out of range"},
		{`{"faults":[{"type":"hang"},{"type":"delay"}]}`, nil, "faults[1]: delay needs a positive delay_ms"},
		{`{"faults":[{"type":"hang","probability":1.5}]}`, nil, "probability must be in [0, 1]"},
		{`{"faults":[{"type":"hang","count":-1}]}`, nil, "count must not be negative"},
		{`{"faults":[{"type":"hang","kind":"tokenize"}]}`, nil, "kind must be prefill, decode or empty"},
		{`{"faults":[{"type":"hang","after_tokens":-1}]}`, nil, "must not be negative"},
		{`{"faults":[{"type":"hang","colour":"red"}]}`, nil, `unknown field "colour"`},
		{`[]`, nil, "faults: json: cannot unmarshal"},
	} {
		got, err := parseFaults([]byte(tc.body))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.body, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("%s: %+v, %v", tc.body, got, err)
		}
		for i := range got {
			if got[i].Type != tc.want[i].Type || got[i].Status != tc.want[i].Status || got[i].Count != tc.want[i].Count ||
				got[i].Body != tc.want[i].Body || got[i].Kind != tc.want[i].Kind || got[i].AfterTokens != tc.want[i].AfterTokens ||
				got[i].Probability != tc.want[i].Probability || len(got[i].Ranks) != len(tc.want[i].Ranks) {
				t.Errorf("%s: fault %d = %+v, want %+v", tc.body, i, got[i], tc.want[i])
			}
		}
	}
}

func TestFaultSetTake(t *testing.T) {
	types := func(fs []Fault) string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Type)
		}
		return strings.Join(out, ",")
	}
	fs := newFaultSet(1)
	fs.set([]Fault{
		{Type: FaultStatus, Status: 503, Count: 2},
		{Type: FaultStatus, Status: 500, Count: 1}, // same type: waits its turn
		{Type: FaultDelay, DelayMS: 5, Kind: kindPrefill},
		{Type: FaultHang, Paths: []string{"/metrics"}},
		{Type: FaultNotifyDuplicate, Count: 1},
	})
	steps := []struct {
		path, kind string
		notify     bool
		want       string
		status     int
	}{
		{"/v1/completions", kindDecode, false, "status", 503},
		{"/v1/completions", kindPrefill, false, "status,delay", 503},
		{"/v1/completions", kindDecode, false, "status", 500},
		{"/v1/completions", kindDecode, false, "", 0},
		{"/tokenize", kindPrefill, false, "", 0}, // not an inference path, not listed
		{"/metrics", "metrics", false, "hang", 0},
		{"/v1/completions", kindPrefill, true, "notify_duplicate", 0},
		{"/v1/completions", kindPrefill, true, "", 0},
		{"/v1/completions", kindPrefill, false, "delay", 0},
	}
	for i, st := range steps {
		got := fs.take(st.path, st.kind, st.notify)
		if types(got) != st.want {
			t.Errorf("step %d: took %q, want %q", i, types(got), st.want)
		}
		if st.status != 0 && (len(got) == 0 || got[0].Status != st.status) {
			t.Errorf("step %d: status %+v, want %d", i, got, st.status)
		}
	}
	if left := types(fs.snapshot()); left != "delay,hang" {
		t.Errorf("left %q, want the unlimited faults delay,hang", left)
	}

	fs.set([]Fault{{Type: FaultReset, Probability: 0.25}})
	hits := 0
	for range 4000 {
		hits += len(fs.take("/generate", kindDecode, false))
	}
	if hits < 800 || hits > 1200 {
		t.Errorf("probability 0.25 hit %d of 4000", hits)
	}
	a, b := newFaultSet(7), newFaultSet(7)
	a.set([]Fault{{Type: FaultReset, Probability: 0.5}})
	b.set([]Fault{{Type: FaultReset, Probability: 0.5}})
	for i := range 100 {
		if len(a.take("/generate", kindDecode, false)) != len(b.take("/generate", kindDecode, false)) {
			t.Fatalf("step %d: the same seed gave a different outcome", i)
		}
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	s := start(t, Config{Kind: VLLM, Latency: Latency{PerOutputToken: 2 * time.Millisecond, PrefillPerToken: time.Microsecond, TransferredPrefill: time.Microsecond}})
	ctl := s.Control()
	ctx := testCtx(t)
	completion := map[string]any{"model": "m", "prompt": "fault me", "max_tokens": 8, "ignore_eos": true}
	streamed := map[string]any{"model": "m", "prompt": "fault me", "max_tokens": 8, "ignore_eos": true, "stream": true}

	t.Run("status next N with default body", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx, Fault{Type: FaultStatus, Status: 503, Count: 2}))
		for i, want := range []int{503, 503, 200} {
			r := post(t, s.URL()+"/v1/completions", completion)
			if r.status != want {
				t.Fatalf("request %d: status %d, want %d", i, r.status, want)
			}
			if want == 503 {
				e := r.json(t)["error"].(map[string]any)
				if e["message"] != "mock: injected fault" || e["type"] != "ServiceUnavailableError" || e["code"] != 503.0 {
					t.Errorf("error body %s", r.body)
				}
			}
		}
	})
	t.Run("status with verbatim body", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx, Fault{Type: FaultStatus, Status: 400, Body: "plain words", Count: 1}))
		r := post(t, s.URL()+"/v1/completions", completion)
		if r.status != 400 || string(r.body) != "plain words" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
			t.Errorf("got %d %q %q", r.status, r.body, r.header.Get("Content-Type"))
		}
	})
	t.Run("hang until the client leaves", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx, Fault{Type: FaultHang, Count: 1}))
		cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		began := time.Now()
		_, err := send(cctx, s.URL()+"/v1/completions", completion)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) < 150*time.Millisecond {
			t.Fatalf("a hung request must only end with the client, got %v after %v", err, time.Since(began))
		}
		eventually(t, "the hung handler to end", func() bool { return stats(t, s).InFlight == 0 })
		recs, _ := ctl.Requests(ctx, RequestFilter{})
		last := recs[len(recs)-1]
		if !last.Aborted || last.Status != 0 || len(last.Faults) != 1 || last.Faults[0] != "hang" {
			t.Errorf("record %+v", last)
		}
	})
	t.Run("reset before the response", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx, Fault{Type: FaultReset, Count: 1}))
		resp, err := send(ctx, s.URL()+"/v1/completions", completion)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("want a connection error, got %d", resp.StatusCode)
		}
		if r := post(t, s.URL()+"/v1/completions", completion); r.status != 200 {
			t.Errorf("the next request: %d", r.status)
		}
	})
	t.Run("reset mid-stream", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx, Fault{Type: FaultReset, AfterTokens: 3, Count: 1}))
		resp, err := send(ctx, s.URL()+"/v1/completions", streamed)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || err == nil {
			t.Fatalf("want a 200 stream cut short, got %d, err %v", resp.StatusCode, err)
		}
		if events := (response{body: body}).events(); len(events) != 3 {
			t.Errorf("got %d events before the reset, want 3: %q", len(events), body)
		}
	})
	t.Run("delay", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx, Fault{Type: FaultDelay, DelayMS: 120, Count: 1}))
		began := time.Now()
		if r := post(t, s.URL()+"/v1/completions", completion); r.status != 200 || time.Since(began) < 120*time.Millisecond {
			t.Errorf("status %d after %v", r.status, time.Since(began))
		}
	})
	t.Run("paths and kind filters", func(t *testing.T) {
		must(t, ctl.SetFaults(ctx,
			Fault{Type: FaultStatus, Status: 500, Paths: []string{"/metrics", "/tokenize"}},
			Fault{Type: FaultStatus, Status: 502, Kind: kindPrefill}))
		if r := get(t, s.URL()+"/metrics"); r.status != 500 {
			t.Errorf("/metrics: %d", r.status)
		}
		if r := post(t, s.URL()+"/tokenize", map[string]any{"prompt": "a"}); r.status != 500 {
			t.Errorf("/tokenize: %d", r.status)
		}
		if r := post(t, s.URL()+"/v1/completions", completion); r.status != 200 {
			t.Errorf("a decode hit a prefill-only fault: %d", r.status)
		}
		prefill := map[string]any{"prompt": "p", "max_tokens": 1, "kv_transfer_params": map[string]any{"do_remote_decode": true}}
		if r := post(t, s.URL()+"/v1/completions", prefill); r.status != 502 {
			t.Errorf("prefill: %d", r.status)
		}
		if r := get(t, s.URL()+"/health"); r.status != 200 {
			t.Errorf("/health: %d", r.status)
		}
		left, _ := ctl.Faults(ctx)
		if len(left) != 2 {
			t.Errorf("unlimited faults must stay, got %+v", left)
		}
	})
	t.Run("bad fault list", func(t *testing.T) {
		err := ctl.SetFaults(ctx, Fault{Type: "explode"})
		if err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("got %v", err)
		}
	})
	must(t, ctl.SetFaults(ctx))
	st := stats(t, s)
	for typ, n := range map[string]int64{"status": 6, "hang": 1, "reset": 2, "delay": 1} {
		if st.Faults[typ] != n {
			t.Errorf("faults[%s] = %d, want %d (%v)", typ, st.Faults[typ], n, st.Faults)
		}
	}
	if st.ClientAborts != 1 { // the hang; resets are the mock's doing
		t.Errorf("client_aborts %d, want 1", st.ClientAborts)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzParseFaults(f *testing.F) {
	f.Add(`{"faults":[{"type":"status","status":503,"count":2,"paths":["/metrics"]}]}`)
	f.Add(`{"faults":[{"type":"notify_drop","ranks":[0,1],"probability":0.5},{"type":"delay","delay_ms":5}]}`)
	f.Add(`{"faults":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		faults, err := parseFaults([]byte(body))
		if err != nil {
			return
		}
		for _, ft := range faults {
			if ft.Count < 0 || ft.Probability < 0 || ft.Probability > 1 || (ft.Type == FaultStatus && (ft.Status < 200 || ft.Status > 599)) {
				t.Fatalf("accepted %+v", ft)
			}
		}
		fs := newFaultSet(1)
		fs.set(faults)
		fs.take("/v1/completions", kindPrefill, false)
		fs.take("/v1/completions", kindPrefill, true)
	})
}
