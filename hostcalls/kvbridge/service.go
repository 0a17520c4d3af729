package kvbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Config configures a Service. A zero field takes its default.
type Config struct {
	// ZMQBind is the ZeroMQ endpoint ("tcp://host:port"; host "*" means all
	// interfaces) of the PULL socket that prefillers' PUSH sockets connect
	// to. Default "tcp://127.0.0.1:7500": the port LMCache's configuration
	// examples use, on loopback, as the HTTP API. Whoever can reach the port
	// can post notifications and take peer slots, so listening wider, which
	// prefillers on other hosts need, is a deliberate choice: the container
	// image and the Kubernetes manifest bind 0.0.0.0 and rely on a network
	// policy (docs/OPERATIONS.md, kvbridge).
	ZMQBind string
	// HTTPAddr is the host:port of the HTTP API. Default "127.0.0.1:7501":
	// the filter calls kvbridge from the same host or pod, and nothing else
	// needs to; listening wider is a deliberate choice (the container image
	// makes it).
	HTTPAddr string
	// TTL is how long an id's notifications are kept after the first one
	// arrived. Default 120s: far longer than the filter waits for KV
	// (kv_wait_timeout_ms, 10 s by default) plus a slow prefill, yet short
	// enough that ids nobody asked for go away on their own.
	TTL time.Duration
	// MaxEntries caps the ids held; at the cap the oldest is evicted.
	// Default 1,000,000: a TTL's worth of 8,000 requests/s, at about 200 B
	// per pending id, about 200 MiB resident (BytesPerPendingID).
	MaxEntries int
	// MaxWaiters caps concurrent long-poll requests; more are answered 503.
	// Default 10,000: the filter holds one long-poll per Envoy worker, so
	// this is far above need while bounding goroutines and memory.
	MaxWaiters int
	// MaxPeers caps concurrent ZMQ connections. A new connection at the cap
	// evicts the least recently active peer (kvbridge_zmq_connections_total
	// {result="evicted"}). Default 1024: one connection per prefiller TP rank.
	MaxPeers int
	// MaxMessageBytes caps one ZMQ message (all frames, headers included); a
	// peer that sends a larger one is disconnected, as libzmq does with
	// ZMQ_MAXMSGSIZE. Default 65536: a notification is about 40 bytes.
	MaxMessageBytes int
	// HandshakeTimeout bounds a new ZMQ connection's ZMTP handshake.
	// Default 10s: libzmq peers finish in microseconds; this only clears out
	// connections that never speak ZMTP.
	HandshakeTimeout time.Duration
	// IdleTimeout disconnects a peer that sent no message and no ZMTP
	// command (heartbeat PING) for this long. Default 10m: a prefiller rank
	// notifies on every lmcache request, and libzmq reconnects a dropped
	// PUSH socket by itself within 100 ms, so only dead or hostile peers stay
	// quiet that long. A notification sent at the very instant of the
	// disconnect can be lost; the filter then waits kv_wait_timeout_ms and
	// follows on_kv_timeout.
	IdleTimeout time.Duration
	// Logger receives the service's structured logs. Default: discard, so
	// that a library user is not logged at unless it asks.
	Logger *slog.Logger
	// Now is the clock for first-seen times and TTL expiry. Default
	// time.Now; tests inject a fake one.
	Now func() time.Time
	// Handlers are served beside the KV API on the same listener, by
	// net/http ServeMux pattern (the discovery companion's
	// "GET /v1/pools"). Default none.
	Handlers map[string]http.Handler
}

// BytesPerPendingID is the memory kvbridge takes per pending id, the one
// figure the documents give: resident memory, measured with kvbridge-load
// -run rss (1,000,000 ids: 190–225 MiB with the default GOGC; 137 B/id of
// it is live heap, BenchmarkStoreMemory). TestBytesPerPendingID checks the
// live heap stays under it and the documents say it.
const BytesPerPendingID = 200

// WithDefaults returns cfg with every zero field set to its default; the
// command line takes its flag defaults from Config{}.WithDefaults().
func (cfg Config) WithDefaults() Config {
	if cfg.ZMQBind == "" {
		cfg.ZMQBind = "tcp://127.0.0.1:7500"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:7501"
	}
	if cfg.TTL == 0 {
		cfg.TTL = 120 * time.Second
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 1_000_000
	}
	if cfg.MaxWaiters == 0 {
		cfg.MaxWaiters = 10_000
	}
	if cfg.MaxPeers == 0 {
		cfg.MaxPeers = 1024
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = 64 << 10
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// Validate reports the first invalid field of cfg (after defaults), naming
// it as the command-line flag does.
func (cfg Config) Validate() error {
	cfg = cfg.WithDefaults()
	if _, err := zmqTCPAddr(cfg.ZMQBind); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
		return fmt.Errorf("http-addr %q: %v", cfg.HTTPAddr, err)
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"ttl: must be positive", cfg.TTL < 0},
		{"max-entries: must be positive", cfg.MaxEntries < 0},
		{"max-waiters: must be positive", cfg.MaxWaiters < 0},
		{"zmq-max-peers: must be positive", cfg.MaxPeers < 0},
		{"zmq-max-message-bytes: must be at least 64", cfg.MaxMessageBytes < 64},
		{"zmq-handshake-timeout: must be positive", cfg.HandshakeTimeout < 0},
		{"zmq-idle-timeout: must be positive", cfg.IdleTimeout < 0},
	} {
		if f.bad {
			return errors.New(f.name)
		}
	}
	return nil
}

// Service is a running kvbridge: the ZMQ receiver, the id store and the
// HTTP API.
type Service struct {
	cfg     Config
	log     *slog.Logger
	store   *store
	recv    *receiver
	httpLn  net.Listener
	http    *http.Server
	metrics *metrics
	// cancelBase ends every request's context (at shutdown).
	cancelBase context.CancelFunc

	received   atomic.Uint64
	malformed  atomic.Uint64
	unknownTag atomic.Uint64

	started  atomic.Bool
	stopping atomic.Bool
}

// shutdownTimeout bounds the wait for HTTP handlers during shutdown; they
// return at once because closing the store answers every waiter.
const shutdownTimeout = 5 * time.Second

// New validates cfg and binds both listeners, so that Addr and ZMQEndpoint
// are known (port 0 picks a free port) and bind errors surface here. Run
// must then be called, once; it closes the listeners when it returns.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	zmqLn, err := listenZMQ(cfg.ZMQBind)
	if err != nil {
		return nil, fmt.Errorf("zmq-bind: %w", err)
	}
	httpLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		zmqLn.Close()
		return nil, fmt.Errorf("http-addr: %w", err)
	}
	s := &Service{
		cfg:    cfg,
		log:    cfg.Logger,
		store:  newStore(cfg.TTL, cfg.MaxEntries, cfg.MaxWaiters),
		httpLn: httpLn,
	}
	s.metrics = newMetrics(s)
	s.recv = &receiver{
		ln:               zmqLn,
		maxPeers:         cfg.MaxPeers,
		maxMessageBytes:  cfg.MaxMessageBytes,
		handshakeTimeout: cfg.HandshakeTimeout,
		idleTimeout:      cfg.IdleTimeout,
		now:              time.Now,
		log:              cfg.Logger,
		handle:           s.handleFrame,
		malformed:        s.countMalformed,
		event:            func(r connectionResult) { s.metrics.connections.WithLabelValues(string(r)).Inc() },
		peers:            make(map[net.Conn]*peerState),
	}
	// Requests' contexts end when the service shuts down, so that handlers
	// that wait (cfg.Handlers' long polls) answer instead of holding up the
	// shutdown.
	base, cancelBase := context.WithCancel(context.Background())
	s.cancelBase = cancelBase
	s.http = &http.Server{
		BaseContext:       func(net.Listener) context.Context { return base },
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Addr is the HTTP API's listening address (host:port).
func (s *Service) Addr() string { return s.httpLn.Addr().String() }

// ZMQEndpoint is the bound PULL endpoint, "tcp://host:port".
func (s *Service) ZMQEndpoint() string { return "tcp://" + s.recv.ln.Addr().String() }

// Run serves until ctx is done, then shuts down: waiting HTTP clients are
// answered 503, the HTTP listener stops, ZMQ peers are disconnected and the
// listeners closed. It returns nil after a shutdown asked for by ctx, and an
// error when a listener fails.
func (s *Service) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("kvbridge: Run called twice")
	}
	errc := make(chan error, 2)
	go func() { errc <- s.recv.serve() }()
	go func() {
		err := s.http.Serve(s.httpLn)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	sweepDone := make(chan struct{})
	go s.sweepLoop(sweepDone)
	s.log.Info("kvbridge listening", "http", s.Addr(), "zmq", s.ZMQEndpoint(),
		"ttl", s.cfg.TTL.String(), "max_entries", s.cfg.MaxEntries)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if err == nil {
			err = errors.New("kvbridge: a listener stopped unexpectedly")
		}
	}
	s.log.Info("kvbridge shutting down", "waiters", s.store.stats().waiters)
	s.stopping.Store(true)
	s.store.close()
	s.cancelBase()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if serr := s.http.Shutdown(sctx); serr != nil {
		s.http.Close()
	}
	s.recv.close()
	close(sweepDone)
	s.log.Info("kvbridge stopped")
	return err
}

// Stats is a snapshot of the service's counters and gauges (the same values
// /metrics exports).
type Stats struct {
	Received   uint64 // notifications accepted (one per frame)
	Malformed  uint64 // frames or messages dropped as malformed
	UnknownTag uint64 // well-formed maps with another "type" tag, ignored
	Evicted    uint64 // entries removed at the MaxEntries cap
	Expired    uint64 // entries removed after TTL
	Entries    int    // ids held
	Waiters    int    // long-poll requests waiting
	Peers      int    // ZMQ connections open
}

// Stats returns the current counters.
func (s *Service) Stats() Stats {
	st := s.store.stats()
	return Stats{
		Received:   s.received.Load(),
		Malformed:  s.malformed.Load(),
		UnknownTag: s.unknownTag.Load(),
		Evicted:    st.evicted,
		Expired:    st.expired,
		Entries:    st.entries,
		Waiters:    st.waiters,
		Peers:      s.recv.peerCount(),
	}
}

func (s *Service) handleFrame(frame []byte) {
	id, err := parseNotification(frame)
	switch {
	case err == nil:
		s.received.Add(1)
		s.store.notify(id, s.cfg.Now())
	case errors.Is(err, errUnknownTag):
		s.unknownTag.Add(1)
	default:
		s.countMalformed(err.Error())
	}
}

func (s *Service) countMalformed(reason string) {
	s.malformed.Add(1)
	s.log.Debug("zmq frame dropped", "reason", reason)
}

// sweepLoop expires entries while the service is idle too; operations
// expire lazily as well, so the period only bounds how long memory lingers.
func (s *Service) sweepLoop(done <-chan struct{}) {
	t := time.NewTicker(min(max(s.cfg.TTL/4, 10*time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			s.store.sweep(s.cfg.Now())
		}
	}
}
