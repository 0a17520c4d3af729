package envoyemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// DriverOptions configure a Driver.
type DriverOptions struct {
	// Name, RootID and VMID are the plugin's name, root_id and vm_id (shared
	// data namespace). All default to "".
	Name, RootID, VMID string
	// PluginConfig is returned for PLUGIN_CONFIGURATION during on_configure.
	PluginConfig []byte
	// VMConfig is returned for VM_CONFIGURATION.
	VMConfig []byte
	// Env is the WASI environ.
	Env [][2]string
	// EnvoyVersion selects the WASI profile; zero means DefaultEnvoyVersion (strict).
	EnvoyVersion EnvoyVersion
	// AllowOnHeadersStopIteration keeps a header Pause as StopIteration.
	AllowOnHeadersStopIteration bool
	// Clusters are the cluster names proxy_http_call accepts; nil accepts any name
	// (the call is only recorded, never sent).
	Clusters []string
	// BufferLimit bounds a buffered body before the 413/500 local reply; 0 means 1 MiB.
	BufferLimit int
	// LogSink receives Envoy-formatted log lines (nil: none; Logs and
	// GuestLogs capture everything anyway).
	LogSink io.Writer
	// LogLevel filters LogSink and is what proxy_get_log_level returns. The
	// zero value is LevelTrace, so a test sees every line the plugin logs.
	LogLevel LogLevel
	// Listener, when set, is given every call into and within the module
	// (wazero's experimental function listeners): for profiling the guest
	// in benchmarks only, it slows every call.
	Listener experimental.FunctionListenerFactory
	// ForgetAnswered drops a call from HTTPCallouts once it is answered, as
	// Envoy frees a call's buffers when it completes: for long benchmarks,
	// whose history would otherwise hold every prefill body.
	ForgetAnswered bool
}

// Driver runs one plugin VM without HTTP, in the style of the SDK's proxytest
// HostEmulator: the test calls the stream callbacks, delivers http-call
// responses and ticks, and inspects what the plugin did. The VM, its host
// functions, the memory protocol and the header-map lifetimes are the same as
// in Host; what the Driver does not do is the filter manager (it records
// continue/close/local replies instead of acting on them) and the network.
//
// A Driver is not safe for concurrent use. Work the plugin posts for later
// (shared-queue notifications) runs before each Driver method returns.
type Driver struct {
	mod      *module
	proc     *process
	vm       *vm
	spec     *PluginSpec
	limit    int
	allowSI  bool
	pending  []func()
	streams  map[uint32]*driverStream
	callouts map[uint32]*callout // unanswered calls by token
	history  []HTTPCallout       // every dispatched call, in order
	forget   bool                // DriverOptions.ForgetAnswered
}

// NewDriver loads code, runs _initialize (and main if exported) and creates
// the root context with proxy_on_context_create(1, 0). Call StartVM and
// StartPlugin next, as with proxytest.
func NewDriver(code []byte, opts DriverOptions) (*Driver, error) {
	ctx := context.Background()
	if opts.Listener != nil {
		ctx = experimental.WithFunctionListenerFactory(ctx, opts.Listener)
	}
	mod, err := loadModule(ctx, code, opts.EnvoyVersion)
	if err != nil {
		return nil, err
	}
	var clusters map[string]*ClusterConfig
	if opts.Clusters != nil {
		clusters = map[string]*ClusterConfig{}
		for _, c := range opts.Clusters {
			clusters[c] = &ClusterConfig{Name: c}
		}
	}
	d := &Driver{
		mod: mod, limit: opts.BufferLimit, allowSI: opts.AllowOnHeadersStopIteration, forget: opts.ForgetAnswered,
		streams: map[uint32]*driverStream{}, callouts: map[uint32]*callout{},
		spec: &PluginSpec{Name: opts.Name, RootID: opts.RootID, VMID: opts.VMID,
			PluginConfig: opts.PluginConfig, VMConfig: opts.VMConfig, Env: opts.Env},
	}
	if d.limit <= 0 {
		d.limit = defaultBufferLim
	}
	d.proc = newProcess(clusters, opts.LogSink, opts.LogLevel)
	v, err := newVM(mod, d.spec, d.proc, driverEnv{d}, "driver")
	if err != nil {
		mod.close(ctx)
		return nil, err
	}
	d.vm = v
	root := v.newContext(kindRoot, 0)
	v.root = root
	v.deferActions(func() {
		if v.fns["proxy_on_context_create"] != nil {
			root.pluginConfig = true
			v.call(root, "proxy_on_context_create", uint64(root.id), 0)
			root.pluginConfig = false
		}
	})
	root.created = true
	d.drain()
	if v.failed != "" {
		d.Close()
		return nil, errors.New(v.failed)
	}
	return d, nil
}

// Close releases the VM and its compiled module.
func (d *Driver) Close() {
	d.vm.close()
	d.mod.close(context.Background())
}

// driverEnv is the Driver's vmEnv: posted work queues up until the current
// Driver method finishes; timers never fire by themselves (use Tick); http
// calls are recorded.
type driverEnv struct{ d *Driver }

func (e driverEnv) post(f func()) { e.d.pending = append(e.d.pending, f) }

func (e driverEnv) after(time.Duration, func()) func() { return func() {} }

func (e driverEnv) dispatch(v *vm, co *callout) {
	e.d.callouts[co.token] = co
	e.d.history = append(e.d.history, HTTPCallout{
		Token: co.token, Cluster: co.cluster, Headers: pairsOf(co.headers), Body: co.body,
		Trailers: pairsOf(co.trailers), Timeout: co.timeout, ContextID: v.effectiveContext().id,
	})
}

func (d *Driver) drain() {
	for len(d.pending) > 0 {
		f := d.pending[0]
		d.pending = d.pending[1:]
		f()
	}
}

// StartVM calls proxy_on_vm_start(root, len(vm config)) and reports its result.
func (d *Driver) StartVM() bool {
	defer d.drain()
	ok := false
	d.vm.deferActions(func() {
		if d.vm.fns["proxy_on_vm_start"] == nil {
			ok = d.vm.failed == ""
			return
		}
		r, called := d.vm.call(d.vm.root, "proxy_on_vm_start", uint64(d.vm.root.id), uint64(len(d.spec.VMConfig)))
		ok = called && uint32(r) != 0
	})
	return ok
}

// StartPlugin calls proxy_on_configure(root, len(plugin config)) with the
// plugin configuration readable, and reports its result.
func (d *Driver) StartPlugin() bool {
	defer d.drain()
	ok := false
	root := d.vm.root
	d.vm.deferActions(func() {
		if d.vm.fns["proxy_on_configure"] == nil {
			ok = d.vm.failed == ""
			return
		}
		root.pluginConfig = true
		r, called := d.vm.call(root, "proxy_on_configure", uint64(root.id), uint64(len(d.spec.PluginConfig)))
		root.pluginConfig = false
		ok = called && uint32(r) != 0
	})
	return ok
}

// RootContextID is the root context id (1).
func (d *Driver) RootContextID() uint32 { return d.vm.root.id }

// Tick calls proxy_on_tick on the root context, as proxytest's Tick does.
func (d *Driver) Tick() {
	defer d.drain()
	d.vm.root.onTick()
}

// TickPeriod is the period the plugin last set (0: none).
func (d *Driver) TickPeriod() time.Duration {
	if t := d.vm.root.tick; t != nil {
		return t.period
	}
	return 0
}

// LocalResponse is a local reply a plugin sent (proxy_send_local_response) or
// the host generated for a stream.
type LocalResponse struct {
	StatusCode int
	// Details is the response code details (whitespace replaced by '_').
	Details string
	Body    []byte
	Headers [][2]string
	// GRPCStatus is -1 when none.
	GRPCStatus int
}

// HTTPCallout is a dispatched proxy_http_call.
type HTTPCallout struct {
	Token    uint32
	Cluster  string
	Headers  [][2]string
	Body     []byte
	Trailers [][2]string
	// Timeout is 0 when the plugin set none.
	Timeout time.Duration
	// ContextID is the effective context when the call was dispatched (the
	// stream, when the SDK dispatches from a stream callback).
	ContextID uint32
}

type driverStream struct {
	d         *Driver
	ctx       *ctxState
	reqH      *headerMap
	respH     *headerMap
	reqT      *headerMap
	respT     *headerMap
	reqBody   *bodyBuf // body visible after the last request body call
	respBody  *bodyBuf
	reqBuf    *bodyBuf // buffered request body (StopIterationAndBuffer)
	respBuf   *bodyBuf
	action    types.Action
	local     *LocalResponse
	reset     string
	continued [2]int // continue_stream count for request, response
	sinfo     streamInfo
}

// InitializeHttpContext creates a stream context and calls
// proxy_on_context_create(id, root); it returns the new id.
func (d *Driver) InitializeHttpContext() uint32 {
	defer d.drain()
	c := d.vm.newContext(kindStream, d.vm.root.id)
	s := &driverStream{d: d, ctx: c, sinfo: streamInfo{
		start: time.Now(), source: "127.0.0.1:40000", destination: "127.0.0.1:10000", protocol: "HTTP/1.1",
	}}
	c.hooks = s
	c.allowStopIter = d.allowSI
	d.streams[c.id] = s
	c.onCreate()
	return c.id
}

func (d *Driver) stream(id uint32) *driverStream {
	s := d.streams[id]
	if s == nil {
		panic(fmt.Sprintf("envoyemu: no stream context %d", id))
	}
	return s
}

func action(stopped bool) types.Action {
	if stopped {
		return types.ActionPause
	}
	return types.ActionContinue
}

// CallOnRequestHeaders calls proxy_on_request_headers with headers (keys
// lower-cased) and returns Continue or Pause (any Envoy stop status).
func (d *Driver) CallOnRequestHeaders(id uint32, headers [][2]string, eos bool) types.Action {
	defer d.drain()
	s := d.stream(id)
	s.reqH = newHeaderMap(headers)
	s.action = action(s.ctx.decodeHeaders(s.reqH, eos) != headersContinue)
	return s.action
}

// CallOnRequestBody calls proxy_on_request_body with a new chunk. After a
// StopIterationAndBuffer the chunk is appended to the buffered body and the
// plugin sees the whole of it, as in Envoy.
func (d *Driver) CallOnRequestBody(id uint32, body []byte, eos bool) types.Action {
	defer d.drain()
	s := d.stream(id)
	buffering := s.ctx.bufferingReq
	chunk := &bodyBuf{}
	if s.reqBuf == nil && len(body) > 0 {
		// The first chunk of an announced body: the buffer the plugin
		// may ask for (StopIterationAndBuffer) is made now, so the
		// chunk can be read into it (below).
		if n, ok := s.announced(); ok && n >= len(body) {
			s.reqBuf = withRoom(&d.vm.spares, n)
		}
	}
	if buf := s.reqBuf; buf != nil && (buffering || len(buf.b) == 0) && cap(buf.b)-len(buf.b) >= len(body) {
		// Read the chunk straight into the buffer's room, as Envoy reads
		// a socket into the slices it then moves: if it joins the
		// buffered body (decodeData, addDecodedData), it is there
		// already. The chunk's own capacity ends with it, so an append
		// to the chunk alone moves it out.
		chunk.b = buf.b[len(buf.b) : len(buf.b)+len(body) : len(buf.b)+len(body)]
		copy(chunk.b, body)
	} else {
		chunk.b = append([]byte(nil), body...)
	}
	st := s.ctx.decodeData(chunk, eos)
	s.reqBody = chunk
	if buffering || st == dataStopIterationAndBuffer {
		if !buffering {
			s.addDecodedData(chunk)
		}
		s.reqBody = s.decodingBuffer()
	}
	s.action = action(st != dataContinue)
	return s.action
}

// CallOnRequestTrailers calls proxy_on_request_trailers.
func (d *Driver) CallOnRequestTrailers(id uint32, trailers [][2]string) types.Action {
	defer d.drain()
	s := d.stream(id)
	s.reqT = newHeaderMap(trailers)
	s.action = action(s.ctx.decodeTrailers(s.reqT) != trailersContinue)
	return s.action
}

// CallOnResponseHeaders calls proxy_on_response_headers.
func (d *Driver) CallOnResponseHeaders(id uint32, headers [][2]string, eos bool) types.Action {
	defer d.drain()
	s := d.stream(id)
	s.respH = newHeaderMap(headers)
	if code, ok := s.respH.get(":status"); ok {
		// Plain decimal without fmt; anything else (a leading 0 is
		// octal to Sscan, a sign, trailing text) as before.
		if n, err := strconv.Atoi(code); err == nil && code[0] >= '1' && code[0] <= '9' {
			s.sinfo.responseCode = n
		} else {
			fmt.Sscan(code, &s.sinfo.responseCode)
		}
	}
	s.action = action(s.ctx.encodeHeaders(s.respH, eos) != headersContinue)
	return s.action
}

// CallOnResponseBody calls proxy_on_response_body (buffering as for requests).
func (d *Driver) CallOnResponseBody(id uint32, body []byte, eos bool) types.Action {
	defer d.drain()
	s := d.stream(id)
	chunk := &bodyBuf{b: append([]byte(nil), body...)}
	buffering := s.ctx.bufferingResp
	st := s.ctx.encodeData(chunk, eos)
	s.respBody = chunk
	if buffering || st == dataStopIterationAndBuffer {
		if !buffering {
			s.addEncodedData(chunk)
		}
		s.respBody = s.encodingBuffer()
	}
	s.action = action(st != dataContinue)
	return s.action
}

// CallOnResponseTrailers calls proxy_on_response_trailers.
func (d *Driver) CallOnResponseTrailers(id uint32, trailers [][2]string) types.Action {
	defer d.drain()
	s := d.stream(id)
	s.respT = newHeaderMap(trailers)
	s.action = action(s.ctx.encodeTrailers(s.respT) != trailersContinue)
	return s.action
}

// CompleteHttpContext ends the stream as Envoy does: proxy_on_log (with the
// final headers readable), proxy_on_done, proxy_on_delete.
func (d *Driver) CompleteHttpContext(id uint32) {
	defer d.drain()
	s := d.stream(id)
	s.ctx.log(s.reqH, s.respH, s.respT)
	s.ctx.onDestroy()
	delete(d.streams, id)
	if s.reqBuf != nil {
		// Nothing reads the stream's buffer any more (RequestBody
		// copies): its memory serves the next stream.
		s.reqBuf.release()
	}
}

// CurrentHttpStreamAction is the result of the last callback of the stream.
func (d *Driver) CurrentHttpStreamAction(id uint32) types.Action { return d.stream(id).action }

// RequestHeaders are the stream's request headers as the host holds them,
// including the plugin's changes.
func (d *Driver) RequestHeaders(id uint32) [][2]string { return pairsOf(d.stream(id).reqH) }

// ResponseHeaders are the stream's response headers including the plugin's changes.
func (d *Driver) ResponseHeaders(id uint32) [][2]string { return pairsOf(d.stream(id).respH) }

// RequestTrailers are the stream's request trailers.
func (d *Driver) RequestTrailers(id uint32) [][2]string { return pairsOf(d.stream(id).reqT) }

// ResponseTrailers are the stream's response trailers.
func (d *Driver) ResponseTrailers(id uint32) [][2]string { return pairsOf(d.stream(id).respT) }

// RequestBody is the request body after the last body callback: the buffered
// body while buffering, else the last chunk, with the plugin's changes.
func (d *Driver) RequestBody(id uint32) []byte { return bytesOf(d.stream(id).reqBody) }

// ResponseBody is the response body after the last body callback.
func (d *Driver) ResponseBody(id uint32) []byte { return bytesOf(d.stream(id).respBody) }

// SentLocalResponse is the local reply of the stream, or nil.
func (d *Driver) SentLocalResponse(id uint32) *LocalResponse { return d.stream(id).local }

// ContinueCount reports how many times the stream was resumed through
// proxy_continue_stream for the request (response=false) or the response.
func (d *Driver) ContinueCount(id uint32, response bool) int {
	if response {
		return d.stream(id).continued[1]
	}
	return d.stream(id).continued[0]
}

// ResetDetails is "wasm_close_stream" once the plugin closed the stream, else "".
func (d *Driver) ResetDetails(id uint32) string { return d.stream(id).reset }

func pairsOf(h *headerMap) [][2]string {
	if h == nil {
		return nil
	}
	return append([][2]string(nil), h.pairs...)
}

func bytesOf(b *bodyBuf) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b.b...)
}

// HTTPCallouts returns every call the plugin dispatched, answered or not, in
// dispatch order (as proxytest's callout attributes). The bodies are the
// caller's copies: the Driver reuses its own once a call is forgotten.
func (d *Driver) HTTPCallouts() []HTTPCallout {
	out := append([]HTTPCallout(nil), d.history...)
	for i := range out {
		if out[i].Body != nil {
			out[i].Body = append([]byte{}, out[i].Body...)
		}
	}
	return out
}

// PendingHTTPCallouts returns the tokens of the calls not answered yet.
func (d *Driver) PendingHTTPCallouts() []uint32 {
	var out []uint32
	for _, c := range d.history {
		if d.callouts[c.Token] != nil {
			out = append(out, c.Token)
		}
	}
	return out
}

// CallOnHttpCallResponse delivers a response to call token as
// proxy_on_http_call_response(root, token, n_headers, body_size, n_trailers);
// headers should include ":status".
func (d *Driver) CallOnHttpCallResponse(token uint32, headers, trailers [][2]string, body []byte) {
	d.deliver(token, &calloutResult{headers: newHeaderMap(headers), trailers: newHeaderMap(trailers), body: body})
}

// CallOnHttpCallFailure delivers a reset: the callback sees 0 headers and
// proxy_get_status answers 11 "reset".
func (d *Driver) CallOnHttpCallFailure(token uint32) {
	d.deliver(token, &calloutResult{failed: true})
}

func (d *Driver) deliver(token uint32, res *calloutResult) {
	defer d.drain()
	co := d.callouts[token]
	if co == nil {
		panic(fmt.Sprintf("envoyemu: no pending http call with token %d", token))
	}
	delete(d.callouts, token)
	forgotten := false
	if d.forget {
		for i := range d.history {
			if d.history[i].Token == token {
				d.history = append(d.history[:i], d.history[i+1:]...)
				forgotten = true
				break
			}
		}
	}
	d.vm.deliverCallout(co, res)
	if forgotten && !d.vm.inVMCall() {
		// Answered and out of the history, as Envoy frees a call's
		// request once it completes: the body's memory serves the next
		// call (HTTPCallouts lent none of it).
		d.vm.spares.put(co.body)
		co.body = nil
	}
}

// Logs returns every captured log line.
func (d *Driver) Logs() []LogEntry { return d.proc.log.snapshot() }

// GuestLogs returns the messages the plugin logged at level (proxy_log and stdio).
func (d *Driver) GuestLogs(level LogLevel) []string { return guestLogs(d.proc, level) }

func guestLogs(p *process, level LogLevel) []string {
	var out []string
	for _, e := range p.log.snapshot() {
		if e.Guest && e.Level == level {
			out = append(out, e.Message)
		}
	}
	return out
}

// Metric returns the value of the counter or gauge defined as name.
func (d *Driver) Metric(kind abispec.MetricType, name string) (uint64, bool) {
	return metricValue(d.proc, kind, name)
}

func metricValue(p *process, kind abispec.MetricType, name string) (uint64, bool) {
	m, ok := p.stats.lookup(kind, name)
	if !ok {
		return 0, false
	}
	if kind == abispec.MetricTypeHistogram {
		return uint64(len(m.observations())), true
	}
	return m.value(), true
}

// SharedData returns a value of the shared data of vmID and its CAS.
func (d *Driver) SharedData(vmID, key string) ([]byte, uint32, bool) {
	return d.proc.shared.get(vmID, []byte(key))
}

// InjectTrap makes the VM trap at its next host call, as a fault inside the
// guest does (see Host.InjectTrap).
func (d *Driver) InjectTrap() { d.vm.trapNext = true }

// Failed returns Envoy's failure message once the VM has trapped, else "".
func (d *Driver) Failed() string { return d.vm.failed }

// Stats reports the VM's calls into the module, traps and memory pages.
func (d *Driver) Stats() VMStats { return d.vm.stats() }

// VMStats are counters of one VM.
type VMStats struct {
	Name string
	// Calls counts calls into the module (callbacks and allocator calls).
	Calls int64
	// Traps is 1 once the VM has failed.
	Traps int64
	// MemoryPages is the linear memory size in 64 KiB pages.
	MemoryPages uint32
	Failed      string
}

func (v *vm) stats() VMStats {
	return VMStats{Name: v.name, Calls: v.calls.Load(), Traps: v.traps.Load(), MemoryPages: v.memoryPages(), Failed: v.failed}
}

// --- streamHooks ---

// clearRouteCache: the driver has no router.
func (s *driverStream) clearRouteCache() {}

// continueDecoding and continueEncoding record the resume; like proxytest, the
// stream's current action becomes Continue.
func (s *driverStream) continueDecoding() {
	s.continued[0]++
	s.action = types.ActionContinue
}

func (s *driverStream) continueEncoding() {
	s.continued[1]++
	s.action = types.ActionContinue
}
func (s *driverStream) resetStream(details string) {
	if s.reset == "" {
		s.reset = details
	}
}

func (s *driverStream) sendLocalReply(code int, body []byte, headers [][2]string, grpc int, details string) {
	if s.local == nil {
		s.local = &LocalResponse{StatusCode: code, Details: details, Body: body, Headers: headers, GRPCStatus: grpc}
	}
}

func (s *driverStream) addDecodedData(data *bodyBuf) bool {
	buf := s.decodingBuffer()
	if buf.b == nil {
		// Envoy buffers by moving the chunks' slices, never copying what
		// it holds: room for the announced body keeps the emulator from
		// copying it over and over as it grows (and from copying it
		// whole for an edit of its head).
		if n, ok := s.announced(); ok && n > len(data.b) {
			*buf = *withRoom(&s.d.vm.spares, n)
		}
	}
	if n := len(buf.b); len(data.b) > 0 && cap(buf.b)-n >= len(data.b) && &buf.b[:n+1][n] == &data.b[0] {
		buf.b = buf.b[:n+len(data.b)] // read into the room already (CallOnRequestBody)
	} else {
		buf.b = append(buf.b, data.b...)
	}
	data.b = nil
	if len(buf.b) > s.d.limit {
		s.sendLocalReply(413, []byte("Payload Too Large"), nil, -1, "request_payload_too_large")
		return false
	}
	return true
}

// announced is the request's content-length when it is a number within
// the buffer limit.
func (s *driverStream) announced() (int, bool) {
	if s.reqH == nil {
		return 0, false
	}
	v, ok := s.reqH.get("content-length")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n <= s.d.limit
}

func (s *driverStream) addEncodedData(data *bodyBuf) bool {
	buf := s.encodingBuffer()
	buf.b = append(buf.b, data.b...)
	data.b = nil
	if len(buf.b) > s.d.limit {
		s.sendLocalReply(500, []byte("Internal Server Error"), nil, -1, "response_payload_too_large")
		return false
	}
	return true
}

func (s *driverStream) decodingBuffer() *bodyBuf {
	if s.reqBuf == nil {
		s.reqBuf = &bodyBuf{}
	}
	return s.reqBuf
}

func (s *driverStream) encodingBuffer() *bodyBuf {
	if s.respBuf == nil {
		s.respBuf = &bodyBuf{}
	}
	return s.respBuf
}

func (s *driverStream) addDecodedTrailers() *headerMap {
	s.reqT = &headerMap{}
	return s.reqT
}

func (s *driverStream) addEncodedTrailers() *headerMap {
	s.respT = &headerMap{}
	return s.respT
}

func (s *driverStream) info() *streamInfo { return &s.sinfo }
