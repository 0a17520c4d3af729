package config

import "strings"

// API is the request shape a handled path speaks, known from the path's
// last segments.
type API uint8

// The APIs. APIUnknown is the zero value: a path pdroute cannot handle.
const (
	APIUnknown API = iota
	// APIChat is an OpenAI chat completion (…/chat/completions): messages.
	APIChat
	// APICompletions is an OpenAI completion (…/completions): prompt.
	APICompletions
	// APIResponses is the OpenAI Responses API (…/responses): input, and
	// max_output_tokens instead of max_tokens.
	APIResponses
	// APIGenerate is SGLang's native /generate: text or input_ids.
	APIGenerate
)

var apiNames = [...]string{"unknown", "chat", "completions", "responses", "generate"}

// String is the API's metric label: chat, completions, responses, generate.
func (a API) String() string {
	if int(a) < len(apiNames) {
		return apiNames[a]
	}
	return "unknown"
}

// APIForPath returns the API a request path speaks, from its suffix, so
// prefixed mounts (/openai/v1/chat/completions) work. A query string is
// ignored.
func APIForPath(path string) API {
	path = stripQuery(path)
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return APIChat
	case strings.HasSuffix(path, "/completions"):
		return APICompletions
	case strings.HasSuffix(path, "/responses"):
		return APIResponses
	case strings.HasSuffix(path, "/generate"):
		return APIGenerate
	}
	return APIUnknown
}

// Path is the engine's own path for a: what tokenest and the engines know
// (a handled path may carry a prefix, such as /openai/v1/chat/completions).
func (a API) Path() string {
	switch a {
	case APIChat:
		return "/v1/chat/completions"
	case APICompletions:
		return "/v1/completions"
	case APIResponses:
		return "/v1/responses"
	case APIGenerate:
		return "/generate"
	}
	return ""
}

func stripQuery(path string) string {
	for i := 0; i < len(path); i++ {
		if path[i] == '?' || path[i] == '#' {
			return path[:i]
		}
	}
	return path
}

var defaultPaths = map[Mode][]string{
	ModeNIXL:         {"/v1/chat/completions", "/v1/completions", "/v1/responses"},
	ModeOrchestrated: {"/v1/chat/completions", "/v1/completions", "/v1/responses"},
	ModeLMCache:      {"/v1/chat/completions", "/v1/completions"},
	ModeSGLang:       {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate"},
}

// apiAllowed reports whether mode can rewrite requests of api.
func apiAllowed(m Mode, a API) (bool, string) {
	switch {
	case a == APIUnknown:
		return false, "must end in /chat/completions, /completions, /responses or /generate"
	case a == APIGenerate && m != ModeSGLang:
		return false, "/generate is SGLang's API: only allowed in sglang mode"
	case a == APIResponses && m == ModeLMCache:
		return false, "the Responses API cannot be rewritten to token-id completions: not allowed in lmcache mode"
	}
	return true, ""
}
