package plugin

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/filter/sse"
)

// lmcache mode (PROTOCOLS §3): tokenize → prefill (token ids, disagg_spec
// naming the decoder's receiver) → wait for the prefill answer AND the
// KV-ready notifications (one per decoder TP rank, relayed by kvbridge) →
// decode from token ids + first token → the client gets the first token,
// then the decoder's stream (as chat chunks for chat clients).

// maxSSEEvent bounds one decoder event held by the response converter.
const maxSSEEvent = 1 << 20

// lmcacheStream is an lmcache request's state between its legs.
type lmcacheStream struct {
	// kvID is disagg_spec.req_id: a fresh UUIDv4, unique across restarts.
	kvID string
	// need is the decoder's TP size: notifications that make the KV complete.
	need int
	// tokens are the prompt's token ids (raw JSON list) until decode.
	tokens []byte
	first  connector.FirstToken
	// answered: the prefill answered usefully at this time.
	answered bool
	at       time.Time
	// deadline bounds the wait for the KV after the prefill answered.
	deadline time.Time
	// decoding: the decode request went to the decoder.
	decoding bool

	chat, clientStream bool
	// Response conversion.
	passthrough bool // the decoder's answer goes to the client unchanged
	conv        *sse.Stream
	split       *sse.Splitter
	firstSent   bool
}

func (s *stream) startLMCache(req connector.Request) types.Action {
	var random [16]byte
	_ = abi.RandomBytes(random[:]) // host randomness; see abi.RandomBytes
	s.lm = &lmcacheStream{
		kvID:         connector.UUIDv4(random),
		need:         s.decodeEP.KVReceiver.TPSize(),
		chat:         s.api == config.APIChat,
		clientStream: req.Body.Get("stream").Bool(),
	}
	tokenizeBody, tokens := connector.LMCacheTokenize(req)
	if tokenizeBody == nil {
		// the client sent ids: a copy, for the body buffer is reused (readBody)
		s.lm.tokens = bytes.Clone(tokens)
		return actionFor(s.lmcachePrefill(req))
	}
	ep := s.prefillEP
	if s.cfg().LMCache.TokenizeOn == config.TokenizeOnDecode {
		ep = s.decodeEP
	}
	s.prefillStart = time.Now()
	if err := s.dispatch(ep, "POST", connector.TokenizePath, tokenizeBody, s.cfg().PrefillTimeout, nil, (*stream).onTokenized); err != nil {
		abi.LogErrorf("pdroute: stream %d: dispatch tokenize to %s: %v", s.id, ep.Name, err)
		s.reportPrefill(config.PrefillReset, time.Now())
		return actionFor(s.afterPrefillFailure(config.PrefillReset, "tokenize: "+err.Error()))
	}
	return types.ActionPause
}

// actionFor maps "the request goes on now" to the body callback's action.
func actionFor(continueNow bool) types.Action {
	if continueNow {
		return types.ActionContinue
	}
	return types.ActionPause
}

// onTokenized receives /tokenize's answer and dispatches the prefill.
func (s *stream) onTokenized(a callAnswer) {
	var tokens []byte
	if a.status >= 200 && a.status < 300 {
		tokens, _ = connector.ParseTokenizeAnswer(a.body)
	}
	if tokens == nil {
		now := time.Now()
		o := s.prefillOutcome(a, false, now)
		s.reportPrefill(o, now)
		s.onPrefillFailed(o, a)
		return
	}
	s.lm.tokens = tokens // a.body is this stream's own copy
	req, ok := s.reread()
	if !ok {
		return
	}
	if s.lmcachePrefill(req) {
		s.resume()
	}
}

// lmcachePrefill dispatches the prefill and starts waiting for the KV: the
// notifications may arrive before the prefill answers. True when a failure
// sent the request on to the decoder at once (fallback).
func (s *stream) lmcachePrefill(req connector.Request) bool {
	body := connector.LMCachePrefill(req, s.lm.tokens, s.lm.kvID, s.decodeEP)
	s.r.kv.add(s)
	s.prefillStart = time.Now()
	err := s.dispatch(s.prefillEP, "POST", connector.CompletionsPath, body, s.cfg().PrefillTimeout, nil, (*stream).onLMCacheAnswer)
	if err == nil {
		return false
	}
	abi.LogErrorf("pdroute: stream %d: dispatch prefill to %s: %v", s.id, s.prefillEP.Name, err)
	s.r.kv.remove(s)
	s.reportPrefill(config.PrefillReset, time.Now())
	return s.afterPrefillFailure(config.PrefillReset, err.Error())
}

func (s *stream) onLMCacheAnswer(a callAnswer) {
	var ans connector.PrefillAnswer
	usable := false
	if a.status >= 200 && a.status < 300 {
		if p, err := connector.ParsePrefillAnswerIn(a.body, &s.r.index); err == nil {
			ans, usable = p, p.Usable(config.ModeLMCache)
		}
	}
	now := time.Now()
	o := s.prefillOutcome(a, usable, now)
	s.reportPrefill(o, now)
	if o != config.PrefillOK {
		s.r.kv.remove(s)
		s.onPrefillFailed(o, a)
		return
	}
	s.lm.first, s.lm.answered, s.lm.at = ans.First, true, now
	s.lm.deadline = now.Add(s.cfg().LMCache.KVWaitTimeout)
	if s.r.kv.ready(s) {
		s.lmcacheDecode()
	}
	// Otherwise the KV waiter resumes the stream when the notifications are
	// in, or the tick applies on_kv_timeout.
}

// onKVReady runs (stream as effective context) when the notifications are in.
func (s *stream) onKVReady() {
	if s.lm.answered && !s.lm.decoding {
		s.lmcacheDecode()
	}
}

// onKVTimeout runs (stream as effective context) when the KV did not come
// within kv_wait_timeout_ms of the prefill's answer.
func (s *stream) onKVTimeout() {
	s.r.m.kvTimeout.Increment(1)
	act := s.cfg().OnKVTimeout()
	abi.LogWarnf("pdroute: stream %d (request %s): KV for %s not ready after %s → %s",
		s.id, s.reqID, s.lm.kvID, s.cfg().LMCache.KVWaitTimeout, act.Kind)
	if act.Kind == config.Fail {
		s.r.kv.remove(s)
		s.fail(act.Error, "kv_transfer req_id "+s.lm.kvID)
		return
	}
	s.lmcacheDecode() // the decoder recomputes what it lacks
}

// lmcacheDecode turns the paused request into the token-id decode request.
func (s *stream) lmcacheDecode() {
	if s.r.kv.ready(s) {
		s.r.m.kvReady.Increment(1)
	}
	s.r.m.kvWait.Record(uint64(time.Since(s.lm.at) / time.Millisecond))
	s.r.kv.remove(s)
	req, ok := s.reread()
	if !ok {
		return
	}
	edit := connector.LMCacheDecode(req, s.lm.tokens, s.lm.first.Token)
	s.lm.tokens, s.lm.decoding = nil, true
	// On the headers way only /v1/completions requests get here
	// (Config.HeadersWayDirect): the path is already the decode leg's.
	if !s.early {
		if err := abi.ReplaceHttpRequestHeader(":path", connector.CompletionsPath); err != nil {
			abi.LogErrorf("pdroute: stream %d: set :path: %v", s.id, err)
		}
	}
	s.toDecoder(edit, pathDisagg)
	s.resume()
}

func (s *stream) lmcacheResponseHeaders(head responseHead, endOfStream bool) types.Action {
	s.responseStarted = true
	lm := s.lm
	if !lm.decoding || endOfStream || head.status != 200 {
		lm.passthrough = true // fallback, or the decoder's own error
		return types.ActionContinue
	}
	// The body changes length: the client's answer is chunked.
	removeResponseHeader("content-length")
	if lm.clientStream {
		lm.conv = sse.NewStream(lm.chat, "")
		lm.split = sse.NewSplitter(maxSSEEvent)
	}
	return types.ActionContinue
}

func (s *stream) lmcacheResponseBody(bodySize int, endOfStream bool) types.Action {
	lm := s.lm
	if lm.passthrough || !lm.decoding {
		return types.ActionContinue
	}
	if !lm.clientStream {
		if !endOfStream {
			return types.ActionPause // buffer the whole answer
		}
		body, _ := abi.GetHttpResponseBody(0, bodySize)
		out, err := sse.Answer(lm.chat, "", lm.first, body)
		if err != nil {
			abi.LogWarnf("pdroute: stream %d: decode answer not converted: %v", s.id, err)
			return types.ActionContinue
		}
		s.replaceResponseBody(out)
		return types.ActionContinue
	}
	chunk, _ := abi.GetHttpResponseBody(0, bodySize)
	out := make([]byte, 0, len(chunk)+256)
	if !lm.firstSent {
		out = lm.conv.AppendFirst(out, lm.first)
		lm.firstSent = true
	}
	err := lm.split.Feed(chunk, func(ev sse.Event) error {
		converted, err := lm.conv.AppendEvent(out, ev.Data)
		if err != nil { // not a completion chunk: pass the event on as it came
			converted = append(append(append(out, "data: "...), ev.Data...), "\n\n"...)
		}
		out = converted
		return nil
	})
	if err != nil {
		abi.LogWarnf("pdroute: stream %d: decode stream not converted from here on: %v", s.id, err)
		lm.passthrough = true
		out = append(out, chunk...)
	}
	if endOfStream {
		_ = lm.split.End()
	}
	s.replaceResponseBody(out)
	return types.ActionContinue
}

func (s *stream) replaceResponseBody(b []byte) {
	if err := abi.ReplaceHttpResponseBody(b); err != nil {
		abi.LogErrorf("pdroute: stream %d: replace response body: %v", s.id, err)
	}
}

func (s *stream) lmcacheDone() {
	s.r.kv.remove(s)
	s.lm.tokens = nil
}

func removeResponseHeader(key string) {
	if err := abi.RemoveHttpResponseHeader(key); err != nil {
		abi.LogDebugf("pdroute: remove response %s: %v", key, err)
	}
}

// --- the KV waiter ---

// kvPollWait is how long one long poll to kvbridge waits (wait_ms); a poll
// answers as soon as one of its ids is ready, so this only bounds idle polls.
const kvPollWait = 2 * time.Second

// maxKVPolls bounds this VM's concurrent polls; ids that find no free poll
// join the next one (a poll returns within kvPollWait).
const maxKVPolls = 8

// kvWaiter is the root's side of the lmcache gate: it long-polls kvbridge
// (POST /v1/kv/wait) for the ids this VM's streams wait on, keeps each id's
// notification count in its entry, and resumes a stream once its count
// reaches the decoder's TP size. It never polls faster than the long poll;
// when kvbridge fails it backs off, and waiting streams follow on_kv_timeout.
//
// The counts live in this VM's memory, not in shared data: only the VM whose
// stream waits polls for its id and reads its count, and shared data has no
// delete, so a key per request would stay forever. A VM that traps loses its
// entries with its memory and leaves nothing behind (kvbridge expires its
// own ids).
type kvWaiter struct {
	r       *rootContext
	entries map[string]*kvEntry
	polls   int
	backoff time.Duration
	retryAt time.Time
}

type kvEntry struct {
	s       *stream
	polling bool
	// count is the KV-ready notifications kvbridge reported for the id.
	count int
	// complete: the notifications are in; only the prefill answer is
	// awaited, so the id is not polled again.
	complete bool
}

func newKVWaiter(r *rootContext) *kvWaiter {
	return &kvWaiter{r: r, entries: map[string]*kvEntry{}}
}

// add starts waiting for s's KV (s is the effective context).
func (w *kvWaiter) add(s *stream) {
	w.entries[s.lm.kvID] = &kvEntry{s: s}
	w.r.m.waitingGauge.Add(1)
	w.poll(time.Now(), s.id)
}

// remove stops waiting for s and forgets its count (idempotent).
func (w *kvWaiter) remove(s *stream) {
	e, ok := w.entries[s.lm.kvID]
	if !ok || e.s != s {
		return
	}
	delete(w.entries, s.lm.kvID)
	w.r.m.waitingGauge.Add(-1)
}

// ready reports whether s's count says the KV is complete.
func (w *kvWaiter) ready(s *stream) bool {
	e, ok := w.entries[s.lm.kvID]
	return ok && e.s == s && e.count >= s.lm.need
}

// maxIDsPerPoll keeps one poll well under kvbridge's limit of 4096 ids.
const maxIDsPerPoll = 1024

// poll sends long polls covering every id not covered by a poll in flight,
// up to maxIDsPerPoll ids each and maxKVPolls polls. current is the effective
// context to restore afterwards: polls are dispatched as the root, so their
// answers outlive any one stream.
func (w *kvWaiter) poll(now time.Time, current uint32) {
	for w.polls < maxKVPolls && !now.Before(w.retryAt) && w.pollOnce(now, current) {
	}
}

// pollOnce sends one poll; false when there was nothing to poll or it failed.
func (w *kvWaiter) pollOnce(now time.Time, current uint32) bool {
	body := make([]byte, 0, 64+96*min(len(w.entries), maxIDsPerPoll))
	body = append(body, `{"wait_ms":`...)
	body = strconv.AppendInt(body, int64(kvPollWait/time.Millisecond), 10)
	// one slice of the stream's wait: kvbridge counts its end as pending, not
	// timeout (the filter's own kv_wait.timeout counts real timeouts)
	body = append(body, `,"slice":true,"ids":[`...)
	var ids []string
	for id, e := range w.entries {
		if e.polling || e.complete || e.s.lm.decoding {
			continue
		}
		if len(ids) == maxIDsPerPoll {
			break
		}
		if len(ids) > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"req_id":`...)
		body = gjson.AppendJSONString(body, id)
		body = append(body, `,"count":`...)
		body = strconv.AppendInt(body, int64(e.s.lm.need), 10)
		body = append(body, '}')
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return false
	}
	body = append(body, "]}"...)
	headers := [][2]string{{":method", "POST"}, {":path", "/v1/kv/wait"}, {":authority", "kvbridge"},
		{"content-type", "application/json"}}
	sent := false
	w.r.asRoot(current, func() {
		_, err := abi.DispatchHttpCall(w.r.cfg.LMCache.KVBridgeCluster, headers, body, nil,
			uint32((kvPollWait+2*time.Second)/time.Millisecond),
			func(numHeaders, bodySize, _ int) { w.onPoll(ids, readCallAnswer(numHeaders, bodySize)) })
		if err != nil {
			w.r.m.kvPollErrors.Increment(1)
			w.fail(now, fmt.Sprintf("dispatch to cluster %s: %v", w.r.cfg.LMCache.KVBridgeCluster, err))
			return
		}
		w.polls++
		for _, id := range ids {
			w.entries[id].polling = true
		}
		sent = true
	})
	return sent
}

// onPoll handles kvbridge's answer (root as effective context).
func (w *kvWaiter) onPoll(ids []string, a callAnswer) {
	w.polls--
	for _, id := range ids {
		if e, ok := w.entries[id]; ok {
			e.polling = false
		}
	}
	now := time.Now()
	if a.status != 200 {
		w.r.m.kvPollErrors.Increment(1)
		w.fail(now, fmt.Sprintf("kvbridge answered %d", a.status))
		return
	}
	w.backoff = 0
	gjson.GetBytes(a.body, "ready").ForEach(func(_, v gjson.Result) bool {
		id, count := v.Get("req_id").String(), v.Get("count").Int()
		e, ok := w.entries[id]
		if !ok || count <= 0 {
			return true // a stream that ended meanwhile
		}
		e.count = int(min(count, 1<<31))
		if w.ready(e.s) {
			e.complete = true
			w.r.asStream(e.s, e.s.onKVReady)
		}
		return true
	})
	w.poll(now, w.r.id)
}

// fail backs off after a kvbridge failure: 100 ms doubling to 2 s.
func (w *kvWaiter) fail(now time.Time, why string) {
	w.backoff = min(max(2*w.backoff, 100*time.Millisecond), 2*time.Second)
	w.retryAt = now.Add(w.backoff)
	abi.LogWarnf("pdroute: kvbridge long poll failed (%s); retrying in %s", why, w.backoff)
}

// tick applies on_kv_timeout to streams whose KV is late and resumes
// polling after a back-off (root as effective context).
func (w *kvWaiter) tick(now time.Time) {
	for _, e := range w.entries {
		if s := e.s; s.lm.answered && !s.lm.decoding && now.After(s.lm.deadline) {
			w.r.asStream(s, s.onKVTimeout)
		}
	}
	w.poll(now, w.r.id)
}

// asRoot runs fn with the root as effective context (http calls dispatched
// in fn then belong to the root), then restores current.
func (r *rootContext) asRoot(current uint32, fn func()) {
	if current != r.id {
		_ = abi.SetEffectiveContext(r.id)
		defer func() { _ = abi.SetEffectiveContext(current) }()
	}
	fn()
}

// asStream runs fn with s as effective context, then returns to the root.
func (r *rootContext) asStream(s *stream, fn func()) {
	if err := abi.SetEffectiveContext(s.id); err != nil {
		abi.LogDebugf("pdroute: stream %d gone: %v", s.id, err)
		return
	}
	defer func() { _ = abi.SetEffectiveContext(r.id) }()
	fn()
}
