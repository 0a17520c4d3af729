package kvbridge

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// listenZMQ binds a TCP listener for a ZeroMQ endpoint "tcp://host:port".
// As in libzmq, host "*" means every interface.
func listenZMQ(endpoint string) (net.Listener, error) {
	addr, err := zmqTCPAddr(endpoint)
	if err != nil {
		return nil, err
	}
	return net.Listen("tcp", addr)
}

func zmqTCPAddr(endpoint string) (string, error) {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("zmq-bind %q: only tcp:// endpoints are supported", endpoint)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("zmq-bind %q: %v", endpoint, err)
	}
	if host == "*" {
		host = ""
	}
	return net.JoinHostPort(host, port), nil
}

// receiver accepts PUSH peers on a listener and hands every single-frame
// message to handle. It speaks ZMTP 3 through go-zeromq's connection-level
// API (zmq4.Open, Conn.RecvMsg) on connections it accepts itself, so that
// each peer has its own goroutine with a handshake deadline and a panic
// guard, and every read passes a frame-size guard. go-zeromq's socket API
// does none of this: one silent TCP client blocks its accept loop, and one
// crafted handshake or frame header panics the process. See
// RATIONALE.md (kvbridge).
type receiver struct {
	ln               net.Listener
	maxPeers         int
	maxMessageBytes  int
	handshakeTimeout time.Duration
	log              *slog.Logger
	handle           func(frame []byte)
	malformed        func(reason string)
	event            func(connectionResult)

	idleTimeout time.Duration
	now         func() time.Time // monotonic clock for peers' activity (time.Now)

	mu     sync.Mutex
	peers  map[net.Conn]*peerState
	closed bool
	wg     sync.WaitGroup
}

// peerState is what the receiver knows of one connection: when it last
// showed life (accepted, a message, a command), under receiver.mu.
type peerState struct {
	lastActive time.Time
}

// connectionResult labels what became of an accepted TCP connection.
type connectionResult string

const (
	connAccepted        connectionResult = "accepted"
	connRejected        connectionResult = "rejected"
	connHandshakeFailed connectionResult = "handshake_failed"
	// connEvicted: closed to make room for a new connection at the peer
	// limit, the least recently active peer first.
	connEvicted connectionResult = "evicted"
	// connIdleTimeout: closed after idleTimeout without a message or command.
	connIdleTimeout connectionResult = "idle_timeout"
)

// connectionResults are every label of kvbridge_zmq_connections_total.
var connectionResults = []connectionResult{connAccepted, connRejected, connHandshakeFailed, connEvicted, connIdleTimeout}

// serve accepts peers until close; it returns nil after close and the
// listener's error otherwise.
func (r *receiver) serve() error {
	var backoff time.Duration
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if r.isClosed() {
				return nil
			}
			if isTemporary(err) {
				// Out of file descriptors and the like: back off as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				r.log.Warn("zmq accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("zmq accept: %w", err)
		}
		backoff = 0
		if !r.track(c) {
			c.Close()
			r.event(connRejected)
			r.log.Debug("zmq peer rejected: shutting down", "peer", c.RemoteAddr().String())
			continue
		}
		go r.servePeer(c)
	}
}

// isTemporary reports a transient accept failure (EMFILE, ENFILE,
// ECONNABORTED...), which package net marks as temporary.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// track registers c as a live peer; it refuses only when closed. At the
// peer limit the least recently active peer is evicted to make room: idle
// connections (a crowd of them opened to exhaust the limit, or prefillers
// gone quiet) must not lock out a prefiller that reconnects, which would
// make every lmcache request wait kv_wait_timeout_ms. A libzmq PUSH peer that
// is evicted reconnects on its own (ZMQ_RECONNECT_IVL, 100 ms).
func (r *receiver) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.maxPeers <= 0 {
		return false
	}
	for len(r.peers) >= r.maxPeers {
		var victim net.Conn
		var oldest time.Time
		for pc, st := range r.peers {
			if victim == nil || st.lastActive.Before(oldest) {
				victim, oldest = pc, st.lastActive
			}
		}
		// Its goroutine sees the closed connection and untracks it (a no-op
		// in the map by then).
		delete(r.peers, victim)
		victim.Close()
		r.event(connEvicted)
		r.log.Warn("zmq peer evicted: peer limit reached", "peer", victim.RemoteAddr().String(),
			"idle", r.now().Sub(oldest).Round(time.Millisecond).String(), "max_peers", r.maxPeers)
	}
	r.peers[c] = &peerState{lastActive: r.now()}
	r.wg.Add(1)
	return true
}

// active records that c showed life.
func (r *receiver) active(c net.Conn) {
	r.mu.Lock()
	if st := r.peers[c]; st != nil {
		st.lastActive = r.now()
	}
	r.mu.Unlock()
}

func (r *receiver) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.peers, c)
	r.mu.Unlock()
	c.Close()
	r.wg.Done()
}

func (r *receiver) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func (r *receiver) peerCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.peers)
}

// close stops accepting, disconnects every peer and waits for their
// goroutines.
func (r *receiver) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.peers {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}

func (r *receiver) servePeer(c net.Conn) {
	defer r.untrack(c)
	peer := c.RemoteAddr().String()
	handshaking := true
	defer func() {
		// go-zeromq parses a peer's handshake and frames on this goroutine;
		// a panic there ends this peer only.
		if p := recover(); p != nil {
			if handshaking {
				r.event(connHandshakeFailed)
			} else {
				r.malformed("zmtp")
			}
			r.log.Warn("zmq peer dropped after a panic in the ZMTP layer", "peer", peer, "panic", fmt.Sprint(p))
		}
	}()

	if err := c.SetDeadline(time.Now().Add(r.handshakeTimeout)); err != nil {
		r.event(connHandshakeFailed)
		return
	}
	zc, err := zmq4.Open(newGuardedConn(c, r.maxMessageBytes), null.Security(), zmq4.Pull, zmq4.SocketIdentity("kvbridge"), true, nil)
	if err != nil {
		r.event(connHandshakeFailed)
		r.log.Debug("zmq handshake failed", "peer", peer, "err", err)
		return
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		r.event(connHandshakeFailed)
		return
	}
	handshaking = false
	r.event(connAccepted)
	r.log.Debug("zmq peer connected", "peer", peer, "socket_type", zc.Peer.Meta["Socket-Type"])

	for {
		if r.idleTimeout > 0 {
			if err := c.SetReadDeadline(time.Now().Add(r.idleTimeout)); err != nil {
				return
			}
		}
		msg, err := zc.RecvMsg()
		if err == nil {
			r.active(c)
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.event(connIdleTimeout)
				r.log.Info("zmq peer idle, disconnected", "peer", peer, "idle_timeout", r.idleTimeout.String())
				return
			}
			if errors.Is(err, errMessageTooLarge) {
				r.malformed("message over the size limit")
				r.log.Debug("zmq peer dropped", "peer", peer, "err", err)
			} else {
				r.log.Debug("zmq peer disconnected", "peer", peer, "err", err)
			}
			return
		}
		switch {
		case msg.Type == zmq4.CmdMsg:
			// PING is answered inside RecvMsg; other commands carry no data.
		case len(msg.Frames) != 1:
			r.malformed("multi-part message")
		default:
			r.handle(msg.Frames[0])
		}
	}
}

var errMessageTooLarge = errors.New("zmtp message over the size limit")

// guardedConn buffers a peer's reads and, from the end of the 64-byte ZMTP 3
// greeting on, follows the frame headers (flags byte, then a 1- or 8-byte
// size) in the bytes it hands out. When a frame would take a message (all
// its frames, headers included) past the limit, the read fails before the
// ZMTP layer sees the size, so it never allocates for it.
type guardedConn struct {
	net.Conn
	r     *bufio.Reader
	limit uint64

	greeting  int    // greeting bytes still to pass
	sizeBytes int    // size bytes still to read; 0 at a flags byte or in a body
	body      uint64 // body bytes still to pass
	flags     byte   // flags of the current frame
	size      uint64 // size being assembled
	msgBytes  uint64 // wire bytes of the current message so far
}

const (
	zmtpGreetingBytes = 64
	zmtpFlagMore      = 0x01
	zmtpFlagLong      = 0x02
	zmtpFlagCommand   = 0x04
)

func newGuardedConn(c net.Conn, limit int) *guardedConn {
	return &guardedConn{Conn: c, r: bufio.NewReaderSize(c, 16<<10), limit: uint64(limit), greeting: zmtpGreetingBytes}
}

func (g *guardedConn) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if gerr := g.track(p[:n]); gerr != nil {
		return 0, gerr
	}
	return n, err
}

func (g *guardedConn) track(b []byte) error {
	for len(b) > 0 {
		switch {
		case g.greeting > 0:
			k := min(g.greeting, len(b))
			g.greeting -= k
			b = b[k:]
		case g.body > 0:
			k := min(g.body, uint64(len(b)))
			g.body -= k
			b = b[k:]
		case g.sizeBytes == 0: // a frame's flags byte
			g.flags = b[0]
			b = b[1:]
			g.sizeBytes = 1
			if g.flags&zmtpFlagLong != 0 {
				g.sizeBytes = 8
			}
			g.size = 0
			g.msgBytes += 1 + uint64(g.sizeBytes)
		default:
			g.size = g.size<<8 | uint64(b[0])
			b = b[1:]
			g.sizeBytes--
			if g.sizeBytes > 0 {
				continue
			}
			if g.size > g.limit || g.msgBytes+g.size > g.limit {
				return fmt.Errorf("%w: frame of %d bytes (limit %d per message)", errMessageTooLarge, g.size, g.limit)
			}
			g.body = g.size
			g.msgBytes += g.size
			if g.flags&zmtpFlagMore == 0 || g.flags&zmtpFlagCommand != 0 {
				g.msgBytes = 0 // this frame ends the message
			}
		}
	}
	return nil
}
