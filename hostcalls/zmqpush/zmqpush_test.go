package zmqpush

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The sender is checked against go-zeromq's own PULL socket, an independent
// receiver: single and multi-part messages, queued and flushed, in order.
func TestSendToZMQPull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx)
	defer pull.Close()
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s, err := Dial(ctx, "tcp://"+pull.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if err := s.Send([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := s.Send([]byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if err := s.Queue([]byte(fmt.Sprint("q", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"one"}, {"a", "b"}}
	for i := 0; i < 1000; i++ {
		want = append(want, []string{fmt.Sprint("q", i)})
	}
	for i, w := range want {
		msg, err := pull.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got := fmt.Sprintf("%q", msg.Frames); got != fmt.Sprintf("%q", w) {
			t.Fatalf("message %d = %s, want %q", i, got, w)
		}
	}
}

func TestDialErrors(t *testing.T) {
	if _, err := Dial(context.Background(), "ipc:///tmp/x"); err == nil || err.Error() != `zmqpush: "ipc:///tmp/x": only tcp:// endpoints are supported` {
		t.Fatalf("ipc endpoint: %v", err)
	}

	// A listener that accepts and never speaks: ctx bounds the handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	if _, err := Dial(ctx, "tcp://"+ln.Addr().String()); err == nil {
		t.Fatal("handshake with a silent listener succeeded")
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("Dial took %v past its 200ms context", took)
	}
}
