package envoyemu

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// process is the state an Envoy process shares between its worker threads:
// shared data, shared queues, stats, the log, and the clusters http calls may
// name. One Host (or one Driver) is one process.
type process struct {
	shared   sharedData
	queues   sharedQueues
	stats    statsStore
	log      logSink
	clusters map[string]*ClusterConfig
}

func newProcess(clusters map[string]*ClusterConfig, sink io.Writer, level LogLevel) *process {
	p := &process{clusters: clusters}
	p.shared.nextCAS = 1
	p.queues.nextToken = 1
	p.log.sink = sink
	p.log.level = level
	return p
}

// hasCluster reports whether http calls may name cluster (a nil cluster map,
// the Driver's default, accepts any name).
func (p *process) hasCluster(name string) bool {
	if p.clusters == nil {
		return true
	}
	_, ok := p.clusters[name]
	return ok
}

// --- shared data ---

// sharedData is cpp-host's SharedData: values with a CAS, namespaced by vm_id.
type sharedData struct {
	mu      sync.Mutex
	data    map[string]map[string]sharedValue
	nextCAS uint32
}

type sharedValue struct {
	value []byte
	cas   uint32
}

// get returns a copy of the value of key (a byte slice, so a key read from
// the VM is looked up without a string of its own).
func (d *sharedData) get(vmID string, key []byte) ([]byte, uint32, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.data[vmID][string(key)]
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), e.value...), e.cas, true
}

// set stores value unless cas is non-zero and differs from the stored CAS
// (CasMismatch). Each successful set takes the next CAS of a process-wide
// counter that starts at 1 and skips 0.
func (d *sharedData) set(vmID, key string, value []byte, cas uint32) abispec.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.data == nil {
		d.data = map[string]map[string]sharedValue{}
	}
	m := d.data[vmID]
	if m == nil {
		m = map[string]sharedValue{}
		d.data[vmID] = m
	}
	if e, ok := m[key]; ok && cas != 0 && cas != e.cas {
		return abispec.StatusCasMismatch
	}
	m[key] = sharedValue{value: append([]byte(nil), value...), cas: d.nextCAS}
	d.nextCAS++
	if d.nextCAS == 0 {
		d.nextCAS++
	}
	return abispec.StatusOK
}

// --- shared queues ---

// sharedQueues is cpp-host's SharedQueue: queues keyed by (vm_id, name) with
// one consumer (the last registrant) that is told about new items.
type sharedQueues struct {
	mu        sync.Mutex
	tokens    map[[2]string]uint32
	queues    map[uint32]*sharedQueue
	nextToken uint32
}

type sharedQueue struct {
	items    [][]byte
	consumer *vm
	rootID   uint32
}

// register creates the queue or re-binds its consumer to (v, rootID),
// keeping its items, and returns its token.
func (q *sharedQueues) register(vmID, name string, v *vm, rootID uint32) uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tokens == nil {
		q.tokens = map[[2]string]uint32{}
		q.queues = map[uint32]*sharedQueue{}
	}
	key := [2]string{vmID, name}
	token, ok := q.tokens[key]
	if !ok {
		for token = q.nextToken; token == 0 || q.queues[token] != nil; token++ {
		}
		q.nextToken = token + 1
		q.tokens[key] = token
		q.queues[token] = &sharedQueue{}
	}
	sq := q.queues[token]
	sq.consumer, sq.rootID = v, rootID
	return token
}

func (q *sharedQueues) resolve(vmID, name string) uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.tokens[[2]string{vmID, name}]
}

func (q *sharedQueues) dequeue(token uint32) ([]byte, abispec.Status) {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.queues[token]
	if sq == nil {
		return nil, abispec.StatusNotFound
	}
	if len(sq.items) == 0 {
		return nil, abispec.StatusEmpty
	}
	item := sq.items[0]
	sq.items = sq.items[1:]
	return item, abispec.StatusOK
}

// enqueue appends data and posts proxy_on_queue_ready(root, token) to the
// consumer VM's thread; it never runs inside the caller's VM call.
func (q *sharedQueues) enqueue(token uint32, data []byte) abispec.Status {
	q.mu.Lock()
	sq := q.queues[token]
	if sq == nil {
		q.mu.Unlock()
		return abispec.StatusNotFound
	}
	sq.items = append(sq.items, data)
	consumer, rootID := sq.consumer, sq.rootID
	q.mu.Unlock()
	if consumer != nil {
		consumer.env.post(func() {
			if root := consumer.contexts[rootID]; root != nil && !consumer.closed {
				root.onQueueReady(token)
			}
		})
	}
	return abispec.StatusOK
}

// --- log ---

// LogLevel is a proxy-wasm / Envoy log level.
type LogLevel uint32

// Log levels, as in proxy_log.
const (
	LevelTrace LogLevel = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
	LevelCritical
)

var levelNames = [...]string{"trace", "debug", "info", "warning", "error", "critical"}

// String is Envoy's spdlog level name.
func (l LogLevel) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "off"
}

// ParseLogLevel accepts Envoy's --log-level names.
func ParseLogLevel(s string) (LogLevel, error) {
	for i, n := range levelNames {
		if s == n || (s == "warn" && i == int(LevelWarn)) {
			return LogLevel(i), nil
		}
	}
	return 0, fmt.Errorf("unknown log level %q (trace, debug, info, warning, error, critical)", s)
}

// LogEntry is one captured log line.
type LogEntry struct {
	Time  time.Time
	Level LogLevel
	// VM names the VM that logged: "canary", "worker_0", ...; "" for the host.
	VM string
	// Message is the guest's text as Envoy passes it to its logger: from
	// proxy_log, or from fd 1 (info) / fd 2 (error) with one trailing newline trimmed.
	Message string
	// Guest is true for lines written by the plugin, false for host lines.
	Guest bool
	// Stdio is true for fd 1/2 output.
	Stdio bool
}

type logSink struct {
	mu      sync.Mutex
	entries []LogEntry
	sink    io.Writer
	level   LogLevel
}

func (l *logSink) add(e LogEntry, formatted string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	if l.sink != nil && e.Level >= l.level {
		fmt.Fprintf(l.sink, "[%s][%s][%s] %s\n", e.Time.Format("2006-01-02 15:04:05.000"), threadName(e.VM), e.Level, formatted)
	}
}

func threadName(vm string) string {
	if vm == "" {
		return "main"
	}
	return vm
}

func (l *logSink) snapshot() []LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]LogEntry(nil), l.entries...)
}

// logf records a host log line.
func (p *process) logf(level LogLevel, vm, format string, args ...any) {
	p.logLine(level, vm, fmt.Sprintf(format, args...))
}

// logLine records a host log line formatted already (a line per request
// need not go through fmt).
func (p *process) logLine(level LogLevel, vm, msg string) {
	p.log.add(LogEntry{Time: time.Now(), Level: level, VM: vm, Message: msg}, msg)
}

// wasmLogLevel is proxy_get_log_level: Envoy's wasm logger level.
func (p *process) wasmLogLevel() LogLevel { return p.log.level }

// logFromGuest records plugin output the way Context::log prints it:
// "wasm log<prefix>: msg".
func (v *vm) logFromGuest(c *ctxState, level LogLevel, msg string, stdio bool) {
	prefix := ""
	if s := v.spec; s != nil && c != nil {
		switch c.kind {
		case kindStream:
			prefix = joinNonEmpty(s.Name, s.RootID, s.VMID)
		case kindRoot:
			prefix = joinNonEmpty(s.RootID, s.VMID)
		}
	}
	v.proc.log.add(LogEntry{Time: time.Now(), Level: level, VM: v.name, Message: msg, Guest: true, Stdio: stdio},
		"[wasm] wasm log"+prefix+": "+msg)
}

func joinNonEmpty(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p != "" {
			b.WriteString(" ")
			b.WriteString(p)
		}
	}
	return b.String()
}
