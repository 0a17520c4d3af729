package mocks

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// The notification frame is byte for byte what msgspec writes for a tagged struct.
func TestEncodeNotifBytes(t *testing.T) {
	for _, tc := range []struct{ tag, reqID, want string }{
		// 2-entry map; "type" first; str (not bin) strings.
		{"ProxyNotif", "42", "82a474797065aa50726f78794e6f746966a67265715f6964a23432"},
		{"NixlProxyNotif", "", "82a474797065ae4e69786c50726f78794e6f746966a67265715f6964a0"},
	} {
		b, err := encodeNotif(tc.tag, tc.reqID)
		if err != nil || hex.EncodeToString(b) != tc.want {
			t.Errorf("encodeNotif(%q, %q) = %x, %v; want %s", tc.tag, tc.reqID, b, err, tc.want)
		}
	}
	long := string(bytes.Repeat([]byte("r"), 40)) // str8 above 31 bytes
	b, _ := encodeNotif("ProxyNotif", long)
	var m map[string]string
	if err := msgpack.Unmarshal(b, &m); err != nil || m["req_id"] != long || m["type"] != "ProxyNotif" || len(m) != 2 {
		t.Errorf("round trip %v %v", m, err)
	}
}

// router is a test PULL socket bound like a PD router's (or kvbridge's).
type router struct {
	sock   zmq4.Socket
	frames chan []byte
}

func newRouter(t *testing.T) *router {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &router{sock: zmq4.NewPull(ctx), frames: make(chan []byte, 64)}
	if err := r.sock.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			msg, err := r.sock.Recv()
			if err != nil {
				return
			}
			for _, f := range msg.Frames {
				r.frames <- f
			}
		}
	}()
	t.Cleanup(func() { cancel(); r.sock.Close() })
	return r
}

func (r *router) endpoint() string { return "tcp://" + r.sock.Addr().String() }

// receive waits for n frames, then checks that no more arrive within quiet.
func (r *router) receive(t *testing.T, n int, quiet time.Duration) [][]byte {
	t.Helper()
	var out [][]byte
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case f := <-r.frames:
			out = append(out, f)
		case <-timeout:
			t.Fatalf("got %d notifications, want %d", len(out), n)
		}
	}
	select {
	case f := <-r.frames:
		t.Fatalf("unexpected extra notification %x", f)
	case <-time.After(quiet):
	}
	return out
}

// lmcachePair is a TP=2 prefiller and decoder and the router's PULL socket.
type lmcachePair struct {
	p, d   *Server
	router *router
}

func newLMCachePair(t *testing.T) lmcachePair {
	rt := newRouter(t)
	return lmcachePair{
		p:      start(t, Config{Kind: LMCache, Role: Prefill, TPSize: 2, ZMQConnect: rt.endpoint()}),
		d:      start(t, Config{Kind: LMCache, Role: Decode, TPSize: 2}),
		router: rt,
	}
}

// prefill sends LMCache's prefill request for prompt ids and returns the response.
func (lp lmcachePair) prefill(t *testing.T, reqID string, ids []int) response {
	a := lp.d.Addresses()
	return post(t, lp.p.URL()+"/v1/completions", map[string]any{
		"model": "m", "prompt": ids, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{
			"ret_first_tok": true,
			"disagg_spec": map[string]any{
				"req_id": reqID, "receiver_host": "127.0.0.1",
				"receiver_init_port": a.KVInitPorts(), "receiver_alloc_port": a.KVAllocPorts(),
			},
		},
	})
}

func (lp lmcachePair) decode(t *testing.T, ids []int, maxTokens int) response {
	return post(t, lp.d.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": ids, "max_tokens": maxTokens, "stream": true, "ignore_eos": true})
}

func firstTok(t *testing.T, r response) int {
	t.Helper()
	kv := kvParamsOf(t, r)
	ft, ok := kv["first_tok"].(float64)
	if !ok || len(kv) != 1 {
		t.Fatalf("kv_transfer_params %v, want only first_tok", kv)
	}
	return int(ft)
}

func TestLMCachePushAndNotify(t *testing.T) {
	lp := newLMCachePair(t)
	ids := Tokenize(longPrompt(30))
	r := lp.prefill(t, "req-7f3a", ids)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	ft := firstTok(t, r)
	full := generate(ids, limits{max: 6, ignoreEOS: true})
	if ft != full.ids[0] || text(t, r.json(t)) != tokenText(ft) {
		t.Errorf("first_tok %d and text %q, the model's first token is %d", ft, text(t, r.json(t)), full.ids[0])
	}
	want, _ := encodeNotif("ProxyNotif", "req-7f3a")
	for _, f := range lp.router.receive(t, 2, 100*time.Millisecond) { // one per prefiller rank
		if !bytes.Equal(f, want) {
			t.Errorf("frame %x, want %x", f, want)
		}
	}
	if st := stats(t, lp.d); st.KVBuffersHeld != 1 || st.Requests["kv_push"] != 2 || st.Requests["kv_init"] != 2 {
		t.Errorf("decoder stats %+v", st)
	}

	// The decoder finds the pushed KV for prompt[:-1] and continues after first_tok.
	dr := lp.decode(t, append(slices.Clone(ids), ft), 5)
	if dr.header.Get("X-Mock-Kv") != KVTransferred {
		t.Fatalf("decode: %v %s", dr.header, dr.body)
	}
	rest := generation{ids: full.ids[1:]}
	if got, want := streamText(t, dr.events()), rest.text(); got != want {
		t.Errorf("decode streamed %q, want the rest of the answer %q", got, want)
	}
	// Used up: the same decode again, and a decode of another prompt, recompute.
	for _, prompt := range [][]int{append(slices.Clone(ids), ft), append(Tokenize("other"), ft)} {
		if dr := lp.decode(t, prompt, 2); dr.header.Get("X-Mock-Kv") != KVRecomputed || dr.header.Get("X-Mock-Kv-Reason") != "no_kv" {
			t.Errorf("decode %v: %v", prompt[:2], dr.header)
		}
	}
	ps, ds := stats(t, lp.p), stats(t, lp.d)
	if ps.KVPushesSent != 2 || ps.Notifications["sent"] != 2 || ps.Requests["prefill"] != 1 {
		t.Errorf("prefiller stats %+v", ps)
	}
	if ds.Transferred != 1 || ds.Recomputed != 2 || ds.KVBuffersHeld != 0 {
		t.Errorf("decoder stats %+v", ds)
	}
}

func TestLMCacheNotifyFaults(t *testing.T) {
	lp := newLMCachePair(t)
	ctl := lp.p.Control()
	ctx := testCtx(t)
	decodeOK := func(ids []int, ft int) {
		t.Helper()
		if dr := lp.decode(t, append(slices.Clone(ids), ft), 2); dr.header.Get("X-Mock-Kv") != KVTransferred {
			t.Errorf("the KV push does not depend on notifications: %v", dr.header)
		}
	}

	must(t, ctl.SetFaults(ctx, Fault{Type: FaultNotifyDrop, Ranks: []int{1}, Count: 1}))
	ids := Tokenize("drop rank one")
	decodeOK(ids, firstTok(t, lp.prefill(t, "drop", ids)))
	lp.router.receive(t, 1, 150*time.Millisecond)

	must(t, ctl.SetFaults(ctx, Fault{Type: FaultNotifyDuplicate, Count: 1}))
	ids = Tokenize("duplicate them")
	decodeOK(ids, firstTok(t, lp.prefill(t, "dup", ids)))
	lp.router.receive(t, 4, 150*time.Millisecond)

	must(t, ctl.SetFaults(ctx, Fault{Type: FaultNotifyDelay, DelayMS: 300, Count: 1}))
	ids = Tokenize("delay them")
	began := time.Now()
	firstTok(t, lp.prefill(t, "late", ids))
	if answered := time.Since(began); answered > 250*time.Millisecond {
		t.Errorf("the prefill answer waited for the delayed notifications: %v", answered)
	}
	lp.router.receive(t, 2, 0)
	if since := time.Since(began); since < 300*time.Millisecond {
		t.Errorf("notifications after %v, want at least 300ms", since)
	}

	// missing_params: 2xx without kv_transfer_params; the KV and notifications go out.
	must(t, ctl.SetFaults(ctx, Fault{Type: FaultMissingParams, Count: 1}))
	ids = Tokenize("no first token")
	r := lp.prefill(t, "nofirst", ids)
	if m := r.json(t); r.status != 200 || m["kv_transfer_params"] != nil {
		t.Errorf("missing params: %d %s", r.status, r.body)
	}
	lp.router.receive(t, 2, 50*time.Millisecond)

	st := stats(t, lp.p)
	if st.Notifications["dropped"] != 1 || st.Notifications["sent"] != 1+4+2+2 || st.Faults["notify_drop"] != 1 || st.Faults["notify_delay"] != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A router that mixes up the receiver port lists (or gives too few) gets no KV and no
// notification for the affected ranks, and the decoder recomputes.
func TestLMCacheBadReceiverPorts(t *testing.T) {
	lp := newLMCachePair(t)
	a := lp.d.Addresses()
	init, alloc := a.KVInitPorts(), a.KVAllocPorts()
	for _, tc := range []struct {
		name        string
		init, alloc []int
		notified    int
		reason      string
	}{
		{"swapped ranks", []int{init[1], init[0]}, alloc, 0, "no_kv"},
		{"one rank only", init[:1], alloc[:1], 1, "partial_kv"},
		{"init and alloc swapped", alloc, init, 0, "no_kv"},
	} {
		ids := Tokenize("ports " + tc.name)
		r := post(t, lp.p.URL()+"/v1/completions", map[string]any{
			"prompt": ids, "max_tokens": 1,
			"kv_transfer_params": map[string]any{"ret_first_tok": true, "disagg_spec": map[string]any{
				"req_id": tc.name, "receiver_host": "127.0.0.1", "receiver_init_port": tc.init, "receiver_alloc_port": tc.alloc}},
		})
		ft := firstTok(t, r)
		lp.router.receive(t, tc.notified, 100*time.Millisecond)
		dr := lp.decode(t, append(ids, ft), 2)
		if dr.header.Get("X-Mock-Kv") != KVRecomputed || dr.header.Get("X-Mock-Kv-Reason") != tc.reason {
			t.Errorf("%s: decode %v", tc.name, dr.header)
		}
	}
	if st := stats(t, lp.p); st.KVPushFailures != 5 || st.KVPushesSent != 1 {
		t.Errorf("prefiller stats %+v", st)
	}
	r := post(t, lp.p.URL()+"/v1/completions", map[string]any{"prompt": "x", "kv_transfer_params": map[string]any{"disagg_spec": map[string]any{"receiver_host": "h"}}})
	if r.status != 400 {
		t.Errorf("disagg_spec without req_id: %d %s", r.status, r.body)
	}
}

// The prefiller dials the router lazily, so the router may start after the engines.
func TestLMCacheRouterStartsLater(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + ln.Addr().String()
	ln.Close()
	p := start(t, Config{Kind: LMCache, Role: Prefill, ZMQConnect: endpoint})
	d := start(t, Config{Kind: LMCache, Role: Decode})
	rt := &router{sock: zmq4.NewPull(context.Background()), frames: make(chan []byte, 8)}
	defer rt.sock.Close()
	lp := lmcachePair{p: p, d: d, router: rt}
	ids := Tokenize("late router")
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := rt.sock.Listen(endpoint); err != nil {
			return
		}
		for {
			msg, err := rt.sock.Recv()
			if err != nil {
				return
			}
			rt.frames <- msg.Frames[0]
		}
	}()
	firstTok(t, lp.prefill(t, "late-router", ids))
	want, _ := encodeNotif("ProxyNotif", "late-router")
	if f := rt.receive(t, 1, 50*time.Millisecond); !bytes.Equal(f[0], want) {
		t.Errorf("frame %x", f[0])
	}
}
