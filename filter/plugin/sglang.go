package plugin

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/filter/sse"
)

// sglang mode (PROTOCOLS §4): the same body, with bootstrap_host/port/room,
// goes to the prefiller (proxy_http_call) and — in the same callback — on to
// the decoder, which fetches the KV from the prefiller's bootstrap server
// itself. A prefill failure is never silent: the decoder would wait for its
// room until the engine's own timeout (300 s), so the client gets a 502 at
// once, or, when the answer is already streaming, a terminal error event.

// sglangStream is an sglang request's state after both legs left.
type sglangStream struct {
	// room is the (first) bootstrap_room, for logs and errors.
	room uint64
	// prefillDone / prefillFailed: the prefill leg's outcome is known.
	prefillDone, prefillFailed bool
	// heldHeaders: the decoder's response headers wait (paused) for the
	// prefill outcome or the first body bytes, whichever comes first, so a
	// prefill failure can still become a clean 502.
	heldHeaders bool
	// failure is the error to end an already streaming answer with.
	failure   apierr.Kind
	detail    string
	terminate bool // append the error event at the next body chunk
	ended     bool // the error event went out; drop the rest
}

func (s *stream) startSGLang(req connector.Request, body []byte) types.Action {
	rooms := newRoomSource()
	edit, err := connector.SGLang(req, s.prefillEP, rooms.next)
	if err != nil {
		s.reportPrefill(config.PrefillOK, time.Now()) // the prefiller was never asked
		s.fail(apierr.MalformedJSON, err.Error())
		return types.ActionPause
	}
	s.sg = &sglangStream{room: rooms.first & (1<<63 - 1)}
	s.prefillStart = time.Now()
	if err := s.dispatch(s.prefillEP, "POST", s.path, edit.Apply(body), s.cfg().PrefillTimeout, nil, (*stream).onSGLangAnswer); err != nil {
		abi.LogErrorf("pdroute: stream %d: dispatch sglang prefill to %s (bootstrap_room %d): %v", s.id, s.prefillEP.Name, s.sg.room, err)
		s.reportPrefill(config.PrefillReset, time.Now())
		s.sg = nil
		s.fail(s.cfg().OnPrefill(config.PrefillReset).Error, err.Error())
		return types.ActionPause
	}
	s.toDecoder(edit, pathDisagg)
	return types.ActionContinue
}

func (s *stream) onSGLangAnswer(a callAnswer) {
	now := time.Now()
	o := s.prefillOutcome(a, true, now)
	s.reportPrefill(o, now)
	sg := s.sg
	if o == config.PrefillOK {
		sg.prefillDone = true
		if sg.heldHeaders {
			sg.heldHeaders = false
			s.responseStarted = true
			if err := abi.ResumeHttpResponse(); err != nil {
				abi.LogErrorf("pdroute: stream %d: resume response: %v", s.id, err)
			}
		}
		return
	}
	sg.prefillFailed = true
	act := s.cfg().OnPrefill(o) // always Fail in sglang mode
	detail := fmt.Sprintf("%s (bootstrap_room %d)", config.DescribePrefillFailure(o, a.status, a.body, s.cfg().PrefillTimeout), sg.room)
	abi.LogWarnf("pdroute: stream %d (request %s): sglang prefill on %s failed: %s", s.id, s.reqID, s.prefillEP.Name, detail)
	if !s.responseStarted {
		// Nothing reached the client yet: answer now instead of letting
		// the decoder wait for a room that will never be filled.
		s.fail(act.Error, detail)
		return
	}
	sg.failure, sg.detail, sg.terminate = act.Error, detail, true
}

func (s *stream) sglangResponseHeaders(endOfStream bool) types.Action {
	sg := s.sg
	if sg.prefillDone || endOfStream {
		s.responseStarted = true
		return types.ActionContinue
	}
	sg.heldHeaders = true
	return types.ActionPause // StopIteration: body callbacks still come
}

func (s *stream) sglangResponseBody(bodySize int, endOfStream bool) types.Action {
	sg := s.sg
	if sg.heldHeaders {
		// The decoder produces output, so it has its KV: let the answer go.
		sg.heldHeaders = false
		s.responseStarted = true
	}
	switch {
	case sg.ended:
		s.replaceResponseBody(nil)
		if err := abi.CloseHttpResponse(); err != nil {
			abi.LogDebugf("pdroute: stream %d: close response: %v", s.id, err)
		}
	case sg.terminate:
		chunk, _ := abi.GetHttpResponseBody(0, bodySize)
		s.replaceResponseBody(sse.AppendError(chunk, sg.failure, sg.detail))
		sg.ended = true
	}
	return types.ActionContinue
}

// roomSource draws bootstrap rooms from the host's randomness
// (abi.RandomBytes: WASI random_get), eight at a time.
type roomSource struct {
	buf   [64]byte
	n     int
	first uint64
	used  bool
}

func newRoomSource() *roomSource { return &roomSource{n: 64} }

func (r *roomSource) next() uint64 {
	if r.n == len(r.buf) {
		_ = abi.RandomBytes(r.buf[:])
		r.n = 0
	}
	v := binary.LittleEndian.Uint64(r.buf[r.n:])
	r.n += 8
	if !r.used {
		r.first, r.used = v, true
	}
	return v
}
