package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func get(t *testing.T, url string) (int, Sets, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var s Sets
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
	}
	return resp.StatusCode, s, string(body)
}

func names(l []Endpoint) string {
	var n []string
	for _, e := range l {
		n = append(n, e.Name)
	}
	return strings.Join(n, ",")
}

func TestRegistryHandler(t *testing.T) {
	reg := NewRegistry(func() time.Time { return time.UnixMilli(1000) })
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	if code, _, body := get(t, srv.URL); code != 503 || !strings.Contains(body, "prefill and decode") {
		t.Fatalf("before any list: %d %s", code, body)
	}
	reg.Set(0, []Endpoint{{Name: "p1", Address: "10.0.0.2:8000"}, {Name: "p0", Address: "10.0.0.1:8000"}})
	if code, _, body := get(t, srv.URL); code != 503 || !strings.Contains(body, "decode") {
		t.Fatalf("before decode's list: %d %s", code, body)
	}
	problems := reg.Set(1, []Endpoint{{Name: "d0", Address: "10.0.0.3:8000"}, {Name: "p0", Address: "10.0.0.9:8000"},
		{Name: "bad name", Address: "10.0.0.4:8000"}, {Name: "d1", Address: "host:80"}, {Name: "d2", Address: "10.0.0.3:8000"}})
	if len(problems) != 4 {
		t.Fatalf("problems %v", problems)
	}
	code, s, _ := get(t, srv.URL+"/v1/pools?version=1")
	if code != 200 || names(s.Prefill) != "p0,p1" || names(s.Decode) != "d0" || s.Version != 1002 {
		t.Fatalf("%d %+v", code, s)
	}
	// Same lists again: no new version.
	reg.Set(1, []Endpoint{{Name: "d0", Address: "10.0.0.3:8000"}})
	if reg.Current().Version != 1002 {
		t.Fatalf("version moved without a change: %d", reg.Current().Version)
	}
	// A long poll at the current version waits for the change.
	var wg sync.WaitGroup
	wg.Add(1)
	var polled Sets
	start := time.Now()
	go func() {
		defer wg.Done()
		_, polled, _ = get(t, fmt.Sprintf("%s?version=%d&wait_ms=10000", srv.URL, s.Version))
	}()
	time.Sleep(100 * time.Millisecond)
	reg.Set(1, []Endpoint{{Name: "d0", Address: "10.0.0.3:8000"}, {Name: "d9", Address: "10.0.0.9:8000"}})
	wg.Wait()
	if names(polled.Decode) != "d0,d9" || polled.Version != s.Version+1 || time.Since(start) > 5*time.Second {
		t.Fatalf("long poll: %+v after %v", polled, time.Since(start))
	}
	// Nothing changes: the same version after wait_ms.
	if _, again, _ := get(t, fmt.Sprintf("%s?version=%d&wait_ms=50", srv.URL, polled.Version)); again.Version != polled.Version {
		t.Fatalf("timed-out poll: %+v", again)
	}
	for _, q := range []string{"?version=x", "?wait_ms=-1", "?wait_ms=60001"} {
		if code, _, _ := get(t, srv.URL+q); code != 400 {
			t.Errorf("%s: %d", q, code)
		}
	}
}

// run starts the configured sources into a registry.
func run(t *testing.T, cfg string) (*Registry, func()) {
	t.Helper()
	c, err := ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	sources, err := c.Sources(quiet)
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, reg, sources, quiet); close(done) }()
	return reg, func() { cancel(); <-done }
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 5 s", what)
}

func TestFileAndStatic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pools.json")
	write := func(s string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"prefill":[],"decode":[{"name":"d0","address":"127.0.0.1:9000"}]}`)
	reg, stop := run(t, `{"prefill":{"static":[{"name":"p0","address":"127.0.0.1:8000","bootstrap_port":8998}]},
		"decode":{"file":{"path":"`+path+`","interval_ms":20}}}`)
	defer stop()
	eventually(t, "first lists", func() bool { ok, _ := reg.Ready(); return ok })
	if c := reg.Current(); names(c.Prefill) != "p0" || c.Prefill[0].BootstrapPort != 8998 || names(c.Decode) != "d0" {
		t.Fatalf("%+v", c)
	}
	write(`{"prefill":[],"decode":[{"name":"d0","address":"127.0.0.1:9000"},{"name":"d1","address":"127.0.0.1:9001"}]}`)
	eventually(t, "added entry", func() bool { return names(reg.Current().Decode) == "d0,d1" })
	v := reg.Current().Version
	write(`{"decode":[{"name":"d1"`) // garbage: the last list stays
	time.Sleep(100 * time.Millisecond)
	if c := reg.Current(); c.Version != v || names(c.Decode) != "d0,d1" {
		t.Fatalf("garbage file changed the sets: %+v", c)
	}
	write(`{"decode":[{"name":"d1","address":"127.0.0.1:9001"}]}`)
	eventually(t, "removed entry", func() bool { return names(reg.Current().Decode) == "d1" })
}

func TestParseConfigErrors(t *testing.T) {
	for _, bad := range []string{
		`{"prefill":{"file":{"path":"x"}}}`,
		`{"prefill":{"file":{"path":"x"}},"decode":{"zookeeper":{}}}`,
		`{"prefill":{"file":{"path":"x"},"dns":{}},"decode":{"static":[]}}`,
		`{"prefill":{"static":[]},"decode":{"static":[]},"extra":1}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	c, _ := ParseConfig([]byte(`{"prefill":{"file":{}},"decode":{"dns":{"name":"x","port":0}}}`))
	if _, err := c.Sources(quiet); err == nil {
		t.Error("file without path and dns without port accepted")
	}
}

// dnsServer answers A queries for name from the records map (changeable).
type dnsServer struct {
	mu      sync.Mutex
	records []string
	addr    string
	srv     *dns.Server
}

func startDNS(t *testing.T, name string, records ...string) *dnsServer {
	t.Helper()
	d := &dnsServer{records: records}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.addr = pc.LocalAddr().String()
	mux := dns.NewServeMux()
	mux.HandleFunc(".", func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		d.mu.Lock()
		recs := d.records
		d.mu.Unlock()
		switch {
		case !strings.EqualFold(q.Name, dns.Fqdn(name)) || recs == nil:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			for _, ip := range recs {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(ip)})
			}
		}
		_ = w.WriteMsg(m)
	})
	d.srv = &dns.Server{PacketConn: pc, Handler: mux}
	go func() { _ = d.srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = d.srv.Shutdown() })
	return d
}

func (d *dnsServer) set(records ...string) {
	d.mu.Lock()
	d.records = records
	d.mu.Unlock()
}

func TestDNS(t *testing.T) {
	d := startDNS(t, "decode.llm.svc.cluster.local", "10.1.0.1", "10.1.0.2")
	reg, stop := run(t, `{"prefill":{"static":[]},
		"decode":{"dns":{"name":"decode.llm.svc.cluster.local","port":8000,"interval_ms":100,"server":"`+d.addr+`",
		"kv_receiver":{"init_ports":[7300],"alloc_ports":[7400]}}}}`)
	defer stop()
	eventually(t, "first resolution", func() bool { return names(reg.Current().Decode) == "decode-10.1.0.1-8000,decode-10.1.0.2-8000" })
	if e := reg.Current().Decode[0]; e.Address != "10.1.0.1:8000" || e.KVReceiver == nil || e.KVReceiver.InitPorts[0] != 7300 {
		t.Fatalf("%+v", e)
	}
	d.set("10.1.0.2", "10.1.0.3")
	eventually(t, "re-resolution", func() bool { return names(reg.Current().Decode) == "decode-10.1.0.2-8000,decode-10.1.0.3-8000" })
	// NXDOMAIN (no ready pod behind a headless Service): an empty pool.
	d.set()
	eventually(t, "no records", func() bool { return names(reg.Current().Decode) == "" })
	// The server gone: the last list stays.
	d.set("10.1.0.4")
	eventually(t, "back", func() bool { return names(reg.Current().Decode) == "decode-10.1.0.4-8000" })
	_ = d.srv.Shutdown()
	v := reg.Current().Version
	time.Sleep(300 * time.Millisecond)
	if c := reg.Current(); c.Version != v || names(c.Decode) != "decode-10.1.0.4-8000" {
		t.Fatalf("server down changed the sets: %+v", c)
	}
}

func TestSafeName(t *testing.T) {
	if got := SafeName("a/b:c"); got != "a-b-c" {
		t.Fatal(got)
	}
	long := strings.Repeat("x", 100)
	if got := SafeName(long); len(got) != 64 || checkName(got) != "" || got == SafeName(long+"y") {
		t.Fatal(got)
	}
}

func TestScraper(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "vllm:num_requests_running{model_name=\"m\"} 3\nvllm:num_requests_waiting{model_name=\"m\"} 2\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n")
	}))
	defer engine.Close()
	addr := strings.TrimPrefix(engine.URL, "http://")
	reg := NewRegistry(nil)
	reg.Set(0, []Endpoint{{Name: "p0", Address: "127.0.0.1:1"}}) // nothing listens: no stats
	reg.Set(1, []Endpoint{{Name: "d0", Address: addr}})
	sc := NewScraper(reg, time.Second, quiet)
	sc.round(context.Background())
	srv := httptest.NewServer(sc.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a StatsAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	d := a.Stats["d0"]
	if len(a.Stats) != 1 || d.Running != 3 || d.Waiting != 2 || d.KVCacheUsage != 0.25 || d.ObservedMS == 0 || sc.Scrapes.Load() != 2 {
		t.Fatalf("%+v after %d scrapes", a, sc.Scrapes.Load())
	}
	// d0 leaves the sets: its stats go.
	reg.Set(1, nil)
	sc.round(context.Background())
	if len(sc.stats) != 0 {
		t.Fatalf("stats of departed engines kept: %v", sc.stats)
	}
}
