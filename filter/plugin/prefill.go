package plugin

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/lb"
)

// callAnswer is what an http call returned, read inside its callback (the
// only place Envoy serves it).
type callAnswer struct {
	// status is the HTTP status; 0 when the call was reset.
	status int
	// contentType is the answer's content-type ("" when none).
	contentType string
	body        []byte
}

// readCallAnswer reads the answer of the http call whose callback runs now.
func readCallAnswer(numHeaders, bodySize int) callAnswer {
	return readCallAnswerInto(numHeaders, bodySize, nil)
}

// readCallAnswerInto is readCallAnswer reading the body into *buf's room
// (nil: a fresh allocation), and keeping the room grown for a longer one
// (up to maxKeptBody). The body is then valid only until the next read
// into *buf: the callback must not keep it.
func readCallAnswerInto(numHeaders, bodySize int, buf *[]byte) callAnswer {
	if numHeaders == 0 {
		return callAnswer{} // reset: proxy_get_status says 11 "reset"
	}
	var a callAnswer
	var contentType bool
	_ = abi.VisitHttpCallResponseHeaders(func(key, value []byte) {
		switch string(key) {
		case ":status":
			a.status = atoi(value) // the last, as before
		case "content-type":
			if !contentType {
				contentType, a.contentType = true, keepContentType(value)
			}
		}
	})
	switch {
	case bodySize <= 0:
	case buf == nil:
		a.body, _ = abi.GetHttpCallResponseBody(0, bodySize)
	default:
		a.body, _ = abi.GetHttpCallResponseBodyInto(*buf, 0, bodySize)
		if cap(a.body) > cap(*buf) && cap(a.body) <= maxKeptBody {
			*buf = a.body[:0]
		}
	}
	return a
}

// keepContentType is a copy of a content-type value, sparing the copy of
// the usual one.
func keepContentType(v []byte) string {
	if string(v) == "application/json" {
		return "application/json"
	}
	return string(v)
}

// dispatch sends an http call to endpoint e with the stream's request id
// and credentials. onAnswer runs later, with this stream as effective
// context. With answerBuf the answer's body is read into that kept buffer
// (readCallAnswerInto): onAnswer must not keep it. onAnswer is a method
// expression ((*stream).onNIXLAnswer), not a method value, and the
// callback is the stream's own onCall: a call allocates no closure.
func (s *stream) dispatch(e *config.Endpoint, method, path string, body []byte, timeout time.Duration,
	answerBuf *[]byte, onAnswer func(*stream, callAnswer)) error {
	cluster, dst := s.cfg().Upstream(e)
	headers := make([][2]string, 0, 8)
	headers = append(headers,
		[2]string{":method", method},
		[2]string{":path", path},
		[2]string{":authority", s.callAuthority(e)},
		[2]string{"x-request-id", s.reqID})
	if body != nil {
		headers = append(headers, [2]string{"content-type", "application/json"})
	}
	if s.authorization != "" {
		// Engines started with --api-key check it on both legs.
		headers = append(headers, [2]string{"authorization", s.authorization})
	}
	if dst != "" {
		headers = append(headers, [2]string{originalDstHeader, dst})
	}
	if s.onCall == nil {
		s.onCall = s.callAnswered
	}
	s.onAnswer, s.answerBuf = onAnswer, answerBuf
	_, err := abi.DispatchHttpCall(cluster, headers, body, nil, uint32(timeout/time.Millisecond), s.onCall)
	if err == nil {
		s.calls++
	}
	return err
}

// callAnswered is the callback of the stream's pending http call: the
// answer read (into the kept buffer dispatch was given), then onAnswer.
func (s *stream) callAnswered(numHeaders, bodySize, _ int) {
	s.calls--
	s.onAnswer(s, readCallAnswerInto(numHeaders, bodySize, s.answerBuf))
}

// callAuthority is the :authority of a call to e: the client's, so engines
// see the same host on both legs; the endpoint's name when there is none.
func (s *stream) callAuthority(e *config.Endpoint) string {
	if s.authority != "" {
		return s.authority
	}
	return e.Name
}

// startNIXL dispatches the nixl/orchestrated prefill: the client body asking
// for remote decode and one token, to the same path.
func (s *stream) startNIXL(req connector.Request, now time.Time) types.Action {
	body := connector.NIXLPrefillTo(s.r.prefillBody[:0], req)
	act := s.startPrefill(s.path, body, now, &s.r.answer, (*stream).onNIXLAnswer)
	if abi.CallBodyCopied && cap(body) <= maxKeptPrefillBody {
		// the host has its copy: the next prefill body is built here
		s.r.prefillBody = body[:0]
	}
	return act
}

// maxKeptPrefillBody bounds the prefill body buffer a root keeps between
// requests: building a long prompt's prefill body in a kept buffer spares
// a body-sized allocation, its clearing and the collections it brings on
// (wasm memory never shrinks, so the buffer costs nothing more once the
// VM has grown to hold one); longer bodies are not kept.
const maxKeptPrefillBody = 1 << 20

// startPrefill dispatches a prefill body and keeps the request paused until
// onAnswer runs. A call Envoy refuses at once counts as a reset. now is
// the body callback's clock reading (one per callback: each is a host call).
func (s *stream) startPrefill(path string, body []byte, now time.Time, answerBuf *[]byte, onAnswer func(*stream, callAnswer)) types.Action {
	s.prefillStart = now
	if err := s.dispatch(s.prefillEP, "POST", path, body, s.cfg().PrefillTimeout, answerBuf, onAnswer); err != nil {
		abi.LogErrorf("pdroute: stream %d: dispatch prefill to %s: %v", s.id, s.prefillEP.Name, err)
		s.reportPrefill(config.PrefillReset, time.Now())
		if s.afterPrefillFailure(config.PrefillReset, err.Error()) {
			return types.ActionContinue
		}
	}
	return types.ActionPause
}

// prefillOutcome classifies a prefill answer, telling Envoy's own reset and
// timeout answers from the engine's (config.ClassifyPrefillAnswer). now is
// the answer callback's clock reading.
func (s *stream) prefillOutcome(a callAnswer, usable bool, now time.Time) config.PrefillOutcome {
	elapsed := now.Sub(s.prefillStart)
	s.r.m.prefillLatency.Record(uint64(elapsed / time.Millisecond))
	return config.ClassifyPrefillAnswer(a.status, a.body, usable, elapsed, s.cfg().PrefillTimeout)
}

// reportPrefill feeds passive health and releases the prefill lease: the
// prefiller's work is over once it answered (or failed).
func (s *stream) reportPrefill(o config.PrefillOutcome, now time.Time) {
	if s.prefill == nil {
		return
	}
	result := lb.Success
	switch o {
	case config.PrefillServerError, config.PrefillReset, config.PrefillTimeout:
		result = lb.Failure
	}
	_ = s.prefill.Report(now, result)
	s.prefill.Release(now)
	if o != config.PrefillOK {
		s.r.m.prefillFailures[o].Increment(1)
	}
}

// onNIXLAnswer builds the decode request from the prefill answer. The
// answer lies in the root's answer buffer: everything built from it is
// copied before the callback returns (the decode edit, the host's copies
// of replies and logs).
func (s *stream) onNIXLAnswer(a callAnswer) {
	var ans connector.PrefillAnswer
	usable := false
	if a.status >= 200 && a.status < 300 {
		if p, err := connector.ParseNIXLAnswerIn(a.body, &s.r.index); err == nil {
			ans, usable = p, p.Usable(s.cfg().Mode)
		}
	}
	now := time.Now()
	o := s.prefillOutcome(a, usable, now)
	s.reportPrefill(o, now)
	if o != config.PrefillOK {
		s.onPrefillFailed(o, a)
		return
	}
	if s.cfg().Mode != config.ModeOrchestrated {
		// the usual body: the edit from the offsets, nothing read back
		if edit, ok := connector.NIXLDecodeDetached(s.r.edit, s.indexed, ans.KVParams); ok {
			s.keepEdit(edit)
			s.toDecoder(edit, pathDisagg)
			s.resume()
			return
		}
	}
	req, ok := s.rereadHead()
	if !ok {
		return
	}
	var edit connector.BodyEdit
	if s.cfg().Mode == config.ModeOrchestrated {
		var attach []byte
		if s.cfg().Orchestrated.AttachPrefillResponse {
			attach = a.body
		}
		var err error
		if edit, err = connector.OrchestratedDecode(req, ans.KVParams, s.prefillEP, attach); err != nil {
			s.onPrefillFailed(config.PrefillBadAnswer, a)
			return
		}
	} else {
		edit = connector.NIXLDecodeTo(s.r.edit, req, ans.KVParams)
		s.keepEdit(edit)
	}
	s.toDecoder(edit, pathDisagg)
	s.resume()
}

// keepEdit keeps the room of an edit built in the root's edit buffer,
// which toDecoder applies (the host copies it) before the buffer's next use.
func (s *stream) keepEdit(edit connector.BodyEdit) {
	if cap(edit.Prefix) <= maxKeptBody {
		s.r.edit = edit.Prefix[:0]
	}
}

// onPrefillFailed follows the failure policy from inside the prefill
// callback: relay the engine's 4xx, fall back to the decoder, or fail.
func (s *stream) onPrefillFailed(o config.PrefillOutcome, a callAnswer) {
	if o == config.PrefillRejected {
		ct := a.contentType
		if ct == "" {
			ct = "application/json"
		}
		s.route = pathRelayed
		s.r.m.countRequest(pathRelayed)
		s.reply(a.status, [][2]string{{"content-type", ct}}, a.body)
		return
	}
	detail := config.DescribePrefillFailure(o, a.status, a.body, s.cfg().PrefillTimeout)
	if s.afterPrefillFailure(o, detail) {
		s.resume()
	}
}

// afterPrefillFailure applies on_prefill_failure to a failed prefill: true
// when the request goes on to the decoder (the caller continues or resumes
// it), false when the client got an error answer.
func (s *stream) afterPrefillFailure(o config.PrefillOutcome, detail string) bool {
	act := s.cfg().OnPrefill(o)
	abi.LogWarnf("pdroute: stream %d (request %s): prefill on %s failed: %s → %s", s.id, s.reqID, s.prefillName(), detail, act.Kind)
	if act.Kind != config.Fallback {
		s.fail(act.Error, detail)
		return false
	}
	req, ok := s.reread()
	if !ok {
		return false
	}
	s.toDecoder(req.Direct(), pathFallback)
	return true
}

func (s *stream) prefillName() string {
	if s.prefillEP == nil {
		return "(none)"
	}
	return s.prefillEP.Name
}

// rereadHead is reread for the nixl and orchestrated decode edits, which
// read only the body's first members (connector.Request.DecodeHead): only
// those bytes come back into the VM, often none at all. It falls back to
// reread.
func (s *stream) rereadHead() (connector.Request, bool) {
	var head []byte
	if n := s.indexed.DecodeHead(); n > 0 && n < s.bodyLen {
		var err error
		if head, err = s.r.readBody(0, n); err != nil {
			return s.reread()
		}
	}
	if req, ok := s.indexed.RebindHead(head); ok {
		return req, true
	}
	return s.reread()
}

// reread reads the paused request's body back from Envoy's buffer: the
// stream does not keep it in the wasm heap while the prefill runs. It is the
// body decideBody validated and indexed: its members are where they were
// (Rebind), unless something changed it, when it is indexed again.
func (s *stream) reread() (connector.Request, bool) {
	body, err := s.r.readBody(0, s.bodyLen)
	if err != nil {
		s.fail(apierr.Internal, "re-read request body: "+err.Error())
		return connector.Request{}, false
	}
	if req, ok := s.indexed.Rebind(body); ok {
		return req, true // the offsets found before the prefill
	}
	req, ok := s.index(body, nil)
	if ok {
		s.indexed = req.DetachIn(&s.detached) // for the next reread
	}
	return req, ok
}

// refuse answers a request the decode engine would certainly refuse
// (connector.CheckDecode) with the 400 that engine gives, before any prefill
// runs for it.
func (s *stream) refuse(err error) {
	engine := apierr.VLLM
	if s.cfg().Mode == config.ModeSGLang {
		engine = apierr.SGLang
	}
	status, body := apierr.EngineBadRequest(engine, err.Error())
	abi.LogDebugf("pdroute: stream %d (request %s): refused before the prefill: %v", s.id, s.reqID, err)
	s.reply(status, [][2]string{{"content-type", "application/json"}}, body)
}
