package envoyemu

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

func newKitchenDriver(t *testing.T, opts DriverOptions) *Driver {
	t.Helper()
	d, err := NewDriver(pluginCode(t, "kitchen"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if !d.StartVM() || !d.StartPlugin() {
		t.Fatalf("start: %s", d.Failed())
	}
	return d
}

func TestDriverHTTPCall(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{Clusters: []string{"up"}})
	id := d.InitializeHttpContext()
	if a := d.CallOnRequestHeaders(id, [][2]string{{":path", "/call?cluster=up&path=/x&timeout=250"}, {":method", "GET"}}, true); a != types.ActionPause {
		t.Fatalf("action %v", a)
	}
	calls := d.HTTPCallouts()
	if d.RootContextID() != 1 || id != 2 {
		t.Errorf("context ids root %d stream %d, want 1 and 2", d.RootContextID(), id)
	}
	if len(calls) != 1 || calls[0].Token != 4 || calls[0].Cluster != "up" || calls[0].ContextID != id || calls[0].Timeout.Milliseconds() != 250 {
		t.Fatalf("callouts %+v", calls)
	}
	if p := d.PendingHTTPCallouts(); len(p) != 1 || p[0] != 4 {
		t.Errorf("pending %v", p)
	}
	d.CallOnHttpCallFailure(4)
	r := d.SentLocalResponse(id)
	if r == nil || string(r.Body) != `headers=0 status= body="" getstatus=11/reset/ok` {
		t.Fatalf("after a failed call: %+v", r)
	}
	if len(d.PendingHTTPCallouts()) != 0 || len(d.HTTPCallouts()) != 1 {
		t.Error("the answered call is still pending or forgotten")
	}
	id2 := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id2, [][2]string{{":path", "/call?cluster=nope&path=/x"}, {":method", "GET"}}, true)
	if r := d.SentLocalResponse(id2); r == nil || string(r.Body) != "dispatch: error status returned by host: bad argument" {
		t.Errorf("unknown cluster: %+v", r)
	}
}

func TestDriverResumeAndBufferLimit(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{BufferLimit: 10})
	id := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id, [][2]string{{":path", "/resume?cluster=c&path=/"}, {":method", "GET"}}, false)
	d.CallOnHttpCallResponse(4, [][2]string{{":status", "200"}}, nil, []byte("ok"))
	if d.ContinueCount(id, false) != 1 || d.CurrentHttpStreamAction(id) != types.ActionContinue {
		t.Errorf("continue count %d", d.ContinueCount(id, false))
	}
	if got := d.RequestHeaders(id); got[len(got)-1] != [2]string{"x-call-status", "200"} {
		t.Errorf("headers %v", got)
	}
	id2 := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id2, [][2]string{{":path", "/body-buffer"}, {":method", "POST"}}, false)
	d.CallOnRequestBody(id2, []byte("12345678"), false)
	d.CallOnRequestBody(id2, []byte("9abc"), false)
	if r := d.SentLocalResponse(id2); r == nil || r.StatusCode != 413 || r.Details != "request_payload_too_large" {
		t.Errorf("over the limit: %+v", r)
	}
	id3 := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id3, [][2]string{{":path", "/close"}, {":method", "GET"}}, true)
	if d.ResetDetails(id3) != "wasm_close_stream" {
		t.Errorf("reset %q", d.ResetDetails(id3))
	}
	d.CompleteHttpContext(id3)
	if n, ok := d.Metric(abispec.MetricTypeCounter, "kitchen_requests"); !ok || n != 3 {
		t.Errorf("kitchen_requests %d", n)
	}
	if g, _ := d.Metric(abispec.MetricTypeGauge, "kitchen.inflight"); g != 2 {
		t.Errorf("inflight %d, want 2 (one stream done)", g)
	}
	if lines := d.GuestLogs(LevelInfo); !strings.HasPrefix(lines[len(lines)-1], "stream ") || !strings.HasSuffix(lines[len(lines)-1], ": done") {
		t.Errorf("last log %q", lines[len(lines)-1])
	}
}

func TestDriverTrap(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{})
	id := d.InitializeHttpContext()
	d.CallOnRequestHeaders(id, [][2]string{{":path", "/trap"}, {":method", "GET"}}, true)
	if !strings.Contains(d.Failed(), "Function: proxy_on_request_headers failed") {
		t.Fatalf("failed = %q", d.Failed())
	}
	if r := d.SentLocalResponse(id); r == nil || r.StatusCode != 503 || r.Details != "wasm_fail_stream" || r.GRPCStatus != 14 {
		t.Errorf("fail-closed reply %+v", r)
	}
	if st := d.Stats(); st.Traps != 1 || st.MemoryPages == 0 {
		t.Errorf("stats %+v", st)
	}
	calls := d.Stats().Calls
	d.Tick()
	if d.Stats().Calls != calls {
		t.Error("a failed VM was called again")
	}
}

// TestDriverInjectTrap: the VM traps at the next host call after InjectTrap,
// inside whatever callback makes it.
func TestDriverInjectTrap(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{})
	d.InjectTrap()
	d.Tick() // the kitchen plugin logs on every tick
	if !strings.Contains(d.Failed(), "proxy_on_tick failed: injected trap") {
		t.Fatalf("failed = %q", d.Failed())
	}
}

// TestDriverBufferedChunksInRoom: with the length announced, the chunks after
// the first are read into the buffer's room; the plugin still sees the whole
// body, its edits of head and tail land, and a chunk that no longer fits
// (more than announced) is appended.
func TestDriverBufferedChunksInRoom(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{})
	for _, tc := range []struct {
		announced int
		chunks    []string
	}{
		{9, []string{"abc", "def", "ghi"}},
		{6, []string{"abc", "def", "ghi"}}, // the last does not fit the room
		{0, []string{"abc", "def", "ghi"}}, // no content-length: no room
	} {
		id := d.InitializeHttpContext()
		h := [][2]string{{":path", "/body-rewrite"}, {":method", "POST"}}
		if tc.announced > 0 {
			h = append(h, [2]string{"content-length", strconv.Itoa(tc.announced)})
		}
		d.CallOnRequestHeaders(id, h, false)
		var sent []byte
		for i, c := range tc.chunks {
			chunk := []byte(c)
			d.CallOnRequestBody(id, chunk, i == len(tc.chunks)-1)
			copy(chunk, "XXX") // the caller's slice is not kept
			sent = append(sent, c...)
		}
		if got, want := string(d.RequestBody(id)), "head-"+string(sent)+"-tail"; got != want {
			t.Errorf("announced %d: body %q, want %q", tc.announced, got, want)
		}
	}
}

// TestDriverForgetAnswered: an answered call leaves the history, a pending
// one stays.
func TestDriverForgetAnswered(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{ForgetAnswered: true})
	ids := []uint32{d.InitializeHttpContext(), d.InitializeHttpContext()}
	for _, id := range ids {
		d.CallOnRequestHeaders(id, [][2]string{{":path", "/resume?cluster=c&path=/"}, {":method", "GET"}}, false)
	}
	pending := d.PendingHTTPCallouts()
	if len(pending) != 2 || len(d.HTTPCallouts()) != 2 {
		t.Fatalf("pending %v, history %d", pending, len(d.HTTPCallouts()))
	}
	d.CallOnHttpCallResponse(pending[0], [][2]string{{":status", "200"}}, nil, nil)
	if h := d.HTTPCallouts(); len(h) != 1 || h[0].Token != pending[1] {
		t.Errorf("history after one answer %+v, want only %d", h, pending[1])
	}
}

// TestDriverReusesBodyMemory: a stream's buffered body and a forgotten
// call's body serve the next ones (the same memory, not zeroed in between),
// while what a test was handed (RequestBody, HTTPCallouts) keeps its bytes
// and each stream still sees only its own body.
func TestDriverReusesBodyMemory(t *testing.T) {
	d := newKitchenDriver(t, DriverOptions{ForgetAnswered: true})
	var fronts []*byte
	var bodies [][]byte
	for i, text := range []string{"first body, longer", "second"} {
		id := d.InitializeHttpContext()
		d.CallOnRequestHeaders(id, [][2]string{{":path", "/body-buffer"}, {":method", "POST"},
			{"content-length", strconv.Itoa(len(text))}}, false)
		d.CallOnRequestBody(id, []byte(text[:3]), false)
		d.CallOnRequestBody(id, []byte(text[3:]), true)
		fronts = append(fronts, &d.streams[id].reqBuf.front[0])
		bodies = append(bodies, d.RequestBody(id))
		if got := string(bodies[i]); got != text {
			t.Errorf("stream %d: body %q, want %q", i, got, text)
		}
		d.CompleteHttpContext(id)
	}
	if fronts[0] != fronts[1] {
		t.Error("the second stream's buffer is not the first one's memory")
	}
	if string(bodies[0]) != "first body, longer" {
		t.Errorf("a body handed out changed: %q", bodies[0])
	}

	var seen []HTTPCallout
	var mem []*byte
	for i, body := range []string{"call-body-one", "two"} {
		id := d.InitializeHttpContext()
		d.CallOnRequestHeaders(id, [][2]string{{":path", "/call?cluster=c&path=/x&body=" + body}, {":method", "GET"}}, true)
		calls := d.HTTPCallouts()
		if len(calls) != 1 || string(calls[0].Body) != body {
			t.Fatalf("call %d: %+v", i, calls)
		}
		seen = append(seen, calls[0])
		mem = append(mem, &d.history[0].Body[0])
		d.CallOnHttpCallResponse(calls[0].Token, [][2]string{{":status", "200"}}, nil, []byte("answer"))
		if r := d.SentLocalResponse(id); r == nil || !strings.Contains(string(r.Body), `body="answer"`) {
			t.Fatalf("call %d: reply %+v", i, r)
		}
		d.CompleteHttpContext(id)
	}
	if mem[0] != mem[1] {
		t.Error("the second call's body is not the forgotten first one's memory")
	}
	if string(seen[0].Body) != "call-body-one" {
		t.Errorf("a call body handed out changed: %q", seen[0].Body)
	}
}
