package connector

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/tidwall/gjson"
)

// Engine paths of the lmcache mode: every prefill and decode request is a
// token-id completion, whatever API the client used.
const (
	TokenizePath    = "/tokenize"
	CompletionsPath = "/v1/completions"
)

// ErrNotEligible: the request cannot be disaggregated in lmcache mode; the
// plugin sends it direct to a decoder. The wrapped message says why.
var ErrNotEligible = errors.New("lmcache: cannot disaggregate")

// vllmDefaultCompletionMaxTokens is vLLM's default max_tokens for
// /v1/completions (CompletionRequest.max_tokens = 16).
const vllmDefaultCompletionMaxTokens = 16

// chatSampling are the chat request fields carried into the token-id
// completion requests built for a chat client: those that change which
// tokens are sampled and that /v1/completions accepts with the same meaning.
// Chat-only fields (messages, tools, tool_choice, logprobs/top_logprobs,
// parallel_tool_calls, chat_template*) are not carried.
var chatSampling = []string{
	"model", "temperature", "top_p", "top_k", "min_p", "seed",
	"frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias",
	"stop", "stop_token_ids", "bad_words", "allowed_token_ids", "ignore_eos",
	"skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
	"response_format", "structured_outputs", "guided_json", "guided_regex",
	"guided_choice", "guided_grammar", "user", "priority",
}

// chatDecode are the chat fields carried into the decode request: the
// sampling fields, min_tokens (adjusted) and the client's own streaming
// choice.
var chatDecode = append(append([]string(nil), chatSampling...), "min_tokens", "stream", "stream_options")

// chatTokenize are the chat request fields that shape the prompt /tokenize
// renders (vLLM's TokenizeChatRequest).
var chatTokenize = []string{
	"model", "messages", "add_generation_prompt", "continue_final_message",
	"add_special_tokens", "chat_template", "chat_template_kwargs",
}

func notEligible(reason string) error { return fmt.Errorf("%w: %s", ErrNotEligible, reason) }

// LMCacheCheck reports whether r can be disaggregated in lmcache mode, where
// the decoder only sees token ids and a shortened max_tokens. It returns an
// ErrNotEligible error for: a batch (a prompt list, n or best_of above 1);
// a missing or non-text prompt (a chat message with image, audio or file
// parts); features whose answer the proxy would have to rebuild (echo,
// logprobs, tools); max_tokens of 1 or less (nothing left to decode); any
// API but chat and completions.
func LMCacheCheck(r Request) error {
	switch r.API {
	case config.APICompletions:
		p := r.Body.Raw("prompt")
		switch {
		case p == nil:
			return notEligible("no prompt")
		case p[0] == '[' && arrayLen(p, 1) == 0:
			return notEligible("empty prompt")
		case p[0] == '[' && !isTokenIDs(p):
			return notEligible("batched prompt")
		case p[0] != '[' && p[0] != '"':
			return notEligible("prompt is neither text nor token ids")
		}
		if truthy(r.Body.Get("echo")) {
			return notEligible("echo")
		}
		// Any logprobs value, even 0, asks for the sampled token's logprob.
		if lp := r.Body.Get("logprobs"); lp.Exists() && lp.Type != gjson.Null {
			return notEligible("logprobs")
		}
	case config.APIChat:
		if reason := checkMessages(r.Body.Raw("messages")); reason != "" {
			return notEligible(reason)
		}
		if tools := r.Body.Raw("tools"); tools != nil && tools[0] == '[' && arrayLen(tools, 1) > 0 {
			return notEligible("tools")
		}
		if truthy(r.Body.Get("logprobs")) || truthy(r.Body.Get("top_logprobs")) {
			return notEligible("logprobs")
		}
	default:
		return notEligible("the " + r.API.String() + " API")
	}
	for _, f := range []string{"n", "best_of"} {
		if v := r.Body.Get(f); v.Type == gjson.Number && v.Num > 1 {
			return notEligible(f + " > 1")
		}
	}
	limit, ok := clientMaxTokens(r)
	if ok && limit.Type != gjson.Null {
		if n, err := strconv.ParseInt(limit.Raw, 10, 64); err != nil || n <= 1 {
			return notEligible("max_tokens " + limit.Raw)
		}
	}
	return nil
}

// truthy: present, not null, not false, not 0.
func truthy(v gjson.Result) bool {
	return v.Exists() && v.Type != gjson.Null && v.Type != gjson.False && !(v.Type == gjson.Number && v.Num == 0)
}

// checkMessages returns why messages cannot be tokenized to plain text ids,
// or "".
func checkMessages(raw []byte) string {
	if raw == nil || raw[0] != '[' {
		return "no messages"
	}
	reason := ""
	eachElem(raw, func(msg []byte) bool {
		m, err := scanObject(msg)
		if err != nil {
			reason = "a message is not an object"
			return false
		}
		content := m.Raw("content")
		if content == nil || content[0] != '[' {
			return true
		}
		eachElem(content, func(part []byte) bool {
			p, err := scanObject(part)
			if err != nil || string(p.Raw("type")) != `"text"` {
				reason = "non-text message content"
				return false
			}
			return true
		})
		return reason == ""
	})
	return reason
}

// clientMaxTokens is the client's output cap: max_tokens for completions;
// for chat max_completion_tokens, else max_tokens (vLLM's order). ok is false
// when the client set neither.
func clientMaxTokens(r Request) (gjson.Result, bool) {
	if r.API == config.APIChat {
		if v := r.Body.Get("max_completion_tokens"); v.Exists() && v.Type != gjson.Null {
			return v, true
		}
	}
	v := r.Body.Get("max_tokens")
	return v, v.Exists()
}

// LMCacheTokenize returns what to send to the engine's /tokenize (POST
// TokenizePath): {"model","prompt"} for a completion, {"model","messages",…}
// with the fields that shape the chat template for a chat request. When the
// client already sent token ids there is nothing to tokenize: body is nil
// and tokens holds the client's ids. Call it after LMCacheCheck.
func LMCacheTokenize(r Request) (body, tokens []byte) {
	if r.API == config.APIChat {
		return r.Body.Only(chatTokenize...).Build(), nil
	}
	if p := r.Body.Raw("prompt"); isTokenIDs(p) {
		return nil, p
	}
	return r.Body.Only("model", "prompt", "add_special_tokens").Build(), nil
}

// ParseTokenizeAnswer returns the raw token id list of a /tokenize answer
// ({"tokens":[…],"count":N,…}); the slice aliases answer.
func ParseTokenizeAnswer(answer []byte) ([]byte, error) {
	o, err := ParseObject(answer)
	if err != nil {
		return nil, err
	}
	tokens := o.Raw("tokens")
	if !isTokenIDs(tokens) {
		return nil, errors.New("tokenize answer has no token id list")
	}
	return tokens, nil
}

// LMCachePrefill builds the prefill body (POST CompletionsPath): the prompt
// as token ids, one output token, "stream":false without stream_options, no
// min_tokens, and kv_transfer_params {ret_first_tok, disagg_spec} naming the
// decode endpoint's receiver. reqID names the transfer in the KV-ready
// notifications and must be unique (UUIDv4 of fresh random bytes, not the
// client's X-Request-Id). A completion client's other fields are kept; a
// chat client's body is rebuilt from the chatSampling fields.
func LMCachePrefill(r Request, tokens []byte, reqID string, decode *config.Endpoint) []byte {
	edits := []Edit{
		Set("prompt", tokens),
		Set("max_tokens", jsonOne),
		Set("stream", jsonFalse),
		Delete("stream_options"),
		Delete("min_tokens"),
		Set("kv_transfer_params", disaggParams(reqID, decode.KVReceiver)),
	}
	body := r.Body
	if r.API == config.APIChat {
		body = body.Only(chatSampling...)
	}
	return body.Build(edits...)
}

func disaggParams(reqID string, rcv *config.KVReceiver) []byte {
	b := make([]byte, 0, 128+len(reqID)+len(rcv.Host)+12*len(rcv.InitPorts))
	b = append(b, `{"ret_first_tok":true,"disagg_spec":{"req_id":`...)
	b = gjson.AppendJSONString(b, reqID)
	b = append(b, `,"receiver_host":`...)
	b = gjson.AppendJSONString(b, rcv.Host)
	b = append(b, `,"receiver_init_port":`...)
	b = appendInts(b, rcv.InitPorts)
	b = append(b, `,"receiver_alloc_port":`...)
	b = appendInts(b, rcv.AllocPorts)
	return append(b, "}}"...)
}

func appendInts(b []byte, l []int) []byte {
	b = append(b, '[')
	for i, n := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return append(b, ']')
}

// LMCacheDecode builds the decode body (POST CompletionsPath): prompt =
// tokens followed by firstTok (the prefill's first_tok), no
// kv_transfer_params, and one token less to generate: max_tokens = the
// client's cap − 1, or null (the engine's "up to the context length") when
// a chat client set none or a completion client sent null, or 15 (vLLM's
// completion default of 16, minus one) when a completion client omitted it.
// min_tokens > 0 drops by one too. The client's stream and stream_options are
// kept. A completion client's other fields are kept (and only the leading
// members change, so the rest of the body stays in Envoy); a chat client's
// body is rebuilt from the chatSampling fields.
func LMCacheDecode(r Request, tokens []byte, firstTok int64) BodyEdit {
	edits := make([]Edit, 0, 3)
	head, tail := withElem(tokens, firstTok)
	edits = append(edits, setJoined("prompt", head, tail))
	switch limit, ok := clientMaxTokens(r); {
	case ok && limit.Type != gjson.Null:
		edits = append(edits, SetInt("max_tokens", limit.Int()-1))
	case ok || r.API == config.APIChat:
		edits = append(edits, Set("max_tokens", jsonNull))
	default:
		edits = append(edits, SetInt("max_tokens", vllmDefaultCompletionMaxTokens-1))
	}
	if v := r.Body.Get("min_tokens"); v.Type == gjson.Number && v.Int() > 0 {
		edits = append(edits, SetInt("min_tokens", v.Int()-1))
	}
	if r.API != config.APIChat {
		return r.Body.Rewrite(edits...)
	}
	body := r.Body.Only(chatDecode...).Build(edits...)
	return BodyEdit{Drain: len(r.Body.src), Prefix: body}
}
