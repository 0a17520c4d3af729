package connector

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/filter/config"
)

// ErrInvalid matches every error of CheckDecode (errors.Is): the decode leg
// would certainly answer 400. The error's text is the message for the
// client, in the engine's words where it has some.
var ErrInvalid = errors.New("invalid request")

type invalidError string

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

// CheckDecode finds what the decode engine will certainly refuse in a request
// about to be disaggregated, so that the filter refuses it before a prefill
// runs for nothing: the prefill leg rewrites stream, the token limits and
// stream_options, so the prefill accepts what the decoder then rejects, and
// in nixl mode the prefiller keeps the KV blocks until their lease expires.
//
// It judges only the types and ranges the engines' request models
// (pydantic, in lax mode, as vLLM and SGLang use it) reject whatever the
// model and the server's flags: stream a boolean, the token limits
// (max_tokens, max_completion_tokens, max_output_tokens, min_tokens)
// integers, a limit of at least 1 (vLLM's SamplingParams; SGLang accepts 0),
// min_tokens at least 0 and at most max_tokens, stream_options only with
// stream (vLLM). Lax mode takes "true"/"yes"/1 for a boolean and 5.0 or "5"
// for an integer, so these pass. Limits an engine's configuration sets
// (max_model_len and the like) are the engine's to judge.
func CheckDecode(mode config.Mode, r Request) error {
	if plainDecode(mode, r.Body) {
		return nil
	}
	return checkDecode(mode, r)
}

// plainDecode is CheckDecode's verdict on the usual request, read from the
// raw values in one pass over the members: true when every field it judges
// is absent or plainly valid (stream a JSON boolean or null, the limits
// null or decimal integers in range, stream_options only beside
// "stream":true). Anything else — lax spellings, errors — goes to
// checkDecode, which decides and words the error. A request pays for gjson
// and strconv only when it needs them.
func plainDecode(mode config.Mode, o Object) bool {
	var stream, streamOptions, minTokens []byte
	var limits [3][]byte
	for _, m := range o.members {
		if m.removed {
			continue
		}
		v := o.src[m.val:m.end]
		switch m.key { // the last of repeated keys counts, as Get reads
		case "stream":
			stream = v
		case "max_tokens":
			limits[0] = v
		case "max_completion_tokens":
			limits[1] = v
		case "max_output_tokens":
			limits[2] = v
		case "min_tokens":
			minTokens = v
		case "stream_options":
			streamOptions = v
		}
	}
	switch string(stream) {
	case "", "true", "false", "null":
	default:
		return false
	}
	minLimit := int64(1)
	if mode == config.ModeSGLang {
		minLimit = 0
	}
	limit := int64(-1)
	for _, v := range limits {
		n, ok, plain := plainInt(v)
		switch {
		case !plain || ok && n < minLimit:
			return false
		case ok && (limit < 0 || n < limit):
			limit = n
		}
	}
	n, ok, plain := plainInt(minTokens)
	if !plain || ok && (n < 0 || limit >= 0 && n > limit) {
		return false
	}
	if mode != config.ModeSGLang && len(streamOptions) > 0 && streamOptions[0] == '{' && string(stream) != "true" {
		return false // maybe empty, maybe not: checkDecode reads it
	}
	return true
}

// plainInt reads a raw JSON value that is absent or null (ok false) or a
// decimal integer of at most 18 digits (ok true, n its value); plain is
// false for anything else.
func plainInt(v []byte) (n int64, ok, plain bool) {
	if len(v) == 0 || string(v) == "null" {
		return 0, false, true
	}
	d := v
	if d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		return 0, false, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		n = n*10 + int64(c-'0')
	}
	if v[0] == '-' {
		n = -n
	}
	return n, true, true
}

// checkDecode is CheckDecode reading each field with gjson, as pydantic's
// lax mode would: the reference, and the path of every request
// plainDecode does not pass.
func checkDecode(mode config.Mode, r Request) error {
	if err := checkBool(r.Body.Get("stream"), "stream"); err != nil {
		return err
	}
	minLimit := int64(1)
	if mode == config.ModeSGLang {
		minLimit = 0
	}
	limit := int64(-1)
	for _, f := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		n, ok, err := laxInt(r.Body.Get(f), f)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if n < minLimit {
			return invalid("%s must be at least %d, got %d.", f, minLimit, n)
		}
		if limit < 0 || n < limit {
			limit = n
		}
	}
	minTokens, ok, err := laxInt(r.Body.Get("min_tokens"), "min_tokens")
	if err != nil {
		return err
	}
	if ok && minTokens < 0 {
		return invalid("min_tokens must be greater than or equal to 0, got %d.", minTokens)
	}
	if ok && limit >= 0 && minTokens > limit {
		return invalid("min_tokens must be less than or equal to max_tokens=%d, got %d.", limit, minTokens)
	}
	if mode != config.ModeSGLang {
		// vLLM's model validator reads the raw values: a non-empty
		// stream_options with stream missing, null or false.
		if so := r.Body.Get("stream_options"); so.IsObject() && len(so.Map()) > 0 {
			if st := r.Body.Get("stream"); !st.Exists() || st.Type == gjson.Null || st.Type == gjson.False {
				return invalid("Stream options can only be defined when `stream=True`.")
			}
		}
	}
	return nil
}

// laxBools are the strings pydantic's lax mode reads as a boolean.
var laxBools = []string{"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}

// checkBool accepts what pydantic's lax mode reads as a boolean (or null,
// for the engines' Optional fields).
func checkBool(v gjson.Result, name string) error {
	switch v.Type {
	case gjson.Null, gjson.True, gjson.False:
		return nil
	case gjson.Number:
		if v.Num == 0 || v.Num == 1 {
			return nil
		}
	case gjson.String:
		s := strings.ToLower(v.Str)
		for _, b := range laxBools {
			if s == b {
				return nil
			}
		}
	}
	return invalid("%s: Input should be a valid boolean, got %s", name, clip(v.Raw))
}

// laxInt reads what pydantic's lax mode reads as an integer: an integer, a
// number without a fraction, a string holding one, or a boolean. ok is
// false when the field is absent or null.
func laxInt(v gjson.Result, name string) (n int64, ok bool, err error) {
	switch v.Type {
	case gjson.Null:
		return 0, false, nil
	case gjson.True:
		return 1, true, nil
	case gjson.False:
		return 0, true, nil
	case gjson.Number:
		if n, err := strconv.ParseInt(v.Raw, 10, 64); err == nil {
			return n, true, nil
		}
		if v.Num == math.Trunc(v.Num) && !math.IsInf(v.Num, 0) {
			return clampInt(v.Num), true, nil
		}
	case gjson.String:
		s := strings.TrimSpace(v.Str)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, true, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && !math.IsInf(f, 0) {
			return clampInt(f), true, nil
		}
	}
	return 0, false, invalid("%s: Input should be a valid integer, got %s", name, clip(v.Raw))
}

func clampInt(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// clip shortens a raw JSON value for an error message.
func clip(raw string) string {
	if len(raw) > 40 {
		return raw[:40] + "…"
	}
	return raw
}
