package mocks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// endpoint is the API a request came in on; it fixes the request and response shapes.
type endpoint int

const (
	epCompletions endpoint = iota // /v1/completions
	epChat                        // /v1/chat/completions
	epGenerate                    // SGLang /generate
)

// request is an inference request as the engines read it.
type request struct {
	ep           endpoint
	model        string
	prompts      [][]int // one tokenized prompt per batch item
	batched      bool    // the prompt was a list (SGLang /generate answers a list)
	stream       bool
	includeUsage bool // stream_options.include_usage
	streamOpts   bool // stream_options is present and not null
	maxSet       bool // max tokens was given (prefill contract check)
	lim          limits
	kv           json.RawMessage // kv_transfer_params; nil when absent or null
	boot         *bootstrap      // SGLang bootstrap fields; nil when none is present
	rid          string          // SGLang rid
}

func (r *request) promptTokens() int {
	n := 0
	for _, p := range r.prompts {
		n += len(p)
	}
	return n
}

// bootstrap holds SGLang's bootstrap_host/port/room, one entry per batch item.
type bootstrap struct {
	hosts []string // "" when absent
	ports []int    // 0 when null or absent: the engine's default port
	rooms []uint64
	// roomSet is false when bootstrap_room is absent.
	roomSet bool
}

// apiError is an error answered to the client in the engine's error shape.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// fields is a JSON object whose members are decoded on demand.
type fields map[string]json.RawMessage

func parseFields(body []byte) (fields, error) {
	var f fields
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&f); err != nil || f == nil {
		return nil, badRequest("request body is not a JSON object")
	}
	if dec.More() {
		return nil, badRequest("request body has data after the JSON object")
	}
	return f, nil
}

// has reports whether key is present and not null.
func (f fields) has(key string) bool {
	v, ok := f[key]
	return ok && string(v) != "null"
}

// get decodes key into dst when present and not null.
func (f fields) get(key string, dst any) error {
	if !f.has(key) {
		return nil
	}
	if err := json.Unmarshal(f[key], dst); err != nil {
		return badRequest("%s: %v", key, err)
	}
	return nil
}

// parseRequest reads an inference request body for endpoint ep.
func parseRequest(ep endpoint, body []byte, maxModelLen int) (*request, error) {
	f, err := parseFields(body)
	if err != nil {
		return nil, err
	}
	r := &request{ep: ep}
	if err := f.get("model", &r.model); err != nil {
		return nil, err
	}
	switch ep {
	case epCompletions:
		if !f.has("prompt") {
			return nil, badRequest("prompt: field required")
		}
		r.prompts, r.batched, err = parsePrompt(f["prompt"], "prompt")
	case epChat:
		r.prompts, err = parseMessages(f)
	case epGenerate:
		switch {
		case f.has("input_ids"):
			r.prompts, r.batched, err = parsePrompt(f["input_ids"], "input_ids")
		case f.has("text"):
			r.prompts, r.batched, err = parsePrompt(f["text"], "text")
		default:
			err = badRequest("Either text or input_ids should be provided.")
		}
	}
	if err != nil {
		return nil, err
	}
	if err := r.parseLimits(f, maxModelLen); err != nil {
		return nil, err
	}
	if err := f.get("stream", &r.stream); err != nil {
		return nil, err
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := f.get("stream_options", &so); err != nil {
		return nil, err
	}
	r.includeUsage, r.streamOpts = so.IncludeUsage, f.has("stream_options")
	if f.has("kv_transfer_params") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(f["kv_transfer_params"], &obj); err != nil {
			return nil, badRequest("kv_transfer_params: must be an object")
		}
		r.kv = f["kv_transfer_params"]
	}
	if err := f.get("rid", &r.rid); err != nil {
		return nil, err
	}
	r.boot, err = parseBootstrap(f, len(r.prompts))
	return r, err
}

// parsePrompt reads a prompt: a string, a list of token ids, a list of strings or a
// list of token-id lists. The last two are batches.
func parsePrompt(raw json.RawMessage, name string) (prompts [][]int, batched bool, err error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		p := Tokenize(s)
		return [][]int{p}, false, nonEmpty(name, p)
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return [][]int{ids}, false, validIDs(name, ids)
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		for i, s := range ss {
			p := Tokenize(s)
			if err := nonEmpty(fmt.Sprintf("%s[%d]", name, i), p); err != nil {
				return nil, false, err
			}
			prompts = append(prompts, p)
		}
		return prompts, true, nil
	}
	var batch [][]int
	if json.Unmarshal(raw, &batch) == nil && len(batch) > 0 {
		for i, ids := range batch {
			if err := validIDs(fmt.Sprintf("%s[%d]", name, i), ids); err != nil {
				return nil, false, err
			}
		}
		return batch, true, nil
	}
	return nil, false, badRequest("%s: want a string, a list of strings, a list of token ids or a list of token-id lists", name)
}

func nonEmpty(name string, ids []int) error {
	if len(ids) == 0 {
		return badRequest("%s: the prompt cannot be empty", name)
	}
	return nil
}

func validIDs(name string, ids []int) error {
	if err := nonEmpty(name, ids); err != nil {
		return err
	}
	for _, id := range ids {
		if id < 0 || id >= vocabSize {
			return badRequest("%s: token id %d is out of vocabulary", name, id)
		}
	}
	return nil
}

// parseMessages renders and tokenizes a chat request's messages (or a /tokenize
// request's), honouring add_generation_prompt (default true).
func parseMessages(f fields) ([][]int, error) {
	if !f.has("messages") {
		return nil, badRequest("messages: field required")
	}
	addGen := true
	if err := f.get("add_generation_prompt", &addGen); err != nil {
		return nil, err
	}
	text, err := chatTemplate(f["messages"], addGen)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	return [][]int{Tokenize(text)}, nil
}

// parseLimits reads the output-length fields of each API: max_tokens (completions,
// default 16), max_completion_tokens or max_tokens (chat, default the rest of the
// context), sampling_params.max_new_tokens (generate, default 128), and min_tokens /
// ignore_eos; then applies vLLM's checks.
func (r *request) parseLimits(f fields, maxModelLen int) error {
	var maxTok, minTok *int
	switch r.ep {
	case epCompletions, epChat:
		keys := []string{"max_tokens"}
		if r.ep == epChat {
			// vLLM: max_completion_tokens wins over the deprecated max_tokens.
			keys = []string{"max_completion_tokens", "max_tokens"}
		}
		for _, key := range keys {
			if f.has(key) {
				maxTok = new(int)
				if err := f.get(key, maxTok); err != nil {
					return err
				}
				break
			}
		}
		if f.has("min_tokens") {
			minTok = new(int)
			if err := f.get("min_tokens", minTok); err != nil {
				return err
			}
		}
		if err := f.get("ignore_eos", &r.lim.ignoreEOS); err != nil {
			return err
		}
	case epGenerate:
		var sp struct {
			MaxNewTokens *int `json:"max_new_tokens"`
			MinNewTokens *int `json:"min_new_tokens"`
			IgnoreEOS    bool `json:"ignore_eos"`
		}
		if err := f.get("sampling_params", &sp); err != nil {
			return err
		}
		maxTok, minTok, r.lim.ignoreEOS = sp.MaxNewTokens, sp.MinNewTokens, sp.IgnoreEOS
	}
	longest := 0
	for _, p := range r.prompts {
		longest = max(longest, len(p))
	}
	if longest >= maxModelLen {
		return badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", maxModelLen, longest)
	}
	r.maxSet = maxTok != nil
	switch {
	case maxTok != nil:
		r.lim.max = *maxTok
	case r.ep == epCompletions:
		r.lim.max = 16
	case r.ep == epGenerate:
		r.lim.max = 128
	default:
		r.lim.max = maxModelLen - longest
	}
	r.lim.max = min(r.lim.max, math.MaxInt32)
	if r.lim.max < 1 {
		return badRequest("max_tokens must be at least 1, got %d.", r.lim.max)
	}
	if r.maxSet && longest+r.lim.max > maxModelLen {
		return badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", maxModelLen, longest+r.lim.max, longest, r.lim.max)
	}
	if minTok != nil {
		if *minTok < 0 {
			return badRequest("min_tokens must be greater than or equal to 0, got %d.", *minTok)
		}
		if *minTok > r.lim.max {
			return badRequest("min_tokens must be less than or equal to max_tokens=%d, got %d.", r.lim.max, *minTok)
		}
		r.lim.min = *minTok
	}
	return nil
}

// parseBootstrap reads SGLang's bootstrap fields, scalars or lists. Scalars apply to
// every batch item; a list must have one entry per item.
func parseBootstrap(f fields, items int) (*bootstrap, error) {
	_, hasHost := f["bootstrap_host"]
	_, hasPort := f["bootstrap_port"]
	_, hasRoom := f["bootstrap_room"]
	if !hasHost && !hasPort && !hasRoom {
		return nil, nil
	}
	b := &bootstrap{hosts: make([]string, items), ports: make([]int, items), rooms: make([]uint64, items)}
	if err := spread(f, "bootstrap_host", b.hosts, func(raw json.RawMessage) (string, error) {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}); err != nil {
		return nil, err
	}
	if err := spread(f, "bootstrap_port", b.ports, func(raw json.RawMessage) (int, error) {
		if string(raw) == "null" {
			return 0, nil
		}
		var p int
		if err := json.Unmarshal(raw, &p); err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("not a port")
		}
		return p, nil
	}); err != nil {
		return nil, err
	}
	b.roomSet = f.has("bootstrap_room")
	err := spread(f, "bootstrap_room", b.rooms, func(raw json.RawMessage) (uint64, error) {
		n, err := strconv.ParseUint(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil || n > math.MaxInt64 {
			return 0, fmt.Errorf("not an integer in [0, 2^63-1]")
		}
		return n, nil
	})
	return b, err
}

// spread decodes key as one value for every item or as a list of len(dst) values.
func spread[T any](f fields, key string, dst []T, one func(json.RawMessage) (T, error)) error {
	raw, ok := f[key]
	if !ok || string(raw) == "null" {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err == nil {
		if len(list) != len(dst) {
			return badRequest("%s: %d values for a batch of %d", key, len(list), len(dst))
		}
		for i, v := range list {
			x, err := one(v)
			if err != nil {
				return badRequest("%s[%d]: %v", key, i, err)
			}
			dst[i] = x
		}
		return nil
	}
	x, err := one(raw)
	if err != nil {
		return badRequest("%s: %v", key, err)
	}
	for i := range dst {
		dst[i] = x
	}
	return nil
}

// parseTokenize reads a /tokenize body: {"prompt": "..."} or {"messages": [...]}.
func parseTokenize(body []byte) ([]int, error) {
	f, err := parseFields(body)
	if err != nil {
		return nil, err
	}
	if f.has("messages") {
		p, err := parseMessages(f)
		if err != nil {
			return nil, err
		}
		return p[0], nil
	}
	var prompt string
	if !f.has("prompt") {
		return nil, badRequest("prompt or messages: field required")
	}
	if err := f.get("prompt", &prompt); err != nil {
		return nil, err
	}
	return Tokenize(prompt), nil
}
