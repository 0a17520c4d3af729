// Package connector builds the bodies pdroute sends to engines, one file per
// mode (nixl, orchestrated, lmcache, sglang) with shared helpers apart: the
// sanitised client request, the prefill and decode bodies, what is read back
// from a prefill answer, and the request id both legs carry.
//
// Bodies can be 500 KB (128k-token prompts), so nothing here unmarshals a
// body: Object indexes top-level members by offset and edits copy untouched
// members byte for byte; values the engines hand back (kv_transfer_params,
// token ids) are spliced in as the raw bytes received.
//
// It is pure Go compiled into the wasm filter: stdlib, gjson and the sibling
// config package only; no proxy-wasm import, no goroutines, timers or
// randomness of its own (the caller passes random bytes and room numbers).
package connector

import (
	"slices"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/tokenest"
)

// controlFields are fields that steer engines to each other. A client must
// never set them: they would make a decoder pull KV from, or an engine
// connect to, a host of the client's choosing. Beyond the PD fields of vLLM
// and LMCache (kv_transfer_params, disagg_spec) and SGLang (bootstrap_*),
// this drops SGLang's newer bootstrap_pair_key (pairs a request with another
// one's KV) and disagg_prefill_resp (orchestrated mode's own field).
var controlFields = []string{
	"kv_transfer_params", "disagg_spec",
	"bootstrap_host", "bootstrap_port", "bootstrap_room", "bootstrap_pair_key",
	"disagg_prefill_resp",
}

// Request is a handled client request ready for the connectors: its API and
// its body indexed with the client's control fields removed.
type Request struct {
	// API is the shape of the body, from the request path.
	API config.API
	// Body is the sanitised body; it aliases the bytes given to NewRequest.
	Body Object
	// Removed reports whether sanitising removed anything (a metric, and a
	// sign of a client probing the proxy).
	Removed bool
}

// NewRequest indexes and sanitises a client body. Errors are ParseObject's;
// the plugin answers them with 400. body must not change while the Request
// is in use.
func NewRequest(api config.API, body []byte) (Request, error) {
	o, err := ParseObject(body)
	if err != nil {
		return Request{}, err
	}
	o, removed := o.Without(controlFields...)
	return Request{API: api, Body: o, Removed: removed}, nil
}

// NewValidatedRequest is NewRequest for a body the caller has already
// validated as one JSON object (tokenest.Estimate guarantees that whenever it
// does not return tokenest.ErrNotJSON): it indexes and sanitises without a
// second validation pass over a body that may be half a megabyte. The
// structural errors it still finds (ErrNotObject, ErrTooDeep) are
// NewRequest's.
func NewValidatedRequest(api config.API, body []byte) (Request, error) {
	o, err := scanObject(body)
	if err != nil {
		return Request{}, err
	}
	o, removed := o.Without(controlFields...)
	return Request{API: api, Body: o, Removed: removed}, nil
}

// NewIndexedRequest is NewValidatedRequest from the index tokenest made of
// the body while it estimated it (tokenest.EstimateNear): the body is read
// once, by the estimator, for the estimate, the sanitising and the edits.
// An index that is not Complete (the estimate failed on bad JSON) falls back
// to NewValidatedRequest's own scan.
func NewIndexedRequest(api config.API, body []byte, x *tokenest.Index) (Request, error) {
	return NewIndexedRequestIn(api, body, x, nil)
}

// Room is memory a caller keeps for the member lists of the Requests it
// indexes (NewIndexedRequestIn), so that indexing a body allocates nothing
// once the room has grown to its members. The zero Room is ready to use.
type Room struct{ members []member }

// NewIndexedRequestIn is NewIndexedRequest listing the members in room
// (nil: a fresh allocation). The Request then lives until room's next use:
// whatever outlives it is Detached.
func NewIndexedRequestIn(api config.API, body []byte, x *tokenest.Index, room *Room) (Request, error) {
	if !x.Complete() {
		return NewValidatedRequest(api, body)
	}
	var dst []member
	if room != nil {
		dst = room.members[:0]
	}
	// indexedObject and Without(controlFields...) in one pass
	o := Object{src: body, close: x.Close, members: slices.Grow(dst, len(x.Members))}
	removed := false
	for _, m := range x.Members {
		key := decodeKey(body[m.Start:m.KeyEnd])
		control := isControlField(key)
		removed = removed || control
		o.members = append(o.members, member{start: m.Start, keyEnd: m.KeyEnd, val: m.Val, end: m.End, key: key, removed: control})
	}
	if room != nil {
		room.members = o.members[:0]
	}
	return Request{API: api, Body: o, Removed: removed}, nil
}

// isControlField reports whether key is one of controlFields.
func isControlField(key string) bool {
	switch key {
	case "kv_transfer_params", "disagg_spec",
		"bootstrap_host", "bootstrap_port", "bootstrap_room", "bootstrap_pair_key",
		"disagg_prefill_resp":
		return true
	}
	return false
}

// Detach returns r without the body's bytes: the members' offsets, and a
// hash of the bytes they point at (the keys, each value's first byte, the
// closing brace), so that a stream paused for a prefill holds no copy of a
// body the proxy holds anyway. Rebind puts the bytes back.
func (r Request) Detach() Request { return r.DetachIn(nil) }

// DetachIn is Detach listing the members in room (nil: a fresh
// allocation), which must not be the room r was indexed in. The Detached
// Request then lives until room's next use.
func (r Request) DetachIn(room *Room) Request {
	o := r.Body
	if room != nil {
		o.members = append(room.members[:0], o.members...)
		room.members = o.members[:0]
	} else {
		o.members = slices.Clone(o.members)
	}
	o.head = o.decodeHead()
	o.srcLen, o.sum, o.headSum = len(o.src), o.checksum(o.src, len(o.members), true), o.checksum(o.src, o.headMembers(), false)
	for i := range o.members {
		o.members[i].key = "" // it aliases the bytes
	}
	o.src = nil
	r.Body = o
	return r
}

// decodeKeys are the members the nixl and orchestrated decode edits set
// (NIXLDecode, OrchestratedDecode). Both are control fields, so a client's
// are removed, never kept.
var decodeKeys = [...]string{"kv_transfer_params", "disagg_prefill_resp"}

// DecodeHead is how many leading bytes of the body a Detached r needs
// for the nixl and orchestrated decode edits: up to the end of the last
// member they set or sanitising removed (0 when there is none: the edit
// only adds members). RebindHead takes those bytes alone.
func (r Request) DecodeHead() int { return r.Body.head }

// RebindHead is Rebind for the nixl and orchestrated decode edits only:
// head is the first DecodeHead() bytes of the body, and the Request it
// returns serves NIXLDecode and OrchestratedDecode, which read nothing
// beyond them (any other use may panic). False when head is not the head
// r was indexed from. It writes the keys into r's own member list, which
// it does not copy: r stays Detached (Rebind and RebindHead read no key),
// but its keys then alias head until the next rebinding.
func (r Request) RebindHead(head []byte) (Request, bool) {
	o := r.Body
	if o.src != nil || o.srcLen == 0 || len(head) != o.head || o.checksum(head, o.headMembers(), false) != o.headSum {
		return Request{}, false
	}
	o.src = head
	for i := range o.members[:o.headMembers()] {
		m := &o.members[i]
		m.key = decodeKey(head[m.start:m.keyEnd])
	}
	r.Body = o
	return r, true
}

// Rebind returns a Detached r over body, the body read again from the
// proxy's buffer: the members keep their offsets, and the body is not
// scanned again. False when body is not the one r was indexed from (its
// length, or the bytes at the offsets, differ); the caller then indexes it
// anew.
func (r Request) Rebind(body []byte) (Request, bool) {
	o := r.Body
	if o.src != nil || o.srcLen == 0 || len(body) != o.srcLen || o.close >= len(body) || o.checksum(body, len(o.members), true) != o.sum {
		return Request{}, false
	}
	o.src = body
	o.members = slices.Clone(o.members)
	for i := range o.members {
		m := &o.members[i]
		m.key = decodeKey(body[m.start:m.keyEnd])
	}
	r.Body = o
	return r, true
}

// Direct is the edit that turns the client's body into the one a decoder
// receives when the request is not disaggregated (below the threshold, or
// a prefill fallback): the sanitised client body. A zero BodyEdit when
// nothing was removed.
func (r Request) Direct() BodyEdit {
	if !r.Removed {
		return BodyEdit{} // Rewrite's answer without its pass
	}
	return r.Body.Rewrite()
}

// maxTokensField is the request field that caps output tokens for r's API.
func (r Request) maxTokensField() string {
	if r.API == config.APIResponses {
		return "max_output_tokens"
	}
	return "max_tokens"
}
