// Package tokenest estimates how many input tokens an inference request
// carries, from its JSON body alone, fast enough to run on every request in
// the wasm filter: the routing decision (disaggregate prefill or not)
// compares this number with threshold_tokens.
//
// It knows the request shapes of /v1/completions, /v1/chat/completions,
// /v1/responses (OpenAI-compatible servers: vLLM, SGLang) and SGLang's
// /generate, and offers two methods: Chars4, the characters ÷ 4 rule of
// vllm-project/production-stack (kept so that thresholds carry over), and
// Default, a model of how byte-level BPE tokenizers cut text (see
// RATIONALE.md (token estimation) and the accuracy table in
// BENCHMARKS.md (token estimation)). PrefixKey gives the prefix_affinity balancer a
// hash of the prompt's beginning.
//
// The package is pure Go and allocation-free on the hot path: it imports
// only the standard library (gjson serves as a test oracle only), never a
// proxy-wasm package or a tokenizer vocabulary, and starts no goroutines.
// Bodies are read in place: nothing is unmarshalled or copied, and Estimate
// validates the JSON while it counts (see its documentation), so the
// filter needs no separate validation pass.
package tokenest

import (
	"errors"
	"fmt"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// Method selects how text is turned into tokens.
type Method uint8

const (
	// Default models a byte-level BPE tokenizer (calibrated on cl100k_base):
	// it replays the tokenizer's pre-tokenizer and prices each piece by
	// script, shape and length, and adds chat-template overhead, tool
	// definitions and media. It is the default because chars ÷ 4 is off by
	// half or more outside English prose (CJK, Cyrillic, JSON).
	Default Method = iota
	// Chars4 is exactly production-stack PR #890's estimate: characters of
	// string prompts and of chat text parts ÷ 4, token-id prompts by length.
	// Use it to keep a threshold tuned for that router.
	Chars4
)

// String returns the method's configuration name: "default" or "chars4".
func (m Method) String() string {
	switch m {
	case Default:
		return "default"
	case Chars4:
		return "chars4"
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// ParseMethod maps a configuration name to a Method.
func ParseMethod(s string) (Method, error) {
	switch s {
	case "default":
		return Default, nil
	case "chars4":
		return Chars4, nil
	}
	return 0, fmt.Errorf("tokenest: unknown method %q (want default or chars4)", s)
}

// MarshalText encodes the method as its name.
func (m Method) MarshalText() ([]byte, error) {
	if m > Chars4 {
		return nil, fmt.Errorf("tokenest: invalid method %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText decodes a method name.
func (m *Method) UnmarshalText(b []byte) error {
	v, err := ParseMethod(string(b))
	if err == nil {
		*m = v
	}
	return err
}

// Breakdown says where an estimate's tokens come from. The fields add up to
// Result.Tokens.
type Breakdown struct {
	Text       int `json:"text"`        // prompt strings, message content, instructions, names
	TokenIDs   int `json:"token_ids"`   // token-id prompts, counted exactly
	Images     int `json:"images"`      // image parts (ImageTokens each, ImageTokensLow for detail "low")
	Audio      int `json:"audio"`       // audio parts, by duration (AudioTokensPerSecond)
	OtherMedia int `json:"other_media"` // video, files and unknown parts (OtherMediaTokens each)
	Tools      int `json:"tools"`       // tool definitions and the calls in assistant messages
	Overhead   int `json:"overhead"`    // chat-template tokens around messages, tools and the reply
}

// Total returns the sum of the fields.
func (b Breakdown) Total() int {
	return b.Text + b.TokenIDs + b.Images + b.Audio + b.OtherMedia + b.Tools + b.Overhead
}

// Result is an estimate.
type Result struct {
	Tokens    int       `json:"tokens"`    // the estimate, ≥ 0
	Exact     bool      `json:"exact"`     // the whole input was token ids, so Tokens is a count
	Method    Method    `json:"method"`    // the method used
	Breakdown Breakdown `json:"breakdown"` // where Tokens come from
	// Sampled reports that EstimateNear read a long string, or the
	// shorter strings of a long body, in part and extrapolated (never for
	// Estimate).
	Sampled bool `json:"sampled,omitempty"`
}

// Errors. ErrUnsupportedPath means the filter asked about a path tokenest
// has no shape for (a configuration error, not the client's); every other
// error means the body is not a valid request of its path's shape, which the
// filter answers with 400. Use errors.Is / errors.As.
var (
	ErrUnsupportedPath = errors.New("tokenest: no request shape for this path")
	ErrNotJSON         = errors.New("tokenest: body is not a JSON object")
	ErrNoInput         = errors.New("tokenest: body has no input field for its path")
)

// FieldError reports an input field of the wrong type or shape.
type FieldError struct {
	Field  string // JSON path, e.g. "messages[2].content"
	Reason string // e.g. "want a string or an array of parts"
}

func (e *FieldError) Error() string { return "tokenest: " + e.Field + ": " + e.Reason }

func fieldErr(field, reason string) error { return &FieldError{Field: field, Reason: reason} }

func indexed(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }

// shape is a request format, chosen by path.
type shape uint8

const (
	completions shape = iota + 1
	chat
	responses
	generate
)

// shapeOf maps a request path (query string ignored) to its shape.
func shapeOf(path string) (shape, bool) {
	// a loop rather than strings.IndexAny: one function fewer per request
	for i := range len(path) {
		if path[i] == '?' || path[i] == '#' {
			path = path[:i]
			break
		}
	}
	switch path {
	case "/v1/completions":
		return completions, true
	case "/v1/chat/completions":
		return chat, true
	case "/v1/responses":
		return responses, true
	case "/generate":
		return generate, true
	}
	return 0, false
}

// Supported reports whether Estimate and PrefixKey know the path's shape:
// /v1/completions, /v1/chat/completions, /v1/responses or /generate (a
// query string is ignored).
func Supported(path string) bool {
	_, ok := shapeOf(path)
	return ok
}

// Estimate estimates the input tokens of a request body sent to path. It
// reads the body in place (the caller may reuse it afterwards), allocates
// nothing for a well-formed body, and never panics.
//
// Estimate also validates the body, in the same pass, so that a caller
// needs no other JSON check:
//   - nil error: body is exactly one JSON value (RFC 8259 syntax, white
//     space around it allowed, arrays and objects nested at most 512 deep;
//     strings are not checked to be valid UTF-8, as with gjson.Valid), its
//     top level is an object, and that object is a well-formed request of
//     path's shape (the input field present, every field tokenest reads of
//     the right type);
//   - ErrNoInput or a *FieldError: the same JSON guarantee (a single valid
//     JSON value whose top level is an object), but not a well-formed
//     request of the shape;
//   - ErrNotJSON: body is not such a JSON object: malformed, nested too
//     deep, trailing data, or a top level that is not an object;
//   - ErrUnsupportedPath or an invalid-method error: nothing was read.
//
// Repeated keys are valid JSON; where they matter, Estimate reads the last
// one, as Python's json (the engines') does, while gjson reads the first.
// A well-formed body is read once, front to back; a body with a repeated
// key or an error is then read a second time, in the shape's order, to
// settle which member wins and which error is reported.
func Estimate(body []byte, path string, m Method) (Result, error) {
	return estimate(body, path, m, nil, nil, nil)
}

// estimate is Estimate, with the tool definitions that cache holds (nil
// for none), reading long strings in part with sp (EstimateNear's; nil:
// read whole), and noting where the top-level members are in index (nil
// for none).
func estimate(body []byte, path string, m Method, cache *Cache, sp *spread, index *Index) (Result, error) {
	if m > Chars4 {
		return Result{}, fmt.Errorf("tokenest: invalid method %d", uint8(m))
	}
	sh, ok := shapeOf(path)
	if !ok {
		return Result{}, ErrUnsupportedPath
	}
	index.reset()
	// set field by field: a composite literal of the tally (~3 KB, two
	// Counters) is built aside and copied, in a frame that holds both
	var t tally
	t.method, t.cache, t.spread, t.index = m, cache, sp, index
	if err := t.walk(body, sh); err == ErrNotJSON {
		return Result{}, err
	} else if err != nil {
		return estimateOrdered(body, sh, m, cache, sp, index)
	}
	return t.result(), nil
}

// estimateOrdered is estimate by the ordered walk (see walk.go), in a
// frame of its own.
func estimateOrdered(body []byte, sh shape, m Method, cache *Cache, sp *spread, index *Index) (Result, error) {
	index.reset()
	if sp != nil {
		sp.reset(len(body)) // the streaming walk may have added strings
	}
	var t tally
	t.method, t.ordered, t.cache, t.spread, t.index = m, true, cache, sp, index
	if err := t.walkOrdered(body, sh); err != nil {
		return Result{}, err
	}
	return t.result(), nil
}

// walkOrdered validates body, then walks it in the shape's order (see
// walk.go).
func (t *tally) walkOrdered(body []byte, sh shape) error {
	if !jsonraw.Valid(body) {
		return ErrNotJSON
	}
	if err := t.walk(body, sh); err != errFull {
		return err
	}
	return nil
}
