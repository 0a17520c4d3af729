// Package zmqpush is a minimal ZeroMQ PUSH client for talking to kvbridge the
// way an LMCache prefiller rank does: it connects to a PULL endpoint, does the
// ZMTP 3 handshake through go-zeromq's connection API and writes messages
// through a buffer, so a sender can queue many and flush once. Tests, the
// load tool (hostcalls/cmd/kvbridge-load) and mock engines use it.
//
// It is native code; it must not be imported by the filter or the pure
// packages that run inside wasm. It does not reconnect: a caller that wants
// libzmq's reconnect behaviour dials again.
package zmqpush

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// Sender is one PUSH connection. It is not safe for concurrent use.
type Sender struct {
	conn *flushingConn
	zc   *zmq4.Conn
}

// Dial connects to endpoint ("tcp://host:port") and completes the ZMTP
// handshake; ctx bounds both.
func Dial(ctx context.Context, endpoint string) (*Sender, error) {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return nil, fmt.Errorf("zmqpush: %q: only tcp:// endpoints are supported", endpoint)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("zmqpush: %w", err)
	}
	// ctx also bounds the handshake: ending it closes the connection.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	fc := &flushingConn{Conn: c, w: bufio.NewWriterSize(c, 64<<10)}
	zc, err := zmq4.Open(fc, null.Security(), zmq4.Push, zmq4.SocketIdentity(""), false, nil)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("zmqpush: handshake with %s: %w", endpoint, err)
	}
	if !stop() {
		return nil, fmt.Errorf("zmqpush: handshake with %s: %w", endpoint, ctx.Err())
	}
	return &Sender{conn: fc, zc: zc}, nil
}

// Queue buffers one message of one or more frames; it reaches the wire when
// the buffer fills or on Flush.
func (s *Sender) Queue(frames ...[]byte) error {
	return s.zc.SendMsg(zmq4.NewMsgFrom(frames...))
}

// Flush writes every queued message.
func (s *Sender) Flush() error { return s.conn.w.Flush() }

// Send queues one message and flushes.
func (s *Sender) Send(frames ...[]byte) error {
	if err := s.Queue(frames...); err != nil {
		return err
	}
	return s.Flush()
}

// Close flushes and closes the connection.
func (s *Sender) Close() error {
	ferr := s.Flush()
	if err := s.conn.Close(); err != nil {
		return err
	}
	return ferr
}

// flushingConn buffers writes and flushes them before every read, so the
// ZMTP handshake (write, then wait for the peer) never waits on its own
// buffered bytes.
type flushingConn struct {
	net.Conn
	w *bufio.Writer
}

func (c *flushingConn) Write(p []byte) (int, error) { return c.w.Write(p) }

func (c *flushingConn) Read(p []byte) (int, error) {
	if err := c.w.Flush(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}
