package envoyemu

import (
	"strings"
	"time"
)

type ctxKind uint8

const (
	kindVM ctxKind = iota
	kindRoot
	kindStream
)

// Filter statuses as Envoy reads them from the raw callback result
// (envoy/http/filter.h). Values above the last one are clamped to it.
type headersStatus uint32

const (
	headersContinue            headersStatus = 0
	headersStopIteration       headersStatus = 1
	headersContinueAndEnd      headersStatus = 2
	headersStopAllBuffer       headersStatus = 3
	headersStopAllWatermark    headersStatus = 4
	dataContinue               dataStatus    = 0
	dataStopIterationAndBuffer dataStatus    = 1
	dataStopIterationWatermark dataStatus    = 2
	dataStopIterationNoBuffer  dataStatus    = 3
	trailersContinue           trailersStat  = 0
	trailersStopIteration      trailersStat  = 1
)

type dataStatus uint32
type trailersStat uint32

// streamHooks is the filter manager side of a stream as Envoy's wasm Context
// sees it (decoder/encoder filter callbacks). The HTTP stream and the test
// Driver implement it.
type streamHooks interface {
	continueDecoding()
	continueEncoding()
	resetStream(details string)
	sendLocalReply(code int, body []byte, headers [][2]string, grpcStatus int, details string)
	// addDecodedData moves data into the buffered request body; false when that
	// overflowed the buffer limit and a local reply (413) ended the stream.
	addDecodedData(data *bodyBuf) bool
	addEncodedData(data *bodyBuf) bool
	decodingBuffer() *bodyBuf
	encodingBuffer() *bodyBuf
	addDecodedTrailers() *headerMap
	addEncodedTrailers() *headerMap
	info() *streamInfo
	// clearRouteCache makes the next route lookup match the request
	// headers again (a request-header change by the filter, ABI <= 0.2.1,
	// or the clear_route_cache foreign function).
	clearRouteCache()
}

// streamInfo is what properties read about a stream.
type streamInfo struct {
	start        time.Time
	source       string // downstream remote address ip:port
	destination  string // downstream local address ip:port
	connectionID uint64
	protocol     string
	routeName    string
	clusterName  string
	upstreamHost string
	responseCode int // 0 until known
	requestSize  int // request body bytes received
	responseSize int // response body bytes sent
	details      string
}

// ctxState is one context of a VM: the VM context (id 0), a root context or
// a stream context. Its stream methods are Envoy's wasm Context filter
// callbacks (source/extensions/common/wasm/context.cc) on top of cpp-host's
// ContextBase (CHECK_FAIL, status conversions).
type ctxState struct {
	v         *vm // nil for the empty context of a failed, fail-closed plugin
	id        uint32
	parentID  uint32
	kind      ctxKind
	created   bool
	destroyed bool

	// Root context.
	pluginConfig bool // PLUGIN_CONFIGURATION readable (context create at start, configure)
	callouts     map[uint32]*callout
	callResult   *calloutResult // during proxy_on_http_call_response
	statusCode   uint32
	statusMsg    string
	tick         *tickTimer

	// Stream context.
	hooks          streamHooks
	failOpen       bool
	allowStopIter  bool
	reqHeaders     *headerMap
	reqTrailers    *headerMap
	respHeaders    *headerMap
	respTrailers   *headerMap
	reqBody        *bodyBuf
	respBody       *bodyBuf
	bufferingReq   bool
	bufferingResp  bool
	endOfStream    bool
	accessLog      bool
	alReqHeaders   *headerMap
	alRespHeaders  *headerMap
	alRespTrailers *headerMap
	replySent      bool // failure_local_reply_sent_
	streamFailed   bool
	filterState    map[string][]byte
}

// root returns the root context of c (itself for root and VM contexts).
func (c *ctxState) root() *ctxState {
	if c.kind == kindStream {
		if r := c.v.contexts[c.parentID]; r != nil {
			return r
		}
	}
	return c
}

func (c *ctxState) isFailed() bool { return c.v == nil || c.v.failed != "" }

func boolArg(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// checkFail is CHECK_FAIL_HTTP: whether the VM has failed, and if so whether
// the stream passes (fail open). Fail closed sends the 503 once.
func (c *ctxState) checkFail() (failed, open bool) {
	if !c.isFailed() {
		return false, false
	}
	if c.failOpen {
		return true, true
	}
	if !c.streamFailed {
		c.streamFailed = true
		c.failStream()
	}
	return true, false
}

// failStream is Context::failStream for both directions: one 503 local reply
// with details "wasm_fail_stream" and gRPC status UNAVAILABLE.
func (c *ctxState) failStream() {
	if c.hooks == nil || c.replySent {
		return
	}
	c.replySent = true
	c.hooks.sendLocalReply(503, nil, nil, 14, "wasm_fail_stream")
}

// onCreate calls proxy_on_context_create(id, root) once.
func (c *ctxState) onCreate() {
	if !c.isFailed() && !c.created && c.v.fns["proxy_on_context_create"] != nil {
		c.v.deferActions(func() {
			c.v.call(c, "proxy_on_context_create", uint64(c.id), uint64(c.parentID))
		})
	}
	c.created = true
}

// streamCall runs one stream callback with CHECK_FAIL before and after, like
// ContextBase::onRequestHeaders and friends. open/closed are the results when
// the VM has failed; convert maps the raw result.
func (c *ctxState) streamCall(fn string, open, closed uint32, convert func(uint64) uint32, args ...uint64) uint32 {
	if failed, isOpen := c.checkFail(); failed {
		if isOpen {
			return open
		}
		return closed
	}
	if c.v.fns[fn] == nil {
		return open
	}
	var status uint32
	c.v.deferActions(func() {
		r, _ := c.v.call(c, fn, args...)
		if failed, isOpen := c.checkFail(); failed {
			status = closed
			if isOpen {
				status = open
			}
			return
		}
		status = convert(r)
	})
	return status
}

func (c *ctxState) convertHeaders(r uint64) uint32 {
	if c.v.stopNext || r > uint64(headersStopAllWatermark) {
		return uint32(headersStopAllWatermark)
	}
	if r == uint64(headersStopIteration) && !c.allowStopIter {
		return uint32(headersStopAllWatermark)
	}
	return uint32(r)
}

func (c *ctxState) convertData(r uint64) uint32 {
	if c.v.stopNext || r > uint64(dataStopIterationNoBuffer) {
		return uint32(dataStopIterationNoBuffer)
	}
	return uint32(r)
}

func (c *ctxState) convertTrailers(r uint64) uint32 {
	if c.v.stopNext || r > uint64(trailersStopIteration) {
		return uint32(trailersStopIteration)
	}
	return uint32(r)
}

// decodeHeaders is Context::decodeHeaders.
func (c *ctxState) decodeHeaders(h *headerMap, eos bool) headersStatus {
	c.onCreate()
	c.reqHeaders = h
	c.endOfStream = eos
	st := headersStatus(c.streamCall("proxy_on_request_headers", uint32(headersContinue), uint32(headersStopAllWatermark),
		c.convertHeaders, uint64(c.id), uint64(h.len()), boolArg(eos)))
	if st == headersContinue {
		c.reqHeaders = nil
	}
	return st
}

// decodeData is Context::decodeData: while the previous body callback asked to
// buffer, the chunk joins the buffered body and the plugin sees the whole of it.
func (c *ctxState) decodeData(data *bodyBuf, eos bool) dataStatus {
	if !c.created {
		return dataContinue
	}
	if c.bufferingReq && !c.hooks.addDecodedData(data) {
		return dataStopIterationAndBuffer
	}
	c.reqBody = data
	c.endOfStream = eos
	size := len(c.requestBody().b)
	st := dataStatus(c.streamCall("proxy_on_request_body", uint32(dataContinue), uint32(dataStopIterationNoBuffer),
		c.convertData, uint64(c.id), uint64(size), boolArg(eos)))
	c.bufferingReq = false
	switch st {
	case dataContinue:
		c.reqBody = nil
	case dataStopIterationAndBuffer:
		c.bufferingReq = true
	}
	return st
}

// decodeTrailers is Context::decodeTrailers.
func (c *ctxState) decodeTrailers(t *headerMap) trailersStat {
	if !c.created {
		return trailersContinue
	}
	c.reqTrailers = t
	st := trailersStat(c.streamCall("proxy_on_request_trailers", uint32(trailersContinue), uint32(trailersStopIteration),
		c.convertTrailers, uint64(c.id), uint64(t.len())))
	if st == trailersContinue {
		c.reqTrailers = nil
	}
	return st
}

// encodeHeaders is Context::encodeHeaders (skipped after a failure reply).
func (c *ctxState) encodeHeaders(h *headerMap, eos bool) headersStatus {
	if !c.created || c.replySent {
		return headersContinue
	}
	c.respHeaders = h
	c.endOfStream = eos
	st := headersStatus(c.streamCall("proxy_on_response_headers", uint32(headersContinue), uint32(headersStopAllWatermark),
		c.convertHeaders, uint64(c.id), uint64(h.len()), boolArg(eos)))
	if st == headersContinue {
		c.respHeaders = nil
	}
	return st
}

// encodeData is Context::encodeData.
func (c *ctxState) encodeData(data *bodyBuf, eos bool) dataStatus {
	if !c.created || c.replySent {
		return dataContinue
	}
	if c.bufferingResp && !c.hooks.addEncodedData(data) {
		return dataStopIterationAndBuffer
	}
	c.respBody = data
	c.endOfStream = eos
	size := len(c.responseBody().b)
	st := dataStatus(c.streamCall("proxy_on_response_body", uint32(dataContinue), uint32(dataStopIterationNoBuffer),
		c.convertData, uint64(c.id), uint64(size), boolArg(eos)))
	c.bufferingResp = false
	switch st {
	case dataContinue:
		c.respBody = nil
	case dataStopIterationAndBuffer:
		c.bufferingResp = true
	}
	return st
}

// encodeTrailers is Context::encodeTrailers.
func (c *ctxState) encodeTrailers(t *headerMap) trailersStat {
	if !c.created || c.replySent {
		return trailersContinue
	}
	c.respTrailers = t
	st := trailersStat(c.streamCall("proxy_on_response_trailers", uint32(trailersContinue), uint32(trailersStopIteration),
		c.convertTrailers, uint64(c.id), uint64(t.len())))
	if st == trailersContinue {
		c.respTrailers = nil
	}
	return st
}

// log is Context::log, the access-log handler: proxy_on_log with the final
// request/response headers readable.
func (c *ctxState) log(req, resp, respTrailers *headerMap) {
	c.onCreate()
	c.accessLog = true
	c.alReqHeaders, c.alRespHeaders, c.alRespTrailers = req, resp, respTrailers
	if !c.isFailed() && c.v.fns["proxy_on_log"] != nil {
		c.v.deferActions(func() { c.v.call(c, "proxy_on_log", uint64(c.id)) })
	}
	c.accessLog = false
	c.alReqHeaders, c.alRespHeaders, c.alRespTrailers = nil, nil, nil
}

// onDestroy is Context::onDestroy: proxy_on_done then proxy_on_delete, and the
// context id is released.
func (c *ctxState) onDestroy() {
	if c.destroyed || !c.created {
		c.release()
		return
	}
	c.destroyed = true
	if !c.isFailed() && c.v.fns["proxy_on_done"] != nil {
		c.v.deferActions(func() { c.v.call(c, "proxy_on_done", uint64(c.id)) })
	}
	if !c.isFailed() && c.v.fns["proxy_on_delete"] != nil {
		c.v.deferActions(func() { c.v.call(c, "proxy_on_delete", uint64(c.id)) })
	}
	c.release()
}

func (c *ctxState) release() {
	if c.v != nil && c.kind == kindStream {
		delete(c.v.contexts, c.id)
	}
}

// requestBody is getBuffer(HttpRequestBody): the buffered body while buffering,
// else the current chunk.
func (c *ctxState) requestBody() *bodyBuf {
	if c.bufferingReq && c.hooks != nil {
		return c.hooks.decodingBuffer()
	}
	return c.reqBody
}

func (c *ctxState) responseBody() *bodyBuf {
	if c.bufferingResp && c.hooks != nil {
		return c.hooks.encodingBuffer()
	}
	return c.respBody
}

// continueStream is Context::continueStream for HTTP: the continue is
// deferred until the VM call returns; the request maps become unavailable at
// once (for either direction, as in Envoy).
func (c *ctxState) continueStream(response bool) {
	if c.hooks != nil {
		if response {
			c.v.addAfterVMCall(c.hooks.continueEncoding)
		} else {
			c.v.addAfterVMCall(c.hooks.continueDecoding)
		}
	}
	c.reqHeaders, c.reqBody, c.reqTrailers = nil, nil, nil
}

// closeStream is Context::closeStream for HTTP: a deferred stream reset.
func (c *ctxState) closeStream() {
	if c.hooks != nil {
		h := c.hooks
		c.v.addAfterVMCall(func() { h.resetStream("wasm_close_stream") })
	}
}

// sendLocalResponse is Context::sendLocalResponse: deferred; details have
// their whitespace replaced by '_'; a gRPC status outside 0..16 means none.
func (c *ctxState) sendLocalResponse(code int, body []byte, headers [][2]string, grpcStatus int32, details string) {
	if c.hooks == nil {
		return
	}
	h := c.hooks
	gs := -1
	if grpcStatus >= 0 && grpcStatus <= 16 {
		gs = int(grpcStatus)
	}
	details = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v' {
			return '_'
		}
		return r
	}, details)
	for i := range headers {
		headers[i][0] = strings.ToLower(headers[i][0])
	}
	c.v.addAfterVMCall(func() { h.sendLocalReply(code, body, headers, gs, details) })
}

// headerMapFor is getConstMap: the map a read of type t sees now (nil when not
// available).
func (c *ctxState) headerMapFor(t uint32) *headerMap {
	switch t {
	case 0:
		if c.accessLog {
			return c.alReqHeaders
		}
		return c.reqHeaders
	case 1:
		if c.accessLog {
			return nil
		}
		return c.reqTrailers
	case 2:
		if c.accessLog {
			return c.alRespHeaders
		}
		return c.respHeaders
	case 3:
		if c.accessLog {
			return c.alRespTrailers
		}
		return c.respTrailers
	case 6, 7:
		res := c.root().callResult
		if res == nil {
			return nil
		}
		if t == 6 {
			return res.headers
		}
		return res.trailers
	}
	return nil
}

// requestHeadersChanged clears the route cache after the filter changed map
// type t, when t is the request headers: Envoy does so for modules of ABI
// 0.2.1 and older, which are all the emulator loads.
func (c *ctxState) requestHeadersChanged(t uint32) {
	if t == 0 && c.hooks != nil {
		c.hooks.clearRouteCache()
	}
}

// mutableHeaderMap is getMap: the map a write of type t modifies (trailers are
// created on demand during the last buffered body callback).
func (c *ctxState) mutableHeaderMap(t uint32) *headerMap {
	switch t {
	case 0:
		return c.reqHeaders
	case 1:
		if c.reqTrailers == nil && c.reqBody != nil && c.endOfStream && c.hooks != nil {
			c.reqTrailers = c.hooks.addDecodedTrailers()
		}
		return c.reqTrailers
	case 2:
		return c.respHeaders
	case 3:
		if c.respTrailers == nil && c.respBody != nil && c.endOfStream && c.hooks != nil {
			c.respTrailers = c.hooks.addEncodedTrailers()
		}
		return c.respTrailers
	}
	return nil
}

// --- root context: tick ---

// tickTimer is a root context's timer (Envoy keeps one per root per VM).
type tickTimer struct {
	period time.Duration
	cancel func()
	gen    int
}

// setTickPeriod is Wasm::setTimerPeriod: restart the timer with the new
// period; 0 stops it.
func (c *ctxState) setTickPeriod(d time.Duration) {
	if c.tick == nil {
		c.tick = &tickTimer{}
	}
	t := c.tick
	if t.cancel != nil {
		t.cancel()
		t.cancel = nil
	}
	t.period = d
	t.gen++
	if d > 0 {
		c.armTick(t.gen)
	}
}

func (c *ctxState) armTick(gen int) {
	t := c.tick
	t.cancel = c.v.env.after(t.period, func() { c.onTickTimer(gen) })
}

// onTickTimer is Wasm::tickHandler: proxy_on_tick, then re-arm so the period
// counts from the end of the tick.
func (c *ctxState) onTickTimer(gen int) {
	t := c.tick
	if t == nil || t.gen != gen || c.v.contexts[c.id] != c {
		return
	}
	t.cancel = nil
	c.onTick()
	if t.gen == gen && t.period > 0 && t.cancel == nil {
		c.armTick(gen)
	}
}

func (c *ctxState) onTick() {
	if !c.isFailed() && c.v.fns["proxy_on_tick"] != nil {
		c.v.deferActions(func() { c.v.call(c, "proxy_on_tick", uint64(c.id)) })
	}
}

func (c *ctxState) stopTick() {
	if c.tick != nil && c.tick.cancel != nil {
		c.tick.cancel()
		c.tick.cancel = nil
	}
	if c.tick != nil {
		c.tick.period = 0
		c.tick.gen++
	}
}

// onQueueReady is ContextBase::onQueueReady.
func (c *ctxState) onQueueReady(token uint32) {
	if !c.isFailed() && c.v.fns["proxy_on_queue_ready"] != nil {
		c.v.deferActions(func() { c.v.call(c, "proxy_on_queue_ready", uint64(c.id), uint64(token)) })
	}
}
