package connector

import (
	"github.com/pdroute/pdroute/filter/config"
	"github.com/tidwall/gjson"
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
	o, err := ParseObject(body)
	if err != nil {
		return PrefillAnswer{}, err
	}
	var a PrefillAnswer
	kv := o.Raw("kv_transfer_params")
	switch {
	case kv == nil:
		a.KV = KVAbsent
	case kv[0] == 'n':
		a.KV = KVNull
	case kv[0] != '{':
		a.KV = KVNotObject
	default:
		params, _ := ParseObject(kv) // validated with the answer
		if params.Len() == 0 {
			a.KV = KVEmpty
			break
		}
		a.KV, a.KVParams = KVPresent, kv
		if t := params.Get("first_tok"); t.Type == gjson.Number && isUint([]byte(t.Raw)) {
			a.First.OK, a.First.Token = true, t.Int()
		}
	}
	a.First.Text = emptyString
	eachElem(o.Raw("choices"), func(c []byte) bool {
		choice, err := scanObject(c)
		if err != nil {
			return false
		}
		if t := choice.Raw("text"); t != nil && t[0] == '"' {
			a.First.Text = t
		}
		if f := choice.Get("finish_reason"); f.Type == gjson.String {
			a.First.FinishReason = f.Str
		}
		return false // the first choice only
	})
	a.First.ID = stringRaw(o, "id")
	a.First.Model = stringRaw(o, "model")
	if c := o.Get("created"); c.Type == gjson.Number {
		a.First.Created = c.Int()
	}
	return a, nil
}

// stringRaw is the raw JSON string value of key, or nil when it is not a string.
func stringRaw(o Object, key string) []byte {
	if v := o.Raw(key); v != nil && v[0] == '"' {
		return v
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
