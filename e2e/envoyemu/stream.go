package envoyemu

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A stream is one HTTP request through a listener: Envoy's HCM filter
// manager for the chain [wasm filter?, router]. Its state lives on the
// worker's goroutine; the net/http handler goroutine only moves bytes
// (request body chunks in, response commands out) and the upstream
// goroutines only do network I/O, posting their results to the worker.

// iterState is a filter's iteration state in one direction (FilterManager's
// ActiveStreamFilterBase::IterationState).
type iterState uint8

const (
	iterContinue iterState = iota
	iterStopSingle
	iterStopAllBuffer
	iterStopAllWatermark
)

func (i iterState) stoppedAll() bool { return i == iterStopAllBuffer || i == iterStopAllWatermark }

// direction is the filter-manager state of one direction (decode or encode).
type direction struct {
	iter             iterState
	headersContinued bool
	buf              *bodyBuf   // data buffered at the wasm filter
	held             []func()   // flow-control acks withheld while over the limit
	trailers         *headerMap // trailers waiting behind a stopped filter
	trailersSent     bool
	complete         bool // end of stream seen from the source
	pendingContinue  bool // continue requested during this filter's own callback
}

type stream struct {
	host   *Host
	l      *listenerRuntime
	w      *worker
	wp     *workerPlugin // nil without a wasm filter
	vm     *vm           // the VM the stream's context lives in (nil: none)
	filter *ctxState     // nil: no wasm filter (or skipped by FAIL_OPEN)
	si     streamInfo

	out  *queue[outCmd]
	done chan struct{} // closed when the stream has finished on the worker

	reqH, respH     *headerMap
	dec, enc        direction
	inFilterCall    int
	decodeAborted   bool // a local reply or reset ended the request side
	downHeadersSent bool
	finished        bool
	curAck          func() // ack of the request chunk being processed
	route           *RouteConfig
	// cached is the route cache (HCM's cached_route_): matched when the
	// request headers arrive, before any filter, and again on the next
	// lookup once cleared (routeCached false).
	cached      *RouteConfig
	routeCached bool

	up          *upstreamCall
	routeCancel func()
	idleCancel  func()
	reqCancel   func()
}

// --- downstream output (worker → handler goroutine) ---

type outKind uint8

const (
	outHeaders outKind = iota
	outData
	outTrailers
	outEnd
	outReset
)

type outCmd struct {
	kind    outKind
	status  int
	headers *headerMap
	data    []byte
	ack     func()
}

// queue is an unbounded FIFO whose push never blocks (the worker must not
// wait on a slow client or upstream; flow-control acks keep queues short).
type queue[T any] struct {
	mu    sync.Mutex
	items []T
	wake  chan struct{}
}

func newQueue[T any]() *queue[T] { return &queue[T]{wake: make(chan struct{}, 1)} }

func (q *queue[T]) push(item T) {
	q.mu.Lock()
	q.items = append(q.items, item)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// --- handler goroutine ---

// requestChunk is the read size for request bodies (Envoy reads sockets in
// 16 KiB slices).
const requestChunk = 16 << 10

// serve runs on the net/http handler goroutine for one request.
func (l *listenerRuntime) serve(w http.ResponseWriter, r *http.Request) {
	wk := r.Context().Value(workerKey{}).(*worker)
	s := &stream{host: l.host, l: l, w: wk, done: make(chan struct{}), out: newQueue[outCmd]()}
	s.si = streamInfo{
		start: time.Now(), source: r.RemoteAddr, protocol: r.Proto,
		connectionID: r.Context().Value(connIDKey{}).(uint64),
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(interface{ String() string }); ok {
		s.si.destination = la.String()
	}
	h := requestHeaderMap(r)
	hasBody := r.ContentLength != 0 || len(r.TransferEncoding) > 0
	wk.post(func() { s.start(h, !hasBody) })
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	bodyDone := make(chan struct{})
	if hasBody {
		go func() {
			defer close(bodyDone)
			s.readBody(r)
		}()
	} else {
		close(bodyDone)
	}
	s.writeLoop(w, rc, r.Context())
	// A reply that did not wait for the whole request (a 413, an early
	// error) leaves the client sending. Envoy then reads and discards the
	// rest for up to its delayed_close_timeout (1 s) before it closes the
	// connection, so that the client reads the reply instead of a reset;
	// readBody drains, bounded by this deadline.
	_ = rc.SetReadDeadline(time.Now().Add(delayedClose))
	<-bodyDone
}

// delayedClose is Envoy's default delayed_close_timeout.
const delayedClose = time.Second

// maxDrain bounds what is read and discarded of a request whose stream
// ended first.
const maxDrain = 16 << 20

// requestHeaderMap is what Envoy's HTTP/1 codec and HCM give the filter chain:
// pseudo-headers, the request headers (sorted: Go does not keep their order),
// then x-forwarded-proto and x-request-id added by the HCM.
func requestHeaderMap(r *http.Request) *headerMap {
	h := &headerMap{}
	h.add(":authority", r.Host)
	h.add(":path", r.RequestURI)
	h.add(":method", r.Method)
	h.add(":scheme", "http")
	addHeaders(h, r.Header)
	if len(r.TransferEncoding) > 0 {
		h.add("transfer-encoding", strings.Join(r.TransferEncoding, ","))
	}
	h.set("x-forwarded-proto", "http")
	if _, ok := h.get("x-request-id"); !ok {
		h.add("x-request-id", newUUID())
	}
	return h
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// readBody posts request body chunks to the worker, one at a time: the next
// read waits for the worker's ack, which is how back-pressure reaches the
// client (an Envoy watermark disables reading the connection).
func (s *stream) readBody(r *http.Request) {
	for {
		select {
		case <-s.done: // the stream ended first: drain (see serve)
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
			return
		default:
		}
		buf := make([]byte, requestChunk)
		n, err := r.Body.Read(buf)
		eof := err == io.EOF
		if err != nil && !eof {
			s.w.post(func() { s.onDownstreamReset("downstream_remote_disconnect") })
			return
		}
		if n == 0 && !eof {
			continue
		}
		var trailers *headerMap
		if eof {
			trailers = trailerMap(r.Trailer)
		}
		ack := make(chan struct{})
		chunk := buf[:n]
		s.w.post(func() { s.onRequestData(chunk, eof && trailers == nil, sync.OnceFunc(func() { close(ack) })) })
		if trailers != nil {
			s.w.post(func() { s.onRequestTrailers(trailers) })
		}
		if eof {
			return
		}
		select {
		case <-ack:
		case <-s.done:
		}
	}
}

// writeLoop applies the worker's response commands until the stream ends.
func (s *stream) writeLoop(w http.ResponseWriter, rc *http.ResponseController, ctx context.Context) {
	for {
		select {
		case <-s.out.wake:
		case <-ctx.Done():
			s.w.post(func() { s.onDownstreamReset("downstream_remote_disconnect") })
			return
		}
		for _, c := range s.out.take() {
			switch c.kind {
			case outHeaders:
				hdr := w.Header()
				for _, p := range c.headers.pairs {
					if strings.HasPrefix(p[0], ":") || p[0] == "transfer-encoding" || p[0] == "connection" {
						continue
					}
					hdr[http.CanonicalHeaderKey(p[0])] = append(hdr[http.CanonicalHeaderKey(p[0])], p[1])
				}
				if _, ok := hdr["Content-Type"]; !ok {
					hdr["Content-Type"] = nil // no sniffing: Envoy adds no content-type
				}
				w.WriteHeader(c.status)
				if err := rc.Flush(); err != nil {
					s.clientGone()
					return
				}
			case outData:
				_, err := w.Write(c.data)
				if err == nil {
					err = rc.Flush()
				}
				if c.ack != nil {
					c.ack()
				}
				if err != nil {
					s.clientGone()
					return
				}
			case outTrailers:
				for _, p := range c.headers.pairs {
					w.Header().Add(http.TrailerPrefix+p[0], p[1])
				}
			case outEnd:
				return
			case outReset:
				panic(http.ErrAbortHandler)
			}
		}
	}
}

func (s *stream) clientGone() {
	s.w.post(func() { s.onDownstreamReset("downstream_remote_disconnect") })
}

// --- worker side: decode path ---

// start creates the filter context and runs decodeHeaders.
func (s *stream) start(h *headerMap, eos bool) {
	if s.l.plugin != nil {
		s.wp = s.w.vms[s.l.plugin]
		s.filter = s.wp.newFilter(s)
	}
	s.armIdle()
	// Envoy arms request_timeout when the stream is created and disarms it
	// only when the end of the request has passed every decoder filter (the
	// router has it) or the response starts: a filter that holds the request,
	// e.g. paused on an http call a failed VM will never answer, does not stop it.
	if s.l.cfg.RequestTimeout > 0 {
		s.reqCancel = s.w.after(s.l.cfg.RequestTimeout, func() { s.timeout(replyRequestTimeout) })
	}
	s.reqH = h
	s.dec.complete = eos
	s.cachedRoute() // refreshCachedRoute, before the filter chain
	if s.filter == nil {
		s.dec.headersContinued = true
		s.routerHeaders()
		return
	}
	s.inFilterCall++
	st := s.filter.decodeHeaders(h, eos)
	s.inFilterCall--
	if s.finished || s.decodeAborted {
		return
	}
	switch st {
	case headersContinue, headersContinueAndEnd:
		s.dec.headersContinued = true
		s.routerHeaders()
	case headersStopIteration:
		s.dec.iter = iterStopSingle
	case headersStopAllBuffer:
		s.dec.iter = iterStopAllBuffer
	default:
		s.dec.iter = iterStopAllWatermark
	}
	s.afterFilterCall()
}

// afterFilterCall applies a continue the plugin asked for inside the callback
// that just returned.
func (s *stream) afterFilterCall() {
	if s.dec.pendingContinue {
		s.dec.pendingContinue = false
		s.continueDecoding()
	}
	if s.enc.pendingContinue {
		s.enc.pendingContinue = false
		s.continueEncoding()
	}
}

func (s *stream) onRequestData(chunk []byte, eos bool, ack func()) {
	s.si.requestSize += len(chunk)
	if eos {
		s.dec.complete = true
	}
	if s.finished || s.decodeAborted {
		ack()
		return
	}
	s.armIdle()
	s.curAck = ack
	defer s.releaseCurAck()
	if s.filter == nil {
		s.routerData(chunk, eos)
		return
	}
	if s.dec.iter.stoppedAll() {
		s.bufferDecoded(&bodyBuf{b: chunk}, s.dec.iter == iterStopAllWatermark)
		return
	}
	s.filterData(&bodyBuf{b: chunk}, eos)
}

func (s *stream) releaseCurAck() {
	if s.curAck != nil {
		s.curAck()
		s.curAck = nil
	}
}

// filterData passes data through the wasm filter's decodeData
// (FilterManager::decodeData and commonHandleAfterDataCallback).
func (s *stream) filterData(data *bodyBuf, eos bool) {
	s.inFilterCall++
	st := s.filter.decodeData(data, eos)
	s.inFilterCall--
	if s.finished || s.decodeAborted {
		return
	}
	switch st {
	case dataContinue:
		if s.dec.iter == iterStopSingle {
			s.bufferDecoded(data, false)
			s.dec.pendingContinue = true
		} else {
			s.routerData(data.b, eos)
		}
	case dataStopIterationAndBuffer, dataStopIterationWatermark:
		s.dec.iter = iterStopSingle
		if !s.bufferDecoded(data, st == dataStopIterationWatermark) {
			return
		}
	case dataStopIterationNoBuffer:
		s.dec.iter = iterStopSingle
	}
	s.afterFilterCall()
}

// bufferDecoded appends data to the wasm filter's buffered request body.
// Over the listener's buffer limit it either withholds the flow-control ack
// (watermark) or answers 413 and returns false.
func (s *stream) bufferDecoded(data *bodyBuf, watermark bool) bool {
	if s.dec.buf == nil {
		s.dec.buf = &bodyBuf{}
	}
	if data != s.dec.buf {
		s.dec.buf.b = append(s.dec.buf.b, data.b...)
		data.b = nil
	}
	if len(s.dec.buf.b) <= s.l.cfg.BufferLimit {
		return true
	}
	if watermark {
		if s.curAck != nil {
			s.dec.held = append(s.dec.held, s.curAck)
			s.curAck = nil
		}
		return true
	}
	s.sendLocal(replyTooLarge, nil)
	return false
}

func (s *stream) onRequestTrailers(t *headerMap) {
	s.dec.complete = true
	if s.finished || s.decodeAborted {
		return
	}
	s.dec.trailers = t
	if s.filter == nil {
		s.routerTrailers()
		return
	}
	if s.dec.iter.stoppedAll() {
		return
	}
	s.inFilterCall++
	st := s.filter.decodeTrailers(t)
	s.inFilterCall--
	if s.finished || s.decodeAborted {
		return
	}
	if st == trailersContinue {
		if s.dec.iter == iterStopSingle {
			s.dec.pendingContinue = true
		} else {
			s.routerTrailers()
		}
	} else {
		s.dec.iter = iterStopSingle
	}
	s.afterFilterCall()
}

// continueDecoding is commonContinue on the decode path.
func (s *stream) continueDecoding() {
	if s.inFilterCall > 0 {
		s.dec.pendingContinue = true
		return
	}
	if s.finished || s.decodeAborted || s.dec.iter == iterContinue {
		return
	}
	fromFilter := s.dec.iter.stoppedAll()
	s.dec.iter = iterContinue
	if !s.dec.headersContinued {
		s.dec.headersContinued = true
		s.routerHeaders()
		if s.finished || s.decodeAborted {
			return
		}
	}
	if buf := s.dec.buf; buf != nil {
		s.dec.buf = nil
		held := s.dec.held
		s.dec.held = nil
		eos := s.dec.complete && s.dec.trailers == nil
		if fromFilter {
			s.filterData(buf, eos)
		} else {
			s.routerData(buf.b, eos)
		}
		for _, ack := range held {
			ack()
		}
		if s.finished || s.decodeAborted || s.dec.iter != iterContinue {
			return
		}
	}
	if s.dec.trailers != nil && !s.dec.trailersSent {
		if fromFilter {
			s.onRequestTrailers(s.dec.trailers)
		} else {
			s.routerTrailers()
		}
	}
}

// --- router ---

// cachedRoute is the stream's route: the cached match, or a new match of the
// request headers as they are now when the cache was cleared.
func (s *stream) cachedRoute() *RouteConfig {
	if !s.routeCached {
		s.cached, s.routeCached = s.l.match(s.reqH), true
		s.si.routeName = ""
		if s.cached != nil {
			s.si.routeName = s.cached.Name
		}
	}
	return s.cached
}

// clearRouteCache is clearRouteCache: the next lookup matches again. Once
// the router has its upstream request the route no longer changes.
func (s *stream) clearRouteCache() {
	if s.up == nil && !s.dec.headersContinued {
		s.routeCached = false
	}
}

// routerHeaders is the router's decodeHeaders: the cached route (request
// headers a filter changed cleared the cache, so they are matched again),
// cluster, host, then the upstream request.
func (s *stream) routerHeaders() {
	route := s.cachedRoute()
	if route == nil {
		s.sendLocal(replyRouteNotFound, nil)
		return
	}
	s.route = route
	s.si.routeName = route.Name
	name := route.Cluster
	if route.ClusterHeader != "" {
		name, _ = s.reqH.get(route.ClusterHeader)
	}
	cluster := s.host.clusters[name]
	if cluster == nil {
		s.sendLocal(localReply{route.NotFoundCode, "", "cluster_not_found"}, nil)
		return
	}
	s.si.clusterName = name
	addr, ok := cluster.pick(s.reqH)
	if !ok {
		s.sendLocal(replyNoHealthyUpstream, nil)
		return
	}
	s.si.upstreamHost = addr
	if route.Timeout > 0 {
		s.reqH.set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(route.Timeout.Milliseconds(), 10))
	}
	eos := s.dec.complete && s.dec.buf == nil && s.dec.trailers == nil
	s.up = startUpstream(s, cluster, addr, s.reqH, eos)
	if eos {
		s.requestDone()
	}
}

func (s *stream) routerData(b []byte, eos bool) {
	if s.up == nil {
		return
	}
	ack := s.curAck
	s.curAck = nil
	s.up.write(b, eos, ack)
	if eos {
		s.requestDone()
	}
}

// routerTrailers ends the upstream request body. Request trailers are not
// forwarded upstream (an emulator limit; see README).
func (s *stream) routerTrailers() {
	s.dec.trailersSent = true
	if s.up == nil {
		return
	}
	s.up.write(nil, true, nil)
	s.requestDone()
}

// requestDone starts the route timeout: Envoy's timer runs from the end of
// the downstream request to the end of the upstream response. The end of the
// request has passed every filter, so request_timeout is disarmed
// (FilterManager::decodeHeaders/decodeData/decodeTrailers).
func (s *stream) requestDone() {
	s.stopRequestTimer()
	if s.route != nil && s.route.Timeout > 0 && s.routeCancel == nil {
		s.routeCancel = s.w.after(s.route.Timeout, s.onRouteTimeout)
	}
}

func (s *stream) onRouteTimeout() {
	if s.finished {
		return
	}
	if s.up != nil {
		s.up.cancel()
	}
	if s.respH == nil {
		s.sendLocal(replyUpstreamTimeout, nil)
		return
	}
	s.reset("upstream_response_timeout")
}

// --- upstream events (posted by upstreamCall) ---

func (s *stream) onUpstreamHeaders(h *headerMap, eos bool) {
	if s.finished || s.decodeAborted {
		return
	}
	s.encodeHeaders(h, eos)
}

func (s *stream) onUpstreamFailure(r localReply) {
	if s.finished {
		return
	}
	if s.respH != nil {
		s.reset("upstream_reset_after_response_started{connection_termination}")
		return
	}
	s.sendLocal(r, nil)
}

// --- encode path ---

func (s *stream) encodeHeaders(h *headerMap, eos bool) {
	s.stopRequestTimer() // the response has started (FilterManager::encodeHeaders)
	s.respH = h
	s.enc.complete = eos
	if s.filter == nil {
		s.enc.headersContinued = true
		s.downHeaders()
		return
	}
	s.inFilterCall++
	st := s.filter.encodeHeaders(h, eos)
	s.inFilterCall--
	if s.finished {
		return
	}
	switch st {
	case headersContinue, headersContinueAndEnd:
		s.enc.headersContinued = true
		s.downHeaders()
	case headersStopIteration:
		s.enc.iter = iterStopSingle
	case headersStopAllBuffer:
		s.enc.iter = iterStopAllBuffer
	default:
		s.enc.iter = iterStopAllWatermark
	}
	s.afterFilterCall()
}

// onUpstreamData handles a response chunk; ack lets the upstream reader
// read on (held while a watermark stop is over the limit).
func (s *stream) onUpstreamData(chunk []byte, eos bool, ack func()) {
	if eos {
		s.enc.complete = true
	}
	if s.finished {
		ack()
		return
	}
	s.armIdle()
	s.encodeData(&bodyBuf{b: chunk}, eos, ack)
}

// encodeData is FilterManager::encodeData for the chain [wasm filter?].
func (s *stream) encodeData(data *bodyBuf, eos bool, ack func()) {
	switch {
	case s.filter == nil:
		s.downData(data.b, ack)
	case s.enc.iter.stoppedAll():
		s.bufferEncoded(data, s.enc.iter == iterStopAllWatermark, ack)
	default:
		s.encodeFilterData(data, eos, ack)
	}
}

func (s *stream) encodeFilterData(data *bodyBuf, eos bool, ack func()) {
	s.inFilterCall++
	st := s.filter.encodeData(data, eos)
	s.inFilterCall--
	if s.finished {
		callAck(ack)
		return
	}
	switch st {
	case dataContinue:
		if s.enc.iter == iterStopSingle {
			s.bufferEncoded(data, false, ack)
			s.enc.pendingContinue = true
		} else {
			s.downData(data.b, ack)
		}
	case dataStopIterationAndBuffer, dataStopIterationWatermark:
		s.enc.iter = iterStopSingle
		if !s.bufferEncoded(data, st == dataStopIterationWatermark, ack) {
			return
		}
	case dataStopIterationNoBuffer:
		s.enc.iter = iterStopSingle
		callAck(ack)
	}
	s.afterFilterCall()
}

func callAck(ack func()) {
	if ack != nil {
		ack()
	}
}

// bufferEncoded is bufferDecoded for responses: over the limit a 500 local
// reply (or a reset once the response started), unless under a watermark.
func (s *stream) bufferEncoded(data *bodyBuf, watermark bool, ack func()) bool {
	if s.enc.buf == nil {
		s.enc.buf = &bodyBuf{}
	}
	if data != s.enc.buf {
		s.enc.buf.b = append(s.enc.buf.b, data.b...)
		data.b = nil
	}
	if len(s.enc.buf.b) <= s.l.cfg.BufferLimit {
		callAck(ack)
		return true
	}
	if watermark {
		if ack != nil {
			s.enc.held = append(s.enc.held, ack)
		}
		return true
	}
	callAck(ack)
	s.sendLocal(replyRespTooLarge, nil)
	return false
}

func (s *stream) onUpstreamTrailers(t *headerMap) {
	s.enc.complete = true
	if s.finished {
		return
	}
	s.enc.trailers = t
	if s.filter == nil {
		s.downTrailers()
		return
	}
	if s.enc.iter.stoppedAll() {
		return
	}
	s.inFilterCall++
	st := s.filter.encodeTrailers(t)
	s.inFilterCall--
	if s.finished {
		return
	}
	if st == trailersContinue {
		if s.enc.iter == iterStopSingle {
			s.enc.pendingContinue = true
		} else {
			s.downTrailers()
		}
	} else {
		s.enc.iter = iterStopSingle
	}
	s.afterFilterCall()
}

// continueEncoding is commonContinue on the encode path.
func (s *stream) continueEncoding() {
	if s.inFilterCall > 0 {
		s.enc.pendingContinue = true
		return
	}
	if s.finished || s.enc.iter == iterContinue || s.respH == nil {
		return
	}
	fromFilter := s.enc.iter.stoppedAll()
	s.enc.iter = iterContinue
	if !s.enc.headersContinued {
		s.enc.headersContinued = true
		s.downHeaders()
		if s.finished {
			return
		}
	}
	if buf := s.enc.buf; buf != nil {
		s.enc.buf = nil
		held := s.enc.held
		s.enc.held = nil
		eos := s.enc.complete && s.enc.trailers == nil
		if fromFilter {
			s.encodeFilterData(buf, eos, nil)
		} else {
			s.downData(buf.b, nil)
		}
		for _, ack := range held {
			ack()
		}
		if s.finished || s.enc.iter != iterContinue {
			return
		}
	}
	if s.enc.trailers != nil && !s.enc.trailersSent {
		if fromFilter {
			s.onUpstreamTrailers(s.enc.trailers)
		} else {
			s.downTrailers()
		}
	}
}

// --- downstream (codec) ---

// downHeaders hands the response headers to the codec: Envoy's HCM adds
// date and server here, after the filters.
func (s *stream) downHeaders() {
	h := s.respH.clone()
	status, _ := h.get(":status")
	code, err := strconv.Atoi(status)
	if err != nil || code < 100 || code > 999 {
		s.reset("filter_removed_required_response_headers")
		return
	}
	s.si.responseCode = code
	h.set("server", "envoy")
	s.downHeadersSent = true
	s.out.push(outCmd{kind: outHeaders, status: code, headers: h})
	if s.enc.complete && s.enc.buf == nil && s.enc.trailers == nil {
		s.finish()
	}
}

func (s *stream) downData(b []byte, ack func()) {
	s.si.responseSize += len(b)
	if len(b) > 0 || ack != nil {
		s.out.push(outCmd{kind: outData, data: b, ack: ack})
	}
	if s.enc.complete && s.enc.trailers == nil && s.enc.buf == nil {
		s.finish()
	}
}

func (s *stream) downTrailers() {
	s.enc.trailersSent = true
	s.out.push(outCmd{kind: outTrailers, headers: s.enc.trailers})
	s.finish()
}

// --- local replies, resets, end ---

// sendLocal is sendLocalReply for host-generated replies.
func (s *stream) sendLocal(r localReply, extra [][2]string) {
	s.sendLocalReply(r.code, []byte(r.body), extra, -1, r.details)
}

// sendLocalReply is FilterManager::sendLocalReply: the request side stops,
// the upstream request (if any) is cancelled and the reply runs through the
// filter's encode callbacks; once the response started it is a reset instead.
func (s *stream) sendLocalReply(code int, body []byte, headers [][2]string, _ int, details string) {
	if s.finished {
		return
	}
	if s.downHeadersSent || s.enc.headersContinued {
		s.reset(details)
		return
	}
	s.decodeAborted = true
	s.si.details = details
	if s.up != nil {
		s.up.cancel()
		s.up = nil
	}
	for _, ack := range s.dec.held {
		ack()
	}
	s.dec.held = nil
	s.enc = direction{}
	s.encodeHeaders(replyHeaders(code, body, headers), len(body) == 0)
	if len(body) > 0 && !s.finished {
		s.enc.complete = true
		s.encodeData(&bodyBuf{b: body}, true, nil)
	}
}

// reset is resetStream: the client connection is aborted and the stream ends.
func (s *stream) reset(details string) {
	if s.finished {
		return
	}
	if s.si.details == "" {
		s.si.details = details
	}
	s.out.push(outCmd{kind: outReset})
	s.end()
}

// onDownstreamReset: the client went away (or a body read failed).
func (s *stream) onDownstreamReset(details string) {
	if s.finished {
		return
	}
	if s.si.details == "" {
		s.si.details = details
	}
	s.end()
}

func (s *stream) timeout(r localReply) {
	if s.finished {
		return
	}
	if s.downHeadersSent {
		s.reset(r.details)
		return
	}
	s.sendLocal(r, nil)
}

// finish ends a stream whose response is complete.
func (s *stream) finish() {
	if s.finished {
		return
	}
	s.out.push(outCmd{kind: outEnd})
	s.end()
}

// end releases everything: timers, upstream, flow-control acks; then the
// access log (proxy_on_log) and the filter's destruction (proxy_on_done,
// proxy_on_delete), in Envoy's order.
func (s *stream) end() {
	s.finished = true
	for _, c := range []func(){s.routeCancel, s.idleCancel, s.reqCancel} {
		if c != nil {
			c()
		}
	}
	if s.up != nil {
		s.up.cancel()
	}
	for _, ack := range append(s.dec.held, s.enc.held...) {
		ack()
	}
	s.dec.held, s.enc.held = nil, nil
	close(s.done)
	if s.filter != nil {
		s.filter.log(s.reqH, s.respH, s.enc.trailers)
		s.filter.onDestroy()
	}
	if s.wp != nil && s.vm != nil {
		s.wp.streamEnded(s.vm)
	}
	s.host.streamsDone.Add(1)
}

// armIdle (re)starts the HCM stream idle timer.
func (s *stream) armIdle() {
	if s.l.cfg.StreamIdleTimeout <= 0 || s.finished {
		return
	}
	if s.idleCancel != nil {
		s.idleCancel()
	}
	s.idleCancel = s.w.after(s.l.cfg.StreamIdleTimeout, func() { s.timeout(replyIdleTimeout) })
}

func (s *stream) stopRequestTimer() {
	if s.reqCancel != nil {
		s.reqCancel()
		s.reqCancel = nil
	}
}

// --- streamHooks for the wasm context ---

func (s *stream) resetStream(details string) { s.reset(details) }

func (s *stream) addDecodedData(data *bodyBuf) bool { return s.bufferDecoded(data, false) }

func (s *stream) addEncodedData(data *bodyBuf) bool { return s.bufferEncoded(data, false, nil) }

func (s *stream) decodingBuffer() *bodyBuf {
	if s.dec.buf == nil {
		s.dec.buf = &bodyBuf{}
	}
	return s.dec.buf
}

func (s *stream) encodingBuffer() *bodyBuf {
	if s.enc.buf == nil {
		s.enc.buf = &bodyBuf{}
	}
	return s.enc.buf
}

func (s *stream) addDecodedTrailers() *headerMap {
	s.dec.trailers = &headerMap{}
	return s.dec.trailers
}

func (s *stream) addEncodedTrailers() *headerMap {
	s.enc.trailers = &headerMap{}
	return s.enc.trailers
}

func (s *stream) info() *streamInfo {
	if s.reqH != nil && !s.finished {
		s.cachedRoute() // xds.route_name looks the route up
	}
	return &s.si
}
