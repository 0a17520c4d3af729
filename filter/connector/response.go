package connector

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/tokenest"
)

// KVStatus says what a prefill answer's kv_transfer_params held.
type KVStatus uint8

// The states of kv_transfer_params in a prefill answer.
const (
	KVAbsent    KVStatus = iota // no such field
	KVNull                      // null: the engine did not keep blocks
	KVNotObject                 // a string, number, list…
	KVEmpty                     // {}
	KVPresent                   // a non-empty object
)

var kvNames = [...]string{"absent", "null", "not_object", "empty", "present"}

// String is the status's metric label: absent, null, not_object, empty, present.
func (s KVStatus) String() string {
	if int(s) < len(kvNames) {
		return kvNames[s]
	}
	return "unknown"
}

// FirstToken is what an lmcache prefill answer says about the one token it
// generated.
type FirstToken struct {
	// OK reports that kv_transfer_params.first_tok is a non-negative integer.
	OK bool
	// Token is first_tok, appended to the decode prompt.
	Token int64
	// Text is choices[0].text as a raw JSON string literal (quotes and
	// escapes kept), `""` when absent: spliced into the client's first chunk.
	Text []byte
	// FinishReason is choices[0].finish_reason ("" when null).
	FinishReason string
	// ID and Model are the answer's id and model as raw JSON strings (nil
	// when absent).
	ID, Model []byte
	// Created is the answer's created time (Unix seconds; 0 when absent).
	Created int64
}

// PrefillAnswer is what the connectors read from a prefill answer.
type PrefillAnswer struct {
	// KVParams is the raw kv_transfer_params object, aliasing the answer
	// bytes; nil unless KV is KVPresent.
	KVParams []byte
	// KV classifies kv_transfer_params.
	KV KVStatus
	// First is the lmcache first token.
	First FirstToken
}

var emptyString = []byte(`""`)

// ParsePrefillAnswer reads a 2xx prefill answer body. It fails only when the
// body is not a JSON object; a missing or odd field shows in the result, and
// Usable says whether the mode can go on.
func ParsePrefillAnswer(body []byte) (PrefillAnswer, error) {
	return ParsePrefillAnswerIn(body, nil)
}

// ParsePrefillAnswerIn is ParsePrefillAnswer with x as its working index
// (overwritten; nil: its own): a caller that keeps one, as a filter root
// does, reads an answer without allocating. The answer is validated and
// its members found in one pass; the values read are sub-slices of body.
func ParsePrefillAnswerIn(body []byte, x *tokenest.Index) (PrefillAnswer, error) {
	if x == nil {
		x = new(tokenest.Index)
	}
	if err := indexObject(body, x); err != nil {
		return PrefillAnswer{}, err
	}
	// The last of repeated keys counts, as in every engine's parser.
	var kv, choices, id, model, created []byte
	for _, m := range x.Members {
		v := body[m.Val:m.End:m.End]
		switch memberKey(body[m.Start:m.KeyEnd]) {
		case "kv_transfer_params":
			kv = v
		case "choices":
			choices = v
		case "id":
			id = v
		case "model":
			model = v
		case "created":
			created = v
		}
	}
	var a PrefillAnswer
	if a.KV, a.KVParams = classifyKV(kv); a.KV == KVPresent {
		// Reading kv's members again costs as much as its bytes (8192
		// KV block ids at 128k tokens): only lmcache's answers hold a
		// first_tok, and only one holding its name, or an escape that
		// could spell it, is read.
		if mayHoldKey(kv, firstTokKey) && indexObject(kv, x) == nil {
			if t := lastMember(kv, x, "first_tok"); t != nil {
				if r := gjson.Parse(unsafeString(t)); r.Type == gjson.Number && isUint(t) {
					a.First.OK, a.First.Token = true, r.Int()
				}
			}
		}
	}
	a.First.Text = emptyString
	eachElem(choices, func(c []byte) bool {
		if indexObject(c, x) != nil {
			return false
		}
		if t := lastMember(c, x, "text"); t != nil && t[0] == '"' {
			a.First.Text = t
		}
		if f := lastMember(c, x, "finish_reason"); f != nil && f[0] == '"' {
			a.First.FinishReason = gjson.Parse(unsafeString(f)).Str
		}
		return false // the first choice only
	})
	a.First.ID = stringValue(id)
	a.First.Model = stringValue(model)
	if created != nil {
		if c := gjson.Parse(unsafeString(created)); c.Type == gjson.Number {
			a.First.Created = c.Int()
		}
	}
	return a, nil
}

// ParseNIXLAnswerIn is ParsePrefillAnswerIn reading only what the nixl and
// orchestrated modes use: KV and KVParams (First stays zero). It validates
// the answer as ParsePrefillAnswerIn does, and fails exactly when it fails,
// but reads none of the lmcache fields: a filter pays for what its mode
// needs on every request.
func ParseNIXLAnswerIn(body []byte, x *tokenest.Index) (PrefillAnswer, error) {
	if x == nil {
		x = new(tokenest.Index)
	}
	if err := indexObject(body, x); err != nil {
		return PrefillAnswer{}, err
	}
	var a PrefillAnswer
	a.KV, a.KVParams = classifyKV(lastMember(body, x, "kv_transfer_params"))
	return a, nil
}

// classifyKV classifies the raw kv_transfer_params value kv (nil when
// absent); params is kv when it is a non-empty object.
func classifyKV(kv []byte) (s KVStatus, params []byte) {
	switch {
	case kv == nil:
		return KVAbsent, nil
	case kv[0] == 'n':
		return KVNull, nil
	case kv[0] != '{':
		return KVNotObject, nil
	case kv[skipSpace(kv, 1)] == '}':
		return KVEmpty, nil
	}
	return KVPresent, kv
}

// indexObject is ParseObject into x: the top-level members of the JSON
// object b, or ParseObject's error. x is as Read leaves it, or filled from
// ParseObject's own scan when tokenest's reader refuses what gjson accepts.
func indexObject(b []byte, x *tokenest.Index) error {
	if x.Read(b) {
		return nil
	}
	o, err := scanParse(b)
	if err != nil {
		return err
	}
	x.Members = x.Members[:0]
	for _, m := range o.members {
		x.Members = append(x.Members, tokenest.Member{Start: m.start, KeyEnd: m.keyEnd, Val: m.val, End: m.end})
	}
	x.Close = o.close
	return nil
}

// memberKey is a raw (quoted) member key decoded, aliasing raw unless it
// has escapes.
func memberKey(raw []byte) string { return decodeKey(raw) }

// lastMember is the raw value of the last member named key of obj, which
// x indexes, or nil.
func lastMember(obj []byte, x *tokenest.Index, key string) []byte {
	for i := len(x.Members) - 1; i >= 0; i-- {
		if m := x.Members[i]; memberKey(obj[m.Start:m.KeyEnd]) == key {
			return obj[m.Val:m.End:m.End]
		}
	}
	return nil
}

// mayHoldKey reports whether the JSON text b may hold a member named key:
// its bytes, or a backslash (an escaped key may spell it otherwise).
func mayHoldKey(b, key []byte) bool {
	return bytes.Contains(b, key) || bytes.IndexByte(b, '\\') >= 0
}

var firstTokKey = []byte("first_tok")

// stringValue is raw when it is a JSON string, else nil.
func stringValue(raw []byte) []byte {
	if raw != nil && raw[0] == '"' {
		return raw
	}
	return nil
}

// Usable reports whether the answer lets mode m build its decode request:
// kv_transfer_params present (nixl, orchestrated) or first_tok present
// (lmcache). sglang reads nothing from the prefill answer.
func (a PrefillAnswer) Usable(m config.Mode) bool {
	switch m {
	case config.ModeLMCache:
		return a.First.OK
	case config.ModeSGLang:
		return true
	}
	return a.KV == KVPresent
}
