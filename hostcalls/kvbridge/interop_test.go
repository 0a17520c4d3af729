package kvbridge

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// debianPython is Debian's interpreter, the one python3-zmq and
// python3-msgpack install into (the python3 on PATH may be another).
const debianPython = "/usr/bin/python3"

// pyPeer is testdata/lmcache_push.py: LMCache prefiller ranks on real libzmq.
type pyPeer struct {
	t     *testing.T
	in    io.WriteCloser
	lines chan string
	done  chan error
}

func startPyPeer(t *testing.T, endpoint string, ranks int) *pyPeer {
	t.Helper()
	if out, err := exec.Command(debianPython, "-c", "import zmq, msgpack").CombinedOutput(); err != nil {
		t.Skipf("skipping real-libzmq interop: %s cannot import zmq and msgpack (apt-get install python3-zmq python3-msgpack): %v %s",
			debianPython, err, strings.TrimSpace(string(out)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, debianPython, "testdata/lmcache_push.py", endpoint, strconv.Itoa(ranks))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyPeer{t: t, in: in, lines: make(chan string), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		defer cancel()
		in.Close() // EOF on stdin ends the script like "quit"
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("lmcache_push.py: %v\n%s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("lmcache_push.py did not exit\n%s", stderr.String())
		}
	})
	return p
}

// do sends one command and returns the script's answer.
func (p *pyPeer) do(cmd string) string {
	p.t.Helper()
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		p.t.Fatal(err)
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("lmcache_push.py exited during %q", cmd)
		}
		return line
	case <-time.After(20 * time.Second):
		p.t.Fatalf("lmcache_push.py did not answer %q", cmd)
		return ""
	}
}

// TestInteropLibzmq receives notifications from pyzmq (libzmq) PUSH sockets
// sending exactly LMCache's frames, one per TP rank, before and after the
// waiter arrives, across a kvbridge restart (libzmq reconnects by itself).
func TestInteropLibzmq(t *testing.T) {
	const ranks = 4
	b := start(t, Config{})
	py := startPyPeer(t, b.svc.ZMQEndpoint(), ranks)

	if got, want := py.do("hex 42"), strings.ReplaceAll(lmcacheFrame42, " ", ""); got != want {
		t.Fatalf("python's frame for 42 = %s, want the notes' bytes %s", got, want)
	}

	// Notifications first, then the waiter.
	py.do("send py-before")
	status, body := get(t, b.url+"/v1/kv/py-before?count=4&wait_ms=10000")
	expect(t, status, body, 200, `{"req_id":"py-before","count":4}`)
	waitFor(t, "4 libzmq peers", func() bool { return b.svc.Stats().Peers == ranks })

	// The waiter first.
	resp := async(t, context.Background(), "GET", b.url+"/v1/kv/py-after?count=4&wait_ms=10000", "")
	waitFor(t, "the waiter", func() bool { return b.svc.Stats().Waiters == 1 })
	py.do("send py-after")
	r := receive(t, resp)
	expect(t, r.status, r.body, 200, `{"req_id":"py-after","count":4}`)

	// The older tag counts; a foreign tag does not.
	py.do("send py-old NixlProxyNotif")
	py.do("send py-cancel CancelNotif")
	status, body = get(t, b.url+"/v1/kv/py-old?count=4&wait_ms=10000")
	expect(t, status, body, 200, `{"req_id":"py-old","count":4}`)
	waitFor(t, "4 foreign tags", func() bool { return b.svc.Stats().UnknownTag == ranks })
	if st := b.svc.Stats(); st.Received != 3*ranks || st.Malformed != 0 {
		t.Fatalf("stats %+v, want %d received, 0 malformed", st, 3*ranks)
	}

	// Restart on the same endpoint: libzmq reconnects every rank.
	httpAddr, endpoint := b.svc.Addr(), b.svc.ZMQEndpoint()
	b.stop()
	b2 := start(t, Config{HTTPAddr: httpAddr, ZMQBind: endpoint})
	waitFor(t, "the ranks to reconnect", func() bool { return b2.svc.Stats().Peers == ranks })
	py.do("send py-restart")
	status, body = get(t, b2.url+"/v1/kv/py-restart?count=4&wait_ms=10000")
	expect(t, status, body, 200, `{"req_id":"py-restart","count":4}`)

	if got := py.do("quit"); got != "ok" {
		t.Fatalf("quit answered %q", got)
	}
}
