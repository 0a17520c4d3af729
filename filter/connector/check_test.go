package connector

import (
	"errors"
	"testing"

	"github.com/pdroute/pdroute/filter/config"
)

// Issue 31: what the decode leg certainly refuses is refused before the
// prefill; what an engine's lax parsing accepts is not.
func TestCheckDecode(t *testing.T) {
	chat, comp, resp := config.APIChat, config.APICompletions, config.APIResponses
	nixl, sgl := config.ModeNIXL, config.ModeSGLang
	tests := []struct {
		mode config.Mode
		api  config.API
		body string
		err  string // "" = accepted
	}{
		{nixl, comp, `{"prompt":"x"}`, ""},
		{nixl, comp, `{"prompt":"x","stream":true,"max_tokens":8,"min_tokens":2,"stream_options":{"include_usage":true}}`, ""},
		{nixl, comp, `{"prompt":"x","stream":null,"max_tokens":null,"min_tokens":null}`, ""},
		// pydantic's lax mode
		{nixl, comp, `{"prompt":"x","stream":"yes","max_tokens":"8"}`, ""},
		{nixl, comp, `{"prompt":"x","stream":"False","max_tokens":8.0}`, ""},
		{nixl, comp, `{"prompt":"x","stream":1,"max_tokens":" 12 "}`, ""},
		{nixl, comp, `{"prompt":"x","stream":0,"max_tokens":1e3}`, ""},
		{nixl, comp, `{"prompt":"x","max_tokens":true}`, ""},
		{nixl, comp, `{"prompt":"x","max_tokens":100000000000}`, ""}, // the engine's limit to judge
		{nixl, comp, `{"prompt":"x","stream_options":{}}`, ""},
		{nixl, comp, `{"prompt":"x","stream":"yes","stream_options":{"include_usage":true}}`, ""},
		// wrong types
		{nixl, comp, `{"prompt":"x","stream":"maybe"}`, `stream: Input should be a valid boolean, got "maybe"`},
		{nixl, comp, `{"prompt":"x","stream":2}`, `stream: Input should be a valid boolean, got 2`},
		{nixl, comp, `{"prompt":"x","stream":[]}`, `stream: Input should be a valid boolean, got []`},
		{nixl, comp, `{"prompt":"x","stream":{"a":1}}`, `stream: Input should be a valid boolean, got {"a":1}`},
		{nixl, comp, `{"prompt":"x","max_tokens":"many"}`, `max_tokens: Input should be a valid integer, got "many"`},
		{nixl, comp, `{"prompt":"x","max_tokens":2.5}`, `max_tokens: Input should be a valid integer, got 2.5`},
		{nixl, comp, `{"prompt":"x","max_tokens":[8]}`, `max_tokens: Input should be a valid integer, got [8]`},
		{nixl, chat, `{"messages":[],"max_completion_tokens":{}}`, `max_completion_tokens: Input should be a valid integer, got {}`},
		{nixl, resp, `{"input":"x","max_output_tokens":"1.5"}`, `max_output_tokens: Input should be a valid integer, got "1.5"`},
		{nixl, comp, `{"prompt":"x","min_tokens":"few"}`, `min_tokens: Input should be a valid integer, got "few"`},
		// ranges
		{nixl, comp, `{"prompt":"x","max_tokens":0}`, "max_tokens must be at least 1, got 0."},
		{nixl, comp, `{"prompt":"x","max_tokens":-5}`, "max_tokens must be at least 1, got -5."},
		{nixl, chat, `{"messages":[],"max_tokens":50,"max_completion_tokens":0}`, "max_completion_tokens must be at least 1, got 0."},
		{sgl, comp, `{"prompt":"x","max_tokens":0}`, ""},
		{sgl, comp, `{"prompt":"x","max_tokens":-1}`, "max_tokens must be at least 0, got -1."},
		{nixl, comp, `{"prompt":"x","min_tokens":-1}`, "min_tokens must be greater than or equal to 0, got -1."},
		{nixl, comp, `{"prompt":"x","max_tokens":4,"min_tokens":5}`, "min_tokens must be less than or equal to max_tokens=4, got 5."},
		{nixl, chat, `{"messages":[],"max_tokens":50,"max_completion_tokens":4,"min_tokens":5}`, "min_tokens must be less than or equal to max_tokens=4, got 5."},
		{nixl, comp, `{"prompt":"x","min_tokens":500}`, ""}, // no max_tokens: the engine's default applies
		// stream_options without stream (vLLM's check of the raw values)
		{nixl, comp, `{"prompt":"x","stream_options":{"include_usage":true}}`, "Stream options can only be defined when `stream=True`."},
		{nixl, comp, `{"prompt":"x","stream":false,"stream_options":{"include_usage":true}}`, "Stream options can only be defined when `stream=True`."},
		{sgl, comp, `{"prompt":"x","stream":false,"stream_options":{"include_usage":true}}`, ""},
	}
	for _, tt := range tests {
		r, err := NewRequest(tt.api, []byte(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		err = CheckDecode(tt.mode, r)
		if ref := checkDecode(tt.mode, r); (ref == nil) != (err == nil) || err != nil && err.Error() != ref.Error() {
			t.Errorf("%s %s: %v, reference %v", tt.mode, tt.body, err, ref)
		}
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s %s: %v, want accepted", tt.mode, tt.body, err)
		case tt.err != "" && (err == nil || !errors.Is(err, ErrInvalid) || err.Error() != tt.err):
			t.Errorf("%s %s: %v, want %q", tt.mode, tt.body, err, tt.err)
		}
	}
}

// CheckDecode reads client bodies: never a panic, and always an ErrInvalid.
func FuzzCheckDecode(f *testing.F) {
	for _, s := range []string{`{"stream":"yes","max_tokens":"8"}`, `{"stream":true,"max_tokens":8,"min_tokens":9,"stream":false}`,
		`{"max_tokens":-0,"max_completion_tokens":999999999999999999,"stream_options":{},"min_tokens":-1}`, `{"max_tokens":1e400}`, `{"min_tokens":-1e30,"max_tokens":"-9223372036854775809"}`, `{"stream_options":{"a":1}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r, err := NewRequest(config.APIChat, []byte(body))
		if err != nil {
			return
		}
		for _, m := range []config.Mode{config.ModeNIXL, config.ModeSGLang} {
			err := CheckDecode(m, r)
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v is not an ErrInvalid", err)
			}
			// the fast path passes only what the reference passes
			if ref := checkDecode(m, r); (ref == nil) != (err == nil) || plainDecode(m, r.Body) && ref != nil {
				t.Fatalf("%s %s: %v, reference %v", m, body, err, ref)
			}
		}
	})
}
