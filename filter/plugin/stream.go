package plugin

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/tokenest"
)

// originalDstHeader selects the host of an ORIGINAL_DST cluster with
// use_http_header. Envoy does not sanitise it, so client copies are dropped.
const originalDstHeader = "x-envoy-original-dst-host"

// stream is one request. Its life (way.go: the body way and the headers way):
//
//	headers  → not handled: route to a decoder, Continue (passthrough)
//	         → handled, body way: Pause until the whole body is buffered
//	           (a tick continues it the headers way if no body comes)
//	         → handled, headers way: choose the decoder from the headers,
//	           route, drop content-length, Continue; the body is held below
//	body end → parse, estimate, decide:
//	           direct: (body way: route to a decoder), Continue
//	           disagg: dispatch the prefill (mode's connector), stay paused
//	prefill answer (http-call callback, stream as effective context)
//	         → decode body, (body way: route), Resume — or relay / fall back / fail
//	response → debug headers, decode outcome; mode conversions (lmcache)
//	done     → every lease released, waiters dropped
type stream struct {
	types.DefaultHttpContext
	r  *rootContext
	id uint32

	// From the request headers (readRequestHeaders): the values alias hdr.
	hdr                                                 []byte
	method, path, contentType, authority, authorization string
	// clientRequestID is the client's x-request-id ("" when none).
	clientRequestID string
	// hasContentLength: the request headers carry a content-length, which
	// a body edit must then fix.
	hasContentLength bool
	api              config.API
	handled          bool

	// bodyLen is the request body's length in Envoy's buffer.
	bodyLen int
	// indexed is the body's index without its bytes (Detach), for reread;
	// its member list lies in detached, which a reused stream keeps.
	indexed  connector.Request
	detached connector.Room
	// tokens is the estimate (-1 when the body has no recognised prompt).
	tokens int
	reqID  string
	// uuid holds the bytes of a request id pdroute made (setRequestID).
	uuid [36]byte
	// route is the path label once decided (requests.<route>).
	route string

	// usePrefix: the prefix index read this request's prompt; cachedTokens
	// and cachedShare are what the chosen decoder held of it.
	usePrefix    bool
	cachedTokens int
	cachedShare  float64

	// prefill and decode point at prefillLease and decodeLease once picked
	// (nil before): the leases live in the stream, so a pick allocates
	// nothing (lb.Balancer.PickInto).
	prefill, decode           *lb.Lease
	prefillLease, decodeLease lb.Lease
	prefillEP, decodeEP       *config.Endpoint
	prefillStart              time.Time

	// awaitingBody: paused in the request headers, no body callback yet
	// (since pausedAt). See checkBodyWait.
	awaitingBody bool
	pausedAt     time.Time
	// early: the request took the headers way. Its decoder was chosen and
	// its headers went on to the router; the request headers can no longer
	// be read or changed.
	early bool
	// probedAt: when a tick continued the headers of a request whose body
	// had not come (see bodyArrived).
	probedAt time.Time

	// localReply: the filter answered the client itself.
	localReply bool
	// decodeReported: the decode lease's outcome went to passive health.
	decodeReported bool
	// responseStarted: response headers went on to the client.
	responseStarted bool
	// plainError: the status of a plain-text 5xx answer being rewritten
	// into an OpenAI-shaped error (decodeerr.go).
	plainError int

	lm *lmcacheStream
	sg *sglangStream

	// The pending http call (dispatch): a stream has one at a time. onCall
	// is the method value s.callAnswered, made once per stream object and
	// kept when the object is reused, so a call allocates no closure.
	onCall    func(numHeaders, bodySize, numTrailers int)
	onAnswer  func(*stream, callAnswer)
	answerBuf *[]byte
	// calls counts the http calls dispatched and not yet answered: a stream
	// with one pending is not reused (recycle), as its answer still reaches it.
	calls int
}

// maxFreeStreams bounds the ended streams a root keeps for reuse: a few
// more than the streams a worker usually has at once, few enough that the
// list costs no page of memory.
const maxFreeStreams = 16

// newStream returns a stream for context id: an ended one of the root's free
// list, reset, or a new one. Reuse spares the stream's allocation (with its
// leases, ~1 KB to clear in the runtime's allocator) on every request.
func (r *rootContext) newStream(id uint32) *stream {
	n := len(r.free)
	if n == 0 {
		return &stream{r: r, id: id}
	}
	s := r.free[n-1]
	r.free[n-1] = nil
	r.free = r.free[:n-1]
	onCall, hdr, detached := s.onCall, s.hdr[:0], s.detached
	if cap(hdr) > maxKeptHeaderBuf {
		hdr = nil
	}
	*s = stream{r: r, id: id, onCall: onCall, hdr: hdr, detached: detached}
	return s
}

// recycle puts an ended stream on the root's free list, unless an http call
// it dispatched is still pending (the answer's callback reaches it; the
// abi drops the answer of an ended stream, but the object must not serve
// another stream meanwhile) or the list is full.
func (r *rootContext) recycle(s *stream) {
	if s.calls != 0 || len(r.free) >= maxFreeStreams {
		return
	}
	r.free = append(r.free, s)
}

func (s *stream) cfg() *config.Config { return s.r.cfg }

func (s *stream) OnHttpRequestHeaders(_ int, endOfStream bool) types.Action {
	cfg := s.cfg()
	h := s.readRequestHeaders()
	// Headers that steer Envoy's routing are the filter's alone.
	if h.routeHeader {
		removeHeader(cfg.RouteHeader)
	}
	if h.originalDst {
		removeHeader(originalDstHeader)
	}
	if cfg.DebugPath != "" && s.method == "GET" && s.path == cfg.DebugPath {
		s.route = pathPassthrough
		s.reply(200, [][2]string{{"content-type", "application/json"}}, s.r.debugAnswer(time.Now()))
		return types.ActionPause
	}
	api, ok := cfg.Match(s.method, s.path, s.contentType)
	if !ok {
		return s.passthrough()
	}
	s.api, s.handled = api, true
	if s.contentType != "application/json" && !config.JSONContentType(s.contentType) {
		// Handled whatever its label (config.Match): the body is parsed and
		// sanitised as JSON, and engines get it labelled so.
		if err := abi.ReplaceHttpRequestHeader("content-type", "application/json"); err != nil {
			abi.LogWarnf("pdroute: stream %d: set content-type: %v", s.id, err)
		}
	}
	if endOfStream {
		s.fail(apierr.MalformedJSON, "empty body")
		return types.ActionPause
	}
	if n, ok := parseLength(h.contentLength); ok && n > cfg.MaxBodyBytes {
		s.fail(apierr.BodyTooLarge, fmt.Sprintf("%d bytes, limit %d", n, cfg.MaxBodyBytes))
		return types.ActionPause
	}
	if s.r.headersWay() {
		return actionFor(s.continueAtHeaders())
	}
	// Pause: with allow_on_headers_stop_iteration Envoy keeps calling
	// OnHttpRequestBody while the headers wait (see checkBodyWait).
	s.awaitingBody, s.pausedAt = true, time.Now()
	s.r.m.countWay(config.RouteAtBody)
	return types.ActionPause
}

// continueAtHeaders sends a handled request on the headers way: everything
// that lives in the headers is done now, while they can still change. The
// decoder is chosen from load and health; the body (held by the body
// callbacks) may change length, so content-length goes and Envoy's codec
// frames the upstream body itself. True when the headers continue; false
// when the client got a 503 (no decoder).
func (s *stream) continueAtHeaders() bool {
	s.early = true
	s.r.m.countWay(config.RouteAtHeaders)
	s.setRequestID()
	if !s.pickDecode(nil, time.Now()) {
		return false
	}
	s.routeTo(s.decodeEP)
	removeHeader("content-length")
	return true
}

// passthrough sends a request pdroute does not handle, untouched, to a
// decoder: the route header must name some cluster, and the decode pool is
// where an OpenAI server runs (/v1/models, /health, …).
func (s *stream) passthrough() types.Action {
	s.route = pathPassthrough
	s.r.m.countRequest(pathPassthrough)
	if !s.pickDecode(nil, time.Now()) {
		return types.ActionPause
	}
	s.routeTo(s.decodeEP)
	return types.ActionContinue
}

func (s *stream) OnHttpRequestBody(bodySize int, endOfStream bool) types.Action {
	s.bodyArrived()
	if !s.handled || s.route != "" || s.localReply {
		return types.ActionContinue
	}
	if bodySize > s.cfg().MaxBodyBytes {
		s.fail(apierr.BodyTooLarge, fmt.Sprintf("more than %d bytes", s.cfg().MaxBodyBytes))
		return types.ActionPause
	}
	if !endOfStream {
		return types.ActionPause // StopIterationAndBuffer: the next chunk is appended
	}
	return s.bodyComplete(bodySize)
}

func (s *stream) OnHttpRequestTrailers(int) types.Action {
	s.bodyArrived()
	if !s.handled || s.route != "" || s.localReply {
		return types.ActionContinue
	}
	// Trailers end the body: its size is whatever Envoy buffered.
	body, err := s.r.readBody(0, s.cfg().MaxBodyBytes+1)
	if err != nil {
		body = nil
	}
	if len(body) > s.cfg().MaxBodyBytes {
		s.fail(apierr.BodyTooLarge, fmt.Sprintf("more than %d bytes", s.cfg().MaxBodyBytes))
		return types.ActionPause
	}
	return s.decideBody(body)
}

// bodyComplete reads the buffered body and decides.
func (s *stream) bodyComplete(size int) types.Action {
	body, err := s.r.readBody(0, size)
	if err != nil && size > 0 {
		s.fail(apierr.Internal, "read request body: "+err.Error())
		return types.ActionPause
	}
	return s.decideBody(body)
}

// maxKeptBody bounds the body buffer a root keeps (readBody); a longer
// body is read into a fresh allocation, as the prefill body is built
// (maxKeptPrefillBody).
const maxKeptBody = 1 << 20

// readBody reads size bytes of the paused request's body from start into
// the root's buffer: reading a body costs no allocation (nor its clearing,
// nor the collections that brings on) once the buffer has grown to hold
// one. The bytes are valid until the next readBody, which may be another
// stream's: whatever must outlive the callback is copied (Detach keeps
// offsets, lmcache's client token ids are cloned).
func (r *rootContext) readBody(start, size int) ([]byte, error) {
	b, err := abi.GetHttpRequestBodyInto(r.body, start, size)
	if cap(b) > cap(r.body) && cap(b) <= maxKeptBody {
		r.body = b[:0]
	}
	return b, err
}

// decideBody is the routing decision for a complete handled body. The
// estimate is also the body's one JSON validation (tokenest.Estimate's
// guarantee, which the root's Cache keeps): a 500 KB prompt is scanned
// once, not twice.
func (s *stream) decideBody(body []byte) types.Action {
	cfg := s.cfg()
	s.bodyLen = len(body)
	s.tokens = -1
	est, err := s.r.tools.EstimateNear(body, s.api.Path(), s.r.method, cfg.ThresholdTokens, &s.r.index)
	h, m, _ := s.r.tools.Stats()
	s.r.m.toolCache(s.r.toolHits, s.r.toolMisses, h, m)
	s.r.toolHits, s.r.toolMisses = h, m
	if err == tokenest.ErrNotJSON { // never wrapped (EstimateNear)
		s.fail(apierr.MalformedJSON, "request body is not a JSON object")
		return types.ActionPause
	}
	if err == nil {
		s.tokens = est.Tokens
		s.r.m.tokens.Record(uint64(est.Tokens))
	}
	req, ok := s.index(body, &s.r.index)
	if !ok {
		return types.ActionPause
	}
	if req.Removed {
		s.r.m.sanitized.Increment(1)
		abi.LogDebugf("pdroute: stream %d: removed client-supplied PD control fields", s.id)
	}
	if !s.early {
		s.setRequestID()
	}
	// The decoder is chosen first (on the headers way it already is): without
	// one nothing can be served, no prefill should run for nothing, and with
	// threshold_on "uncached" the decision depends on what that decoder holds.
	now := time.Now() // one clock reading (a host call) for the callback
	s.usePrefix = s.r.px != nil && s.r.px.lookup(body, &s.r.index, s.api.Path(), now)
	if !s.pickDecode(body, now) {
		return types.ActionPause
	}
	d := s.decideRoute()
	if d == config.Disaggregate && s.early && cfg.HeadersWayDirect(s.api) {
		d = config.Direct
	}
	var action types.Action
	switch d {
	case config.Disaggregate:
		action = s.disaggregate(req, body, now)
	default:
		s.toDecoder(req.Direct(), pathDirect)
		action = types.ActionContinue
	}
	if s.usePrefix {
		// The decoder holds the prompt once it prefilled it or received its
		// KV, and so does the prefiller: one read-modify-write per point.
		prefill := -1
		if s.prefill != nil {
			prefill = s.prefill.Index
		}
		s.r.px.record(s.decode.Index, prefill, now)
	}
	return action
}

// decideRoute is config.DecideCached with what the chosen decoder holds of
// the prompt (nothing without the prefix index).
func (s *stream) decideRoute() config.Route {
	cfg := s.cfg()
	px := s.r.px
	// the stream is handled: it matched at its headers (cfg.Match)
	if !s.usePrefix {
		return cfg.DecideMatched(s.tokens, 0)
	}
	s.cachedTokens, s.cachedShare = px.cachedTokens(s.decode.Index, s.tokens)
	route := cfg.DecideMatched(s.tokens, s.cachedTokens)
	px.share.Record(uint64(s.cachedShare*100 + 0.5))
	label := route.String()
	if route == config.Direct && cfg.DecideMatched(s.tokens, 0) == config.Disaggregate {
		label = "direct_by_cache"
	}
	px.decisions[label].Increment(1)
	return route
}

// disaggregate starts the mode's prefill leg; the decoder is chosen.
func (s *stream) disaggregate(req connector.Request, body []byte, now time.Time) types.Action {
	if err := connector.Disaggregable(s.cfg().Mode, req); err != nil {
		// batches in nixl mode, media or tools in lmcache mode…: a decoder serves them whole
		abi.LogDebugf("pdroute: stream %d: not disaggregated: %v", s.id, err)
		s.toDecoder(req.Direct(), pathDirect)
		return types.ActionContinue
	}
	if err := connector.CheckDecode(s.cfg().Mode, req); err != nil {
		s.refuse(err)
		return types.ActionPause
	}
	// From here the request outlives the callback (reread); a request
	// served directly never needs its detached index.
	s.indexed = req.DetachIn(&s.detached)
	if !s.pickPrefill(body, now) {
		s.r.m.prefillFailures[config.PrefillNoEndpoint].Increment(1)
		if s.afterPrefillFailure(config.PrefillNoEndpoint, "") {
			return types.ActionContinue
		}
		return types.ActionPause
	}
	switch s.cfg().Mode {
	case config.ModeLMCache:
		return s.startLMCache(req)
	case config.ModeSGLang:
		return s.startSGLang(req, body)
	default:
		return s.startNIXL(req, now)
	}
}

// setRequestID keeps a well-formed client X-Request-Id or makes a UUIDv4;
// both legs carry it (vLLM uses it as the engine request id).
func (s *stream) setRequestID() {
	if connector.KeepsRequestID(s.clientRequestID) {
		s.reqID = s.clientRequestID
	} else {
		// From the VM's generator (seeded from WASI random_get at start),
		// not random_get per request (a host call and its glue): the id
		// needs uniqueness, not secrecy, and 122 random bits from a PCG
		// seeded with 128 give it.
		var random [16]byte
		binary.LittleEndian.PutUint64(random[:8], s.r.rng.Uint64())
		binary.LittleEndian.PutUint64(random[8:], s.r.rng.Uint64())
		// the id lives in the stream, which lives as long as it
		connector.PutUUIDv4(&s.uuid, random)
		s.reqID = unsafe.String(&s.uuid[0], len(s.uuid))
	}
	if err := abi.ReplaceHttpRequestHeader("x-request-id", s.reqID); err != nil {
		abi.LogWarnf("pdroute: stream %d: set x-request-id: %v", s.id, err)
	}
}

// pickDecode chooses the decoder, or answers 503 when none is usable. On
// the headers way the decoder was chosen at the headers.
func (s *stream) pickDecode(body []byte, now time.Time) bool {
	if s.early && s.decode != nil {
		return true
	}
	var cached []int
	if s.usePrefix {
		cached = s.r.px.decCach
	}
	if err := s.r.decode.PickInto(&s.decodeLease, now, s.prefixKey(body, &s.cfg().Decode), cached, s.promptBytes()); err != nil {
		s.fail(apierr.NoDecodeEndpoint, "")
		return false
	}
	s.decode, s.decodeEP = &s.decodeLease, &s.cfg().Decode.Endpoints[s.decodeLease.Index]
	return true
}

// pickPrefill chooses the prefiller; false when none is usable.
func (s *stream) pickPrefill(body []byte, now time.Time) bool {
	var cached []int
	if s.usePrefix {
		cached = s.r.px.preCached
	}
	if err := s.r.prefill.PickInto(&s.prefillLease, now, s.prefixKey(body, &s.cfg().Prefill), cached, s.promptBytes()); err != nil {
		return false
	}
	s.prefill, s.prefillEP = &s.prefillLease, &s.cfg().Prefill.Endpoints[s.prefillLease.Index]
	return true
}

// index indexes a body tokenest has validated (it returned anything but
// ErrNotJSON) from x, the index the estimate made of it (nil: scan the
// body), answering 400 for what is still wrong with it. The Request lives
// until the callback returns (requestRoom): what must outlive it is
// Detached into s.indexed.
func (s *stream) index(body []byte, x *tokenest.Index) (connector.Request, bool) {
	var room *connector.Room
	if len(body) <= maxKeptBody {
		// the body lies in the root's buffer, which the room's keys may
		// alias; a longer one is not kept alive by them
		room = &requestRoom
	}
	req, err := connector.NewIndexedRequestIn(s.api, body, x, room)
	if err != nil {
		s.fail(apierr.MalformedJSON, err.Error())
		return connector.Request{}, false
	}
	return req, true
}

// requestRoom holds the member list of the request a callback indexes
// (index): the VM runs one callback at a time, and what a stream keeps
// past it is Detached.
var requestRoom connector.Room

// promptBytes is the rendered prompt's size the prefix index measured.
func (s *stream) promptBytes() int {
	if !s.usePrefix {
		return 0
	}
	return s.r.px.prompt.Bytes
}

// prefixKey is the prompt-prefix hash prefix_affinity needs (0 otherwise).
// A handled request choosing its decoder at the headers has no prompt yet:
// a random key makes prefix_affinity's bounded-load hashing a load-based
// choice.
func (s *stream) prefixKey(body []byte, p *config.Pool) uint64 {
	if p.Strategy != config.PrefixAffinity {
		return 0
	}
	if body == nil {
		if s.early {
			return s.r.rng.Uint64() | 1
		}
		return 0
	}
	k, err := tokenest.PrefixKey(body, s.api.Path(), p.AffinityPrefixBytes)
	if err != nil {
		return 0
	}
	return k
}

// toDecoder applies the decode body edit, routes the request to the chosen
// decoder and records the path taken. The caller continues the request.
func (s *stream) toDecoder(edit connector.BodyEdit, route string) {
	s.editBody(edit)
	if !s.early {
		s.routeTo(s.decodeEP)
	}
	s.route = route
	s.r.m.countRequest(route)
}

// editBody applies a connector edit to Envoy's request buffer and fixes
// content-length.
func (s *stream) editBody(e connector.BodyEdit) {
	if e.Drain == 0 && len(e.Prefix) == 0 {
		return
	}
	if err := abi.EditHttpRequestBody(e.Drain, e.Prefix); err != nil {
		abi.LogErrorf("pdroute: stream %d: edit request body: %v", s.id, err)
		return
	}
	s.bodyLen = e.Len(s.bodyLen)
	if !s.early && s.hasContentLength {
		s.setContentLength()
	}
}

// lengthDigits is where setContentLength writes its value: the host
// copies a header value before the call returns, and the VM runs one
// callback at a time, so one buffer serves every stream.
var lengthDigits [20]byte

// setContentLength sets content-length to bodyLen, allocating nothing
// (strconv.Itoa would, beyond 99: the value escapes into the host call).
func (s *stream) setContentLength() {
	b := &lengthDigits
	i := len(b)
	for n := s.bodyLen; ; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
		if n < 10 {
			break
		}
	}
	if err := abi.ReplaceHttpRequestHeader("content-length", unsafe.String(&b[i], len(b)-i)); err != nil {
		abi.LogWarnf("pdroute: stream %d: set content-length: %v", s.id, err)
	}
}

// replaceBody replaces the whole request body (mode rewrites that change it
// throughout, such as lmcache's token-id prompt).
func (s *stream) replaceBody(body []byte) {
	if err := abi.ReplaceHttpRequestBody(body); err != nil {
		abi.LogErrorf("pdroute: stream %d: replace request body: %v", s.id, err)
		return
	}
	s.bodyLen = len(body)
	if s.early {
		return // content-length went at the headers
	}
	s.setContentLength()
}

// routeTo points Envoy's router at e: the route header for cluster_header,
// plus x-envoy-original-dst-host for address endpoints.
func (s *stream) routeTo(e *config.Endpoint) {
	cluster, dst := s.cfg().Upstream(e)
	if err := abi.ReplaceHttpRequestHeader(s.cfg().RouteHeader, cluster); err != nil {
		abi.LogErrorf("pdroute: stream %d: set route header: %v", s.id, err)
	}
	if dst != "" {
		if err := abi.ReplaceHttpRequestHeader(originalDstHeader, dst); err != nil {
			abi.LogErrorf("pdroute: stream %d: set original-dst header: %v", s.id, err)
		}
	}
}

// resume continues a request paused in an earlier callback.
func (s *stream) resume() {
	if err := abi.ResumeHttpRequest(); err != nil {
		abi.LogErrorf("pdroute: stream %d: resume: %v", s.id, err)
	}
}

// fail answers the client with a pdroute error and releases every lease.
func (s *stream) fail(k apierr.Kind, detail string) {
	status, body := apierr.Response(k, detail)
	s.reply(status, [][2]string{{"content-type", apierr.ContentType}}, body)
	if status >= 500 {
		abi.LogWarnf("pdroute: stream %d%s: %d %s: %s", s.id, s.requestLabel(), status, k.Code(), detail)
	}
}

// requestLabel is " (request <id>)" once the request has an id, else "".
func (s *stream) requestLabel() string {
	if s.reqID == "" {
		return ""
	}
	return " (request " + s.reqID + ")"
}

// reply sends a local response. It travels back through this stream's own
// response callbacks, which must not take it for the decoder's answer.
func (s *stream) reply(status int, headers [][2]string, body []byte) {
	if s.route == "" {
		// every request lands in one requests.* counter
		s.route = pathError
		s.r.m.countRequest(pathError)
	}
	s.localReply = true
	s.r.m.localReply(status)
	if err := abi.SendHttpResponse(uint32(status), headers, body, -1); err != nil {
		abi.LogErrorf("pdroute: stream %d: local reply %d: %v", s.id, status, err)
	}
	s.releaseAll()
}

func (s *stream) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	head := readResponseHeaders()
	if !s.localReply && s.decode != nil && !s.decodeReported {
		s.decodeReported = true
		outcome := lb.Success
		if head.status >= 500 {
			outcome = lb.Failure
		}
		// a zero time: lb reads the clock only if the report writes
		_ = s.decode.Report(time.Time{}, outcome)
	}
	if s.cfg().DebugHeaders && s.route != "" {
		s.addDebugHeaders()
	}
	if !s.localReply && s.decode != nil && s.plainErrorHeaders(head, endOfStream) {
		return types.ActionContinue // decodeerr.go
	}
	if s.lm != nil && !s.localReply {
		return s.lmcacheResponseHeaders(head, endOfStream)
	}
	if s.sg != nil && !s.localReply {
		return s.sglangResponseHeaders(endOfStream)
	}
	s.responseStarted = true
	return types.ActionContinue
}

func (s *stream) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	if s.plainError != 0 {
		return s.plainErrorBody(bodySize, endOfStream)
	}
	if s.lm != nil && !s.localReply {
		return s.lmcacheResponseBody(bodySize, endOfStream)
	}
	if s.sg != nil && !s.localReply {
		return s.sglangResponseBody(bodySize, endOfStream)
	}
	return types.ActionContinue
}

func (s *stream) addDebugHeaders() {
	add := func(k, v string) {
		if err := abi.AddHttpResponseHeader(k, v); err != nil {
			abi.LogDebugf("pdroute: stream %d: add %s: %v", s.id, k, err)
		}
	}
	add("x-pdroute-path", s.route)
	if s.prefillEP != nil && s.route == pathDisagg {
		add("x-pdroute-prefill", s.prefillEP.Name)
	}
	if s.decodeEP != nil {
		add("x-pdroute-decode", s.decodeEP.Name)
	}
	if s.tokens >= 0 && s.handled {
		add("x-pdroute-tokens", strconv.Itoa(s.tokens))
	}
	if s.usePrefix {
		add("x-pdroute-cached", cacheHeader(s.cachedShare, s.cachedTokens))
	}
}

// OnHttpStreamDone releases whatever the stream still holds, however it
// ended (answered, failed, or the client went away mid-prefill).
func (s *stream) OnHttpStreamDone() {
	s.releaseAll()
	if s.lm != nil {
		s.lmcacheDone()
	}
	s.r.forget(s)
	s.r.recycle(s)
}

// releaseAll ends both leases (idempotent). The zero time lets lb read the
// clock only if a release writes (lb.Clock): the common one does not.
func (s *stream) releaseAll() {
	if s.prefill != nil {
		s.prefill.Release(time.Time{})
	}
	if s.decode != nil {
		s.decode.Release(time.Time{})
	}
}

func removeHeader(key string) {
	if err := abi.RemoveHttpRequestHeader(key); err != nil {
		abi.LogDebugf("pdroute: remove %s: %v", key, err)
	}
}

func panicText(v any) string { return fmt.Sprint(v) }
