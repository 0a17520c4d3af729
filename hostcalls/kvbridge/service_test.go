package kvbridge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdroute/pdroute/hostcalls/zmqpush"
)

// bridge is a Service running for one test.
type bridge struct {
	svc  *Service
	url  string
	stop func() // cancels Run and checks it returned nil; idempotent
}

func start(t testing.TB, cfg Config) *bridge {
	t.Helper()
	if cfg.ZMQBind == "" {
		cfg.ZMQBind = "tcp://127.0.0.1:0"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	b := &bridge{svc: svc, url: "http://" + svc.Addr()}
	b.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
	t.Cleanup(b.stop)
	return b
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func dial(t testing.TB, endpoint string) *zmqpush.Sender {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := zmqpush.Dial(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func send(t *testing.T, s *zmqpush.Sender, frames ...[]byte) {
	t.Helper()
	if err := s.Send(frames...); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond (test-side only) for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 15 * time.Second}

func do(t *testing.T, ctx context.Context, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSuffix(string(b), "\n")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return do(t, context.Background(), http.MethodGet, url, "")
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	return do(t, context.Background(), http.MethodPost, url, body)
}

type response struct {
	status int
	body   string
}

// async runs an HTTP request in the background.
func async(t *testing.T, ctx context.Context, method, url, body string) <-chan response {
	t.Helper()
	ch := make(chan response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			ch <- response{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- response{resp.StatusCode, strings.TrimSuffix(string(b), "\n")}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no HTTP response within 10s")
		return response{}
	}
}

func expect(t *testing.T, status int, body string, wantStatus int, wantBody string) {
	t.Helper()
	if status != wantStatus || body != wantBody {
		t.Fatalf("got %d %s\nwant %d %s", status, body, wantStatus, wantBody)
	}
}

func TestNotificationBeforeWaiter(t *testing.T) {
	b := start(t, Config{})
	s := dial(t, b.svc.ZMQEndpoint())
	send(t, s, EncodeNotification(TagProxyNotif, "req-a"))
	send(t, s, EncodeNotification(TagProxyNotif, "req-a")) // duplicates count
	send(t, s, EncodeNotification(TagNixlProxyNotif, "req-a"))
	waitFor(t, "3 notifications", func() bool { return b.svc.Stats().Received == 3 })

	status, body := get(t, b.url+"/v1/kv/req-a")
	expect(t, status, body, 200, `{"req_id":"req-a","count":3}`)
	status, body = get(t, b.url+"/v1/kv/req-a?count=3")
	expect(t, status, body, 200, `{"req_id":"req-a","count":3}`)
	status, body = get(t, b.url+"/v1/kv/req-a?count=4")
	expect(t, status, body, 404, `{"req_id":"req-a","count":3,"ready":false}`)
	status, body = get(t, b.url+"/v1/kv/unknown")
	expect(t, status, body, 404, `{"req_id":"unknown","count":0,"ready":false}`)
	// Percent-encoding in the path is undone.
	send(t, s, EncodeNotification(TagProxyNotif, "a/b c"))
	status, body = get(t, b.url+"/v1/kv/a%2Fb%20c?wait_ms=5000")
	expect(t, status, body, 200, `{"req_id":"a/b c","count":1}`)
}

func TestWaiterBeforeNotification(t *testing.T) {
	b := start(t, Config{})
	s := dial(t, b.svc.ZMQEndpoint())
	begin := time.Now()
	resp := async(t, context.Background(), "GET", b.url+"/v1/kv/req-b?count=2&wait_ms=10000", "")
	waitFor(t, "the waiter", func() bool { return b.svc.Stats().Waiters == 1 })
	send(t, s, EncodeNotification(TagProxyNotif, "req-b"))
	select {
	case r := <-resp:
		t.Fatalf("answered after 1 of 2 notifications: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	send(t, s, EncodeNotification(TagProxyNotif, "req-b"))
	r := receive(t, resp)
	expect(t, r.status, r.body, 200, `{"req_id":"req-b","count":2}`)
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("answer took %v: the waiter was not woken", took)
	}
	if st := b.svc.Stats(); st.Waiters != 0 {
		t.Fatalf("waiters = %d after the answer", st.Waiters)
	}
	metrics := scrape(t, b)
	for _, line := range []string{
		"kvbridge_wake_latency_seconds_count 1",
		`kvbridge_waits_total{result="ready"} 1`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestCountNotReachedTimesOut(t *testing.T) {
	b := start(t, Config{})
	s := dial(t, b.svc.ZMQEndpoint())
	send(t, s, EncodeNotification(TagProxyNotif, "tp2"))
	waitFor(t, "1 notification", func() bool { return b.svc.Stats().Received == 1 })
	begin := time.Now()
	status, body := get(t, b.url+"/v1/kv/tp2?count=2&wait_ms=150")
	expect(t, status, body, 404, `{"req_id":"tp2","count":1,"ready":false}`)
	if took := time.Since(begin); took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("a 150 ms wait took %v", took)
	}
	if st := b.svc.Stats(); st.Waiters != 0 {
		t.Fatalf("waiters = %d after timeout", st.Waiters)
	}
}

func TestMultiIDWait(t *testing.T) {
	b := start(t, Config{})
	s := dial(t, b.svc.ZMQEndpoint())

	// Nothing ready: the first ready id answers.
	resp := async(t, context.Background(), "POST", b.url+"/v1/kv/wait",
		`{"wait_ms":10000,"ids":[{"req_id":"x","count":2},{"req_id":"y"},{"req_id":"z","count":1}]}`)
	waitFor(t, "the waiter", func() bool { return b.svc.Stats().Waiters == 1 })
	send(t, s, EncodeNotification(TagProxyNotif, "x")) // 1 of 2
	send(t, s, EncodeNotification(TagProxyNotif, "z"))
	r := receive(t, resp)
	expect(t, r.status, r.body, 200, `{"ready":[{"req_id":"z","count":1}]}`)

	// Several ready: all of them, in request order, at once.
	send(t, s, EncodeNotification(TagProxyNotif, "y"))
	send(t, s, EncodeNotification(TagProxyNotif, "x"))
	waitFor(t, "4 notifications", func() bool { return b.svc.Stats().Received == 4 })
	status, body := post(t, b.url+"/v1/kv/wait",
		`{"wait_ms":10000,"ids":[{"req_id":"z"},{"req_id":"w"},{"req_id":"x","count":2},{"req_id":"y","count":2}]}`)
	expect(t, status, body, 200, `{"ready":[{"req_id":"z","count":1},{"req_id":"x","count":2}]}`)

	// None ready by the deadline: an empty list.
	status, body = post(t, b.url+"/v1/kv/wait", `{"wait_ms":50,"ids":[{"req_id":"w"},{"req_id":"y","count":2}]}`)
	expect(t, status, body, 200, `{"ready":[]}`)
	status, body = post(t, b.url+"/v1/kv/wait", `{"ids":[{"req_id":"w"}]}`)
	expect(t, status, body, 200, `{"ready":[]}`)
}

func TestBadRequests(t *testing.T) {
	b := start(t, Config{})
	long := strings.Repeat("x", MaxReqIDBytes+1)
	manyIDs := `{"ids":[` + strings.TrimSuffix(strings.Repeat(`{"req_id":"a"},`, MaxWaitIDs+1), ",") + `]}`
	tests := []struct {
		method, path, body string
		status             int
		err                string
	}{
		{"GET", "/v1/kv/a?count=0", "", 400, "count: must be an integer in 1..1024"},
		{"GET", "/v1/kv/a?count=1025", "", 400, "count: must be an integer in 1..1024"},
		{"GET", "/v1/kv/a?count=two", "", 400, "count: must be an integer in 1..1024"},
		{"GET", "/v1/kv/a?wait_ms=-1", "", 400, "wait_ms: must be an integer in 0..60000"},
		{"GET", "/v1/kv/a?wait_ms=60001", "", 400, "wait_ms: must be an integer in 0..60000"},
		{"GET", "/v1/kv/" + long, "", 400, "req_id: must be 1..256 bytes of UTF-8"},
		{"GET", "/v1/kv/a%FF", "", 400, "req_id: must be 1..256 bytes of UTF-8"},
		{"POST", "/v1/kv/wait", `{"ids":[`, 400, "body: invalid JSON: unexpected end of JSON input"},
		{"POST", "/v1/kv/wait", `[]`, 400, "body: expected object, got array"},
		{"POST", "/v1/kv/wait", `{}`, 400, "ids: must list 1..4096 ids, not 0"},
		{"POST", "/v1/kv/wait", `{"ids":[]}`, 400, "ids: must list 1..4096 ids, not 0"},
		{"POST", "/v1/kv/wait", `{"ids":"a"}`, 400, "ids: expected list, got string"},
		{"POST", "/v1/kv/wait", manyIDs, 400, "ids: must list 1..4096 ids, not 4097"},
		{"POST", "/v1/kv/wait", `{"ids":[{"count":1}]}`, 400, "ids[0].req_id: must be 1..256 bytes of UTF-8"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"a"},{"req_id":""}]}`, 400, "ids[1].req_id: must be 1..256 bytes of UTF-8"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"` + long + `"}]}`, 400, "ids[0].req_id: must be 1..256 bytes of UTF-8"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":7}]}`, 400, "ids.req_id: expected string, got number"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"a","count":0}]}`, 400, "ids[0].count: must be an integer in 1..1024"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"a","count":1.5}]}`, 400, "ids.count: expected integer, got number 1.5"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"a","count":"2"}]}`, 400, "ids.count: expected integer, got string"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"a"},{"req_id":"b"},{"req_id":"a"}]}`, 400, "ids[2].req_id: duplicate of ids[0]"},
		{"POST", "/v1/kv/wait", `{"wait_ms":60001,"ids":[{"req_id":"a"}]}`, 400, "wait_ms: must be an integer in 0..60000"},
		{"POST", "/v1/kv/wait", `{"wait_ms":-5,"ids":[{"req_id":"a"}]}`, 400, "wait_ms: must be an integer in 0..60000"},
		{"POST", "/v1/kv/wait", `{"ids":[{"req_id":"` + strings.Repeat("a", MaxWaitBodyBytes) + `"}]}`, 413, "body: over 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+tt.body[:min(len(tt.body), 40)], func(t *testing.T) {
			status, body := do(t, context.Background(), tt.method, b.url+tt.path, tt.body)
			want := fmt.Sprintf(`{"error":%q}`, tt.err)
			expect(t, status, body, tt.status, want)
		})
	}
	if !strings.Contains(scrape(t, b), fmt.Sprintf(`kvbridge_waits_total{result="bad_request"} %d`+"\n", len(tests))) {
		t.Errorf("bad requests not counted")
	}
}

// A client that goes away mid-wait releases its waiter at once.
func TestClientDisconnectReleasesWaiter(t *testing.T) {
	b := start(t, Config{})
	for i, req := range []struct{ method, path, body string }{
		{"GET", "/v1/kv/gone?wait_ms=60000", ""},
		{"POST", "/v1/kv/wait", `{"wait_ms":60000,"ids":[{"req_id":"gone"},{"req_id":"gone2"}]}`},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		resp := async(t, ctx, req.method, b.url+req.path, req.body)
		waitFor(t, "the waiter", func() bool { return b.svc.Stats().Waiters == 1 })
		cancel()
		if r := receive(t, resp); r.status != -1 {
			t.Fatalf("%s: canceled request got %+v", req.method, r)
		}
		waitFor(t, "the waiter's release", func() bool { return b.svc.Stats().Waiters == 0 })
		want := fmt.Sprintf(`kvbridge_waits_total{result="canceled"} %d`+"\n", i+1)
		waitFor(t, "the canceled count", func() bool { return strings.Contains(scrape(t, b), want) })
	}
}

func TestTTLExpiryWithInjectedClock(t *testing.T) {
	clock := &fakeClock{now: t0}
	b := start(t, Config{TTL: time.Minute, Now: clock.Now})
	s := dial(t, b.svc.ZMQEndpoint())
	send(t, s, EncodeNotification(TagProxyNotif, "old"))
	waitFor(t, "1 notification", func() bool { return b.svc.Stats().Received == 1 })
	clock.Advance(30 * time.Second)
	send(t, s, EncodeNotification(TagProxyNotif, "new"))
	waitFor(t, "2 notifications", func() bool { return b.svc.Stats().Received == 2 })
	clock.Advance(30 * time.Second) // old is 60 s old: expired; new is 30 s old

	status, body := get(t, b.url+"/v1/kv/old")
	expect(t, status, body, 404, `{"req_id":"old","count":0,"ready":false}`)
	status, body = get(t, b.url+"/v1/kv/new")
	expect(t, status, body, 200, `{"req_id":"new","count":1}`)
	if st := b.svc.Stats(); st.Expired != 1 || st.Entries != 1 {
		t.Fatalf("stats %+v, want 1 expired, 1 entry", st)
	}
}

func TestMaxEntriesEvictsOldest(t *testing.T) {
	b := start(t, Config{MaxEntries: 2})
	s := dial(t, b.svc.ZMQEndpoint())
	for _, id := range []string{"e1", "e2", "e1", "e3"} {
		send(t, s, EncodeNotification(TagProxyNotif, id))
	}
	waitFor(t, "4 notifications", func() bool { return b.svc.Stats().Received == 4 })
	status, body := post(t, b.url+"/v1/kv/wait", `{"ids":[{"req_id":"e1"},{"req_id":"e2"},{"req_id":"e3"}]}`)
	expect(t, status, body, 200, `{"ready":[{"req_id":"e2","count":1},{"req_id":"e3","count":1}]}`)
	if st := b.svc.Stats(); st.Evicted != 1 || st.Entries != 2 {
		t.Fatalf("stats %+v, want 1 evicted, 2 entries", st)
	}
	if !strings.Contains(scrape(t, b), "kvbridge_entries_evicted_total 1\n") {
		t.Error("eviction not in /metrics")
	}
}

func TestMaxWaiters(t *testing.T) {
	b := start(t, Config{MaxWaiters: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	async(t, ctx, "GET", b.url+"/v1/kv/a?wait_ms=60000", "")
	waitFor(t, "the waiter", func() bool { return b.svc.Stats().Waiters == 1 })
	status, body := get(t, b.url+"/v1/kv/b?wait_ms=1000")
	expect(t, status, body, 503, `{"error":"too many waiters (limit 1)"}`)
}

func TestHealthAndMetrics(t *testing.T) {
	b := start(t, Config{})
	status, body := get(t, b.url+"/healthz")
	expect(t, status, body, 200, `{"status":"ok"}`)

	s := dial(t, b.svc.ZMQEndpoint())
	send(t, s, EncodeNotification(TagProxyNotif, "m1"))
	send(t, s, []byte{0xc1})
	send(t, s, EncodeNotification("CancelNotif", "m1"))
	waitFor(t, "3 frames", func() bool {
		st := b.svc.Stats()
		return st.Received+st.Malformed+st.UnknownTag == 3
	})
	m := scrape(t, b)
	for _, line := range []string{
		"kvbridge_notifications_received_total 1",
		"kvbridge_frames_malformed_total 1",
		"kvbridge_frames_unknown_tag_total 1",
		"kvbridge_entries 1",
		"kvbridge_entries_expired_total 0",
		"kvbridge_waiters 0",
		"kvbridge_zmq_peers 1",
		`kvbridge_zmq_connections_total{result="accepted"} 1`,
		"kvbridge_wake_latency_seconds_count 0",
		"# TYPE process_resident_memory_bytes gauge",
	} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func scrape(t *testing.T, b *bridge) string {
	t.Helper()
	status, body := get(t, b.url+"/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	return body + "\n"
}

// Stopping a kvbridge answers its waiters; a new instance on the same
// addresses then works.
func TestRestartMidWait(t *testing.T) {
	b1 := start(t, Config{})
	httpAddr, zmqEndpoint := b1.svc.Addr(), b1.svc.ZMQEndpoint()
	s1 := dial(t, zmqEndpoint)
	get1 := async(t, context.Background(), "GET", b1.url+"/v1/kv/r1?wait_ms=30000", "")
	post1 := async(t, context.Background(), "POST", b1.url+"/v1/kv/wait", `{"wait_ms":30000,"ids":[{"req_id":"r1"}]}`)
	waitFor(t, "2 waiters", func() bool { return b1.svc.Stats().Waiters == 2 })

	b1.stop()
	for _, ch := range []<-chan response{get1, post1} {
		r := receive(t, ch)
		expect(t, r.status, r.body, 503, `{"error":"kvbridge is shutting down"}`)
	}
	if err := s1.Send(EncodeNotification(TagProxyNotif, "r1")); err == nil {
		// The first write after the peer closed may still succeed; the
		// next one must fail.
		time.Sleep(50 * time.Millisecond)
		if err := s1.Send(EncodeNotification(TagProxyNotif, "r1")); err == nil {
			t.Error("sending to a stopped kvbridge kept succeeding")
		}
	}

	b2 := start(t, Config{HTTPAddr: httpAddr, ZMQBind: zmqEndpoint})
	resp := async(t, context.Background(), "GET", b2.url+"/v1/kv/r1?wait_ms=10000", "")
	waitFor(t, "the waiter", func() bool { return b2.svc.Stats().Waiters == 1 })
	send(t, dial(t, zmqEndpoint), EncodeNotification(TagProxyNotif, "r1"))
	r := receive(t, resp)
	expect(t, r.status, r.body, 200, `{"req_id":"r1","count":1}`)
}

func TestRunTwice(t *testing.T) {
	b := start(t, Config{})
	get(t, b.url+"/healthz") // answered only once Run serves
	if err := b.svc.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Run called twice") {
		t.Fatalf("second Run: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg Config
		err string
	}{
		{Config{}, ""},
		{Config{ZMQBind: "tcp://*:7500"}, ""},
		{Config{ZMQBind: "tcp://[::1]:7500"}, ""},
		{Config{ZMQBind: "ipc:///tmp/x"}, `zmq-bind "ipc:///tmp/x": only tcp:// endpoints are supported`},
		{Config{ZMQBind: "tcp://localhost"}, `zmq-bind "tcp://localhost": address localhost: missing port in address`},
		{Config{HTTPAddr: "7501"}, `http-addr "7501": address 7501: missing port in address`},
		{Config{TTL: -time.Second}, "ttl: must be positive"},
		{Config{MaxEntries: -1}, "max-entries: must be positive"},
		{Config{MaxWaiters: -1}, "max-waiters: must be positive"},
		{Config{MaxPeers: -1}, "zmq-max-peers: must be positive"},
		{Config{MaxMessageBytes: 10}, "zmq-max-message-bytes: must be at least 64"},
		{Config{HandshakeTimeout: -1}, "zmq-handshake-timeout: must be positive"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if got := fmt.Sprint(err); (err == nil) != (tt.err == "") || err != nil && got != tt.err {
			t.Errorf("Validate(%+v) = %v, want %q", tt.cfg, err, tt.err)
		}
	}
	if _, err := New(Config{ZMQBind: "udp://x:1"}); err == nil {
		t.Error("New accepted an invalid config")
	}
}

// Issue 31: the filter waits in slices of 2 s ("slice":true); a slice that
// ends with the id pending is counted as pending, not as a timeout, so that
// the timeout count only moves when a waiter gave up.
func TestSliceEndsPending(t *testing.T) {
	b := start(t, Config{})
	status, body := post(t, b.url+"/v1/kv/wait", `{"wait_ms":50,"slice":true,"ids":[{"req_id":"later"}]}`)
	expect(t, status, body, 200, `{"ready":[]}`)
	status, body = post(t, b.url+"/v1/kv/wait", `{"wait_ms":50,"ids":[{"req_id":"later"}]}`)
	expect(t, status, body, 200, `{"ready":[]}`)
	m := scrape(t, b)
	for _, want := range []string{
		`kvbridge_waits_total{result="pending"} 1` + "\n",
		`kvbridge_waits_total{result="timeout"} 1` + "\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
