package mocks

import (
	"context"
	"errors"
	"log"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// proxyNotif is LMCache's ProxyNotif as msgspec encodes a tagged struct: a map with
// the tag field "type" first, then the fields in declaration order. msgpack/v5
// encodes a struct as a map in field order, with str (not bin) strings.
type proxyNotif struct {
	Type  string `msgpack:"type"`
	ReqID string `msgpack:"req_id"`
}

// encodeNotif is the one-frame payload of a notification.
func encodeNotif(tag, reqID string) ([]byte, error) {
	return msgpack.Marshal(proxyNotif{Type: tag, ReqID: reqID})
}

// notifier owns one PUSH socket per prefiller TP rank, connected to the router's PULL
// socket, as each LMCache worker does. A socket is dialled on first use and again
// after a send error, so the router may start after the mock.
type notifier struct {
	ctx      context.Context
	endpoint string
	tag      string
	logger   *log.Logger
	ranks    []rankSocket
}

type rankSocket struct {
	mu   sync.Mutex
	sock zmq4.Socket
}

func newNotifier(ctx context.Context, endpoint, tag string, ranks int, logger *log.Logger) *notifier {
	return &notifier{ctx: ctx, endpoint: endpoint, tag: tag, logger: logger, ranks: make([]rankSocket, ranks)}
}

// send delivers one notification for req_id from rank.
func (n *notifier) send(rank int, reqID string) error {
	if n == nil {
		return errors.New("this engine is not an LMCache prefiller")
	}
	frame, err := encodeNotif(n.tag, reqID)
	if err != nil {
		return err
	}
	rs := &n.ranks[rank]
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if rs.sock == nil {
			if rs.sock, err = n.dial(); err != nil {
				return err
			}
		}
		err = rs.sock.Send(zmq4.NewMsg(frame))
		if err == nil || attempt == 1 {
			return err
		}
		rs.sock.Close()
		rs.sock = nil
	}
}

func (n *notifier) dial() (zmq4.Socket, error) {
	sock := zmq4.NewPush(n.ctx,
		zmq4.WithDialerRetry(50*time.Millisecond),
		zmq4.WithDialerMaxRetries(20),
		zmq4.WithTimeout(2*time.Second),
		zmq4.WithLogger(n.logger))
	if err := sock.Dial(n.endpoint); err != nil {
		sock.Close()
		return nil, err
	}
	return sock, nil
}

func (n *notifier) close() {
	for i := range n.ranks {
		rs := &n.ranks[i]
		rs.mu.Lock()
		if rs.sock != nil {
			rs.sock.Close()
			rs.sock = nil
		}
		rs.mu.Unlock()
	}
}
