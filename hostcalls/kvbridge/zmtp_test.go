package kvbridge

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/pdroute/pdroute/hostcalls/zmqpush"
)

// garbageFrames returns n frames of garbage, in ten kinds, and how many of
// them are well-formed maps with a foreign tag (the rest are malformed).
// Multi-part messages count as one message of two frames.
func garbageFrames(t *testing.T, n int, rng *rand.Rand) (msgs [][][]byte, unknownTag int) {
	t.Helper()
	randBytes := func(max int) []byte {
		b := make([]byte, rng.IntN(max+1))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for i := 0; i < n; i++ {
		var frames [][]byte
		switch i % 10 {
		case 0: // random bytes
			frames = [][]byte{randBytes(200)}
		case 1: // random bytes after a fixmap header
			frames = [][]byte{append([]byte{0x80 | byte(rng.IntN(16))}, randBytes(100)...)}
		case 2: // wrong top-level types
			v := []any{[]any{"ProxyNotif", "x"}, "req_id", 42, nil, 1.5}[rng.IntN(5)]
			frames = [][]byte{mp(t, v)}
		case 3: // missing req_id
			frames = [][]byte{ordered(t, "type", "ProxyNotif", "id", fmt.Sprint(i))}
		case 4: // non-string req_id
			v := []any{i, []byte("x"), nil, []string{"x"}, map[string]int{"x": 1}, 2.5, true}[rng.IntN(7)]
			frames = [][]byte{ordered(t, "type", "ProxyNotif", "req_id", v)}
		case 5: // a map32 claiming 4G entries
			frames = [][]byte{append([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, randBytes(20)...)}
		case 6: // a real map of 500 entries with no req_id
			m := make(map[string]int, 500)
			for k := 0; k < 500; k++ {
				m[fmt.Sprint("k", k)] = k
			}
			frames = [][]byte{mp(t, m)}
		case 7: // truncated notification
			f := EncodeNotification(TagProxyNotif, fmt.Sprint("trunc-", i))
			frames = [][]byte{f[:rng.IntN(len(f))]}
		case 8: // a foreign tag, with a req_id
			frames = [][]byte{ordered(t, "type", "CancelNotif", "req_id", fmt.Sprint("c-", i), "keys", []string{"k"})}
			unknownTag++
		case 9: // a valid notification split over two frames
			frames = [][]byte{EncodeNotification(TagProxyNotif, "mp"), EncodeNotification(TagProxyNotif, "mp")}
		}
		msgs = append(msgs, frames)
	}
	return msgs, unknownTag
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// 10,000 garbage messages from four peers, mixed with valid ones: nothing
// breaks, every message is counted in the right counter, connections stay
// up, memory stays flat.
func TestGarbageFrames(t *testing.T) {
	b := start(t, Config{})
	const garbage, valid, peers = 10_000, 1_000, 4
	msgs, unknownTag := garbageFrames(t, garbage, rand.New(rand.NewPCG(7, 7)))
	for i := 0; i < valid; i++ {
		at := i * len(msgs) / valid
		msgs = append(msgs[:at], append([][][]byte{{EncodeNotification(TagProxyNotif, fmt.Sprint("ok-", i))}}, msgs[at:]...)...)
	}
	before := heapInUse()

	var wg sync.WaitGroup
	for p := 0; p < peers; p++ {
		s := dial(t, b.svc.ZMQEndpoint())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < len(msgs); i += peers {
				if err := s.Queue(msgs[i]...); err != nil {
					t.Error(err)
					return
				}
			}
			if err := s.Flush(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	waitFor(t, "every message counted", func() bool {
		st := b.svc.Stats()
		return st.Received+st.Malformed+st.UnknownTag == garbage+valid
	})
	st := b.svc.Stats()
	if st.Received != valid || st.UnknownTag != uint64(unknownTag) || st.Malformed != uint64(garbage-unknownTag) {
		t.Fatalf("stats %+v; want %d received, %d unknown tag, %d malformed", st, valid, unknownTag, garbage-unknownTag)
	}
	if st.Entries != valid || st.Peers != peers {
		t.Fatalf("stats %+v; want %d entries and all %d peers still connected", st, valid, peers)
	}
	status, body := get(t, b.url+"/v1/kv/ok-999")
	expect(t, status, body, 200, `{"req_id":"ok-999","count":1}`)
	status, body = get(t, b.url+"/healthz")
	expect(t, status, body, 200, `{"status":"ok"}`)
	if grew := int64(heapInUse()) - int64(before); grew > 8<<20 {
		t.Fatalf("heap grew by %d bytes over 11,000 messages", grew)
	}
}

// rawPeer speaks ZMTP by hand, independently of go-zeromq, to play peers
// that misbehave.
type rawPeer struct {
	t *testing.T
	c net.Conn
}

const readyPUSH = "\x05READY\x0bSocket-Type\x00\x00\x00\x04PUSH\x08Identity\x00\x00\x00\x00"

func zmtpGreeting(mechanism string) []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
	copy(g[12:32], mechanism)
	return g
}

func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		h := make([]byte, 9, 9+len(body))
		h[0] = flags | zmtpFlagLong
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return append(h, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

func dialRaw(t *testing.T, endpoint string) *rawPeer {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "tcp://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawPeer{t: t, c: c}
}

func (p *rawPeer) write(b []byte) {
	p.t.Helper()
	if _, err := p.c.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// handshake completes a NULL handshake as a PUSH peer with READY body ready.
func (p *rawPeer) handshake(ready string) {
	p.t.Helper()
	p.write(zmtpGreeting("NULL"))
	greeting := make([]byte, 64)
	if _, err := io.ReadFull(p.c, greeting); err != nil {
		p.t.Fatal(err)
	}
	if greeting[0] != 0xff || greeting[9] != 0x7f || greeting[10] != 3 || !bytes.HasPrefix(greeting[12:], []byte("NULL")) {
		p.t.Fatalf("bad greeting from kvbridge: % x", greeting)
	}
	p.write(frame(zmtpFlagCommand, []byte(ready)))
	if ready == readyPUSH {
		if body := p.readFrame(); !bytes.HasPrefix(body, []byte("\x05READY")) || !bytes.Contains(body, []byte("PULL")) {
			p.t.Fatalf("kvbridge's READY = %q", body)
		}
	}
}

func (p *rawPeer) readFrame() []byte {
	p.t.Helper()
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(p.c, hdr); err != nil {
		p.t.Fatal(err)
	}
	body := make([]byte, hdr[1])
	if _, err := io.ReadFull(p.c, body); err != nil {
		p.t.Fatal(err)
	}
	return body
}

// expectClosed checks that kvbridge closes the connection within 5 s.
func (p *rawPeer) expectClosed() {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	for {
		_, err := p.c.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			p.t.Fatal("kvbridge kept the connection open")
		}
		return
	}
}

// stillWorks sends a notification through a fresh, well-behaved peer and
// reads it back.
func stillWorks(t *testing.T, b *bridge, id string) {
	t.Helper()
	send(t, dial(t, b.svc.ZMQEndpoint()), EncodeNotification(TagProxyNotif, id))
	status, body := get(t, b.url+"/v1/kv/"+id+"?wait_ms=5000")
	expect(t, status, body, 200, fmt.Sprintf(`{"req_id":%q,"count":1}`, id))
}

func TestHostilePeers(t *testing.T) {
	tests := []struct {
		name          string
		play          func(p *rawPeer)
		malformed     uint64
		handshakeFail int
	}{
		{"frame header claiming 2^62 bytes", func(p *rawPeer) {
			p.handshake(readyPUSH)
			p.write([]byte{zmtpFlagLong, 0x40, 0, 0, 0, 0, 0, 0, 0})
		}, 1, 0},
		{"frame over the message limit", func(p *rawPeer) {
			p.handshake(readyPUSH)
			p.write(frame(0, make([]byte, 64<<10)))
		}, 1, 0},
		{"multi-part message over the limit", func(p *rawPeer) {
			p.handshake(readyPUSH)
			for i := 0; i < 3; i++ {
				p.write(frame(zmtpFlagMore, make([]byte, 30<<10)))
			}
		}, 1, 0},
		{"many empty frames of one message", func(p *rawPeer) {
			p.handshake(readyPUSH)
			p.write(bytes.Repeat([]byte{zmtpFlagMore, 0}, 40<<10))
		}, 1, 0},
		{"READY with a truncated property (panics go-zeromq)", func(p *rawPeer) {
			p.handshake("\x05READY\x03ab")
		}, 0, 1},
		{"incompatible socket type", func(p *rawPeer) {
			p.handshake("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
		}, 0, 1},
		{"not ZMTP at all", func(p *rawPeer) {
			p.write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat("x", 64)))
		}, 0, 1},
		{"CURVE mechanism", func(p *rawPeer) {
			p.write(zmtpGreeting("CURVE"))
		}, 0, 1},
	}
	b := start(t, Config{})
	handshakeFailures := 0
	for i, tt := range tests {
		handshakeFailures += tt.handshakeFail
		t.Run(tt.name, func(t *testing.T) {
			before := b.svc.Stats()
			p := dialRaw(t, b.svc.ZMQEndpoint())
			tt.play(p)
			p.expectClosed()
			waitFor(t, "the peer's goroutine to end", func() bool { return b.svc.Stats().Peers == 0 })
			if got := b.svc.Stats().Malformed - before.Malformed; got != tt.malformed {
				t.Errorf("malformed += %d, want %d", got, tt.malformed)
			}
			want := fmt.Sprintf(`kvbridge_zmq_connections_total{result="handshake_failed"} %d`+"\n", handshakeFailures)
			if m := scrape(t, b); !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %q", want)
			}
			stillWorks(t, b, fmt.Sprint("after-", i))
		})
	}
}

// A peer that connects and says nothing neither blocks other peers nor
// stays past the handshake timeout.
func TestSilentPeer(t *testing.T) {
	b := start(t, Config{HandshakeTimeout: 300 * time.Millisecond})
	p := dialRaw(t, b.svc.ZMQEndpoint())
	stillWorks(t, b, "beside-silent")
	p.expectClosed()
}

// ZMTP 3.1 heartbeats: a PING is answered with a PONG and data flows on.
func TestPingPong(t *testing.T) {
	b := start(t, Config{})
	p := dialRaw(t, b.svc.ZMQEndpoint())
	p.handshake(readyPUSH)
	p.write(frame(zmtpFlagCommand, []byte("\x04PING\x00\x64ctx")))
	if body := p.readFrame(); !bytes.HasPrefix(body, []byte("\x04PONG")) {
		t.Fatalf("reply to PING = %q", body)
	}
	p.write(frame(0, EncodeNotification(TagProxyNotif, "after-ping")))
	status, body := get(t, b.url+"/v1/kv/after-ping?wait_ms=5000")
	expect(t, status, body, 200, `{"req_id":"after-ping","count":1}`)
}

// At the peer limit a new connection evicts the least recently active peer.
func TestPeerLimit(t *testing.T) {
	b := start(t, Config{MaxPeers: 2})
	quiet := dialRaw(t, b.svc.ZMQEndpoint())
	quiet.handshake(readyPUSH)
	busy := dial(t, b.svc.ZMQEndpoint())
	waitFor(t, "2 peers", func() bool { return b.svc.Stats().Peers == 2 })
	send(t, busy, EncodeNotification(TagProxyNotif, "busy-1"))
	waitFor(t, "busy-1", func() bool { return b.svc.Stats().Received == 1 })
	stillWorks(t, b, "third") // a third peer: the quiet one goes
	quiet.expectClosed()
	send(t, busy, EncodeNotification(TagProxyNotif, "busy-2"))
	status, body := get(t, b.url+"/v1/kv/busy-2?wait_ms=5000")
	expect(t, status, body, 200, `{"req_id":"busy-2","count":1}`)
	m := scrape(t, b)
	for _, want := range []string{
		`kvbridge_zmq_connections_total{result="evicted"} 1` + "\n",
		`kvbridge_zmq_connections_total{result="rejected"} 0` + "\n",
		"kvbridge_zmq_max_peers 2\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Issue 31: 1,024 idle connections (the default peer limit), half of them
// silent in the handshake and half with the handshake done, are held open;
// a prefiller's real PUSH socket (go-zeromq's) still connects and its
// notification is served at once, long before any timeout.
func TestIdlePeersDoNotLockOutAPrefiller(t *testing.T) {
	b := start(t, Config{})
	const idle = 1024
	var wg sync.WaitGroup
	peers := make([]*rawPeer, idle)
	for i := range peers {
		peers[i] = dialRaw(t, b.svc.ZMQEndpoint())
		peers[i].c.SetDeadline(time.Time{})
	}
	for i := 0; i < idle; i += 2 {
		wg.Add(1)
		go func(p *rawPeer) {
			defer wg.Done()
			p.c.SetDeadline(time.Now().Add(30 * time.Second))
			p.write(zmtpGreeting("NULL"))
			p.write(frame(zmtpFlagCommand, []byte(readyPUSH)))
			p.c.SetDeadline(time.Time{})
		}(peers[i])
	}
	wg.Wait()
	waitFor(t, "1,024 peers", func() bool { return b.svc.Stats().Peers == idle })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Dial(b.svc.ZMQEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(zmq4.NewMsg(EncodeNotification(TagProxyNotif, "legit-req-1"))); err != nil {
		t.Fatal(err)
	}
	status, body := get(t, b.url+"/v1/kv/legit-req-1?wait_ms=3000")
	expect(t, status, body, 200, `{"req_id":"legit-req-1","count":1}`)
	if got := b.svc.Stats().Peers; got != idle {
		t.Errorf("%d peers, want %d (the limit, one idle peer evicted)", got, idle)
	}
	if m := scrape(t, b); !strings.Contains(m, `kvbridge_zmq_connections_total{result="evicted"} 1`+"\n") {
		t.Error("the eviction is not counted")
	}
}

// A peer with the handshake done that then says nothing is disconnected
// after the idle timeout; one that keeps sending stays.
func TestIdleTimeout(t *testing.T) {
	b := start(t, Config{IdleTimeout: 300 * time.Millisecond})
	quiet := dialRaw(t, b.svc.ZMQEndpoint())
	quiet.handshake(readyPUSH)
	busy := dial(t, b.svc.ZMQEndpoint())
	for i := 0; i < 8; i++ {
		send(t, busy, EncodeNotification(TagProxyNotif, fmt.Sprint("tick-", i)))
		time.Sleep(100 * time.Millisecond)
	}
	quiet.expectClosed()
	send(t, busy, EncodeNotification(TagProxyNotif, "still-up"))
	status, body := get(t, b.url+"/v1/kv/still-up?wait_ms=5000")
	expect(t, status, body, 200, `{"req_id":"still-up","count":1}`)
	if m := scrape(t, b); !strings.Contains(m, `kvbridge_zmq_connections_total{result="idle_timeout"} 1`+"\n") {
		t.Error("the idle timeout is not counted")
	}
}

// Prefillers come and go: 8 prefillers × 4 TP ranks, each rank its own peer,
// connect, notify, disconnect, three times over.
func TestManyPeersAndReconnects(t *testing.T) {
	b := start(t, Config{})
	const rounds, prefillers, ranks, ids = 3, 8, 4, 50
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		for pf := 0; pf < prefillers; pf++ {
			for rank := 0; rank < ranks; rank++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					s, err := zmqpush.Dial(ctx, b.svc.ZMQEndpoint())
					if err != nil {
						t.Error(err)
						return
					}
					defer s.Close()
					for i := 0; i < ids; i++ {
						if err := s.Send(EncodeNotification(TagProxyNotif, fmt.Sprintf("r%d-p%d-%d", round, pf, i))); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		// Every id of the round reaches count = TP size.
		var req strings.Builder
		req.WriteString(`{"wait_ms":5000,"ids":[`)
		for pf := 0; pf < prefillers; pf++ {
			for i := 0; i < ids; i++ {
				if pf+i > 0 {
					req.WriteString(",")
				}
				fmt.Fprintf(&req, `{"req_id":"r%d-p%d-%d","count":%d}`, round, pf, i, ranks)
			}
		}
		req.WriteString("]}")
		waitFor(t, "the round's notifications", func() bool {
			return b.svc.Stats().Received == uint64((round+1)*prefillers*ranks*ids)
		})
		status, body := post(t, b.url+"/v1/kv/wait", req.String())
		if status != 200 || strings.Count(body, fmt.Sprintf(`"count":%d}`, ranks)) != prefillers*ids {
			t.Fatalf("round %d: %d %s", round, status, body[:min(len(body), 300)])
		}
		waitFor(t, "every peer gone", func() bool { return b.svc.Stats().Peers == 0 })
	}
	if m := scrape(t, b); !strings.Contains(m, fmt.Sprintf(`kvbridge_zmq_connections_total{result="accepted"} %d`+"\n", rounds*prefillers*ranks)) {
		t.Error("accepted connections miscounted")
	}
}

// The guard follows frame boundaries however the bytes are split by reads.
func TestGuardedConnTracksFramesAcrossReads(t *testing.T) {
	var stream []byte
	stream = append(stream, zmtpGreeting("NULL")...)
	stream = append(stream, frame(zmtpFlagCommand, []byte(readyPUSH))...)
	for i := 0; i < 50; i++ {
		stream = append(stream, frame(zmtpFlagMore, make([]byte, i*7))...)
		stream = append(stream, frame(0, make([]byte, 300+i))...)
	}
	accepted := len(stream)
	stream = append(stream, frame(zmtpFlagMore, make([]byte, 900))...)
	stream = append(stream, frame(0, make([]byte, 200))...) // 1,000+ bytes in one message
	for _, chunk := range []int{1, 2, 3, 7, 64, 1000} {
		g := &guardedConn{limit: 1024, greeting: zmtpGreetingBytes}
		var err error
		pos := 0
		for ; pos < len(stream) && err == nil; pos += chunk {
			err = g.track(stream[pos:min(pos+chunk, len(stream))])
		}
		if err == nil || pos <= accepted {
			t.Fatalf("chunk %d: err %v at byte %d; want the limit hit past byte %d", chunk, err, pos, accepted)
		}
	}
}

// FuzzGuardedConn feeds a ZMTP byte stream (after a greeting), split into
// reads of fuzzed sizes, through the guard and checks its verdict against a
// plain frame-by-frame walk of the whole stream.
func FuzzGuardedConn(f *testing.F) {
	var ok []byte
	ok = append(ok, frame(zmtpFlagCommand, []byte(readyPUSH))...)
	ok = append(ok, frame(zmtpFlagMore, []byte("part"))...)
	ok = append(ok, frame(0, make([]byte, 300))...)
	f.Add(ok, uint8(3), uint16(1024))
	f.Add([]byte{zmtpFlagLong, 0x40, 0, 0, 0, 0, 0, 0, 0}, uint8(1), uint16(1024))
	f.Add(bytes.Repeat([]byte{zmtpFlagMore, 0}, 600), uint8(7), uint16(1024))
	f.Add(frame(zmtpFlagCommand|zmtpFlagMore, make([]byte, 900)), uint8(64), uint16(1000))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8, limit uint16) {
		if chunk == 0 || limit == 0 {
			return
		}
		g := &guardedConn{limit: uint64(limit), greeting: zmtpGreetingBytes}
		var err error
		data := append(zmtpGreeting("NULL"), stream...)
		for pos := 0; pos < len(data) && err == nil; pos += int(chunk) {
			err = g.track(data[pos:min(pos+int(chunk), len(data))])
		}
		if want := overLimit(stream, uint64(limit)); (err != nil) != want {
			t.Fatalf("guard error %v; a frame-by-frame walk says over the limit: %v", err, want)
		}
	})
}

// overLimit walks complete frame headers and reports whether a message
// passes limit wire bytes by the end of some frame header.
func overLimit(b []byte, limit uint64) bool {
	var msg uint64
	for p := 0; p < len(b); {
		flags := b[p]
		sizeLen := 1
		if flags&zmtpFlagLong != 0 {
			sizeLen = 8
		}
		if p+1+sizeLen > len(b) {
			return false
		}
		var size uint64
		for _, c := range b[p+1 : p+1+sizeLen] {
			size = size<<8 | uint64(c)
		}
		if size > limit || msg+uint64(1+sizeLen)+size > limit {
			return true
		}
		msg += uint64(1+sizeLen) + size
		if flags&zmtpFlagMore == 0 || flags&zmtpFlagCommand != 0 {
			msg = 0
		}
		if size > uint64(len(b)-p-1-sizeLen) {
			return false
		}
		p += 1 + sizeLen + int(size)
	}
	return false
}
