package stack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pdroute/pdroute/hostcalls/kvbridge"
)

// KVBridge is an in-process kvbridge that can be restarted on the same
// addresses (a restart mid-wait is a scenario).
type KVBridge struct {
	mu       sync.Mutex
	zmq      string // bound endpoint, "tcp://127.0.0.1:PORT"
	httpAddr string
	svc      *kvbridge.Service
	cancel   context.CancelFunc
	done     chan error
	handlers map[string]http.Handler
}

// StartKVBridge starts kvbridge with its PULL socket on zmqBind and its HTTP
// API on httpAddr (port 0: the kernel picks; Restart keeps the ports).
func StartKVBridge(zmqBind, httpAddr string) (*KVBridge, error) {
	return startKVBridge(zmqBind, httpAddr, nil)
}

// startKVBridge is StartKVBridge serving handlers too (the discovery API).
func startKVBridge(zmqBind, httpAddr string, handlers map[string]http.Handler) (*KVBridge, error) {
	k := &KVBridge{handlers: handlers}
	if err := k.start(zmqBind, httpAddr); err != nil {
		return nil, err
	}
	k.zmq, k.httpAddr = k.svc.ZMQEndpoint(), k.svc.Addr()
	return k, nil
}

// rebindTimeout bounds Restart's retries while the old sockets close.
const rebindTimeout = 5 * time.Second

func (k *KVBridge) start(zmqBind, httpAddr string) error {
	svc, err := kvbridge.New(kvbridge.Config{ZMQBind: zmqBind, HTTPAddr: httpAddr, Handlers: k.handlers})
	if err != nil {
		return fmt.Errorf("stack: kvbridge: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	k.svc, k.cancel, k.done = svc, cancel, done
	return nil
}

func (k *KVBridge) stop() error {
	if k.svc == nil {
		return nil
	}
	k.cancel()
	err := <-k.done
	k.svc = nil
	return err
}

// ZMQEndpoint is the PULL endpoint prefillers push notifications to.
func (k *KVBridge) ZMQEndpoint() string { return k.zmq }

// HTTPAddr is the HTTP API's IP:port (the kvbridge cluster's endpoint).
func (k *KVBridge) HTTPAddr() string { return k.httpAddr }

// Stats returns the running service's counters (zero while restarting).
func (k *KVBridge) Stats() kvbridge.Stats {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.svc == nil {
		return kvbridge.Stats{}
	}
	return k.svc.Stats()
}

// Restart stops kvbridge (its waiting long polls are answered 503, its ZMQ
// peers disconnected, its ids forgotten) and starts a new one on the same
// addresses, as a crash and a supervisor restart would.
func (k *KVBridge) Restart() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.stop(); err != nil {
		return fmt.Errorf("stack: kvbridge stop: %w", err)
	}
	deadline := time.Now().Add(rebindTimeout)
	for {
		err := k.start(k.zmq, k.httpAddr)
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops kvbridge and leaves it stopped (Restart starts it again): the
// companion is down.
func (k *KVBridge) Stop() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stop()
}

// Close stops kvbridge.
func (k *KVBridge) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stop()
}
