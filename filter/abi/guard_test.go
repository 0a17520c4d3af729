//go:build !wasip1

package abi_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

// internalError is the reply body for a panic with value "boom".
const internalError = `{"error":{"message":"pdroute: internal error: boom","type":"internal_error","code":500}}`

// runStream plays one whole stream through host and returns its id and the
// actions of the six data callbacks.
func runStream(host proxytest.HostEmulator) (uint32, []types.Action) {
	id := host.InitializeHttpContext()
	actions := []types.Action{
		host.CallOnRequestHeaders(id, requestHeaders, false),
		host.CallOnRequestBody(id, []byte(`{"model":"m"}`), false),
		host.CallOnRequestTrailers(id, [][2]string{{"t", "1"}}),
		host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false),
		host.CallOnResponseBody(id, []byte(`{"ok":true}`), false),
		host.CallOnResponseTrailers(id, [][2]string{{"t", "2"}}),
	}
	host.CompleteHttpContext(id)
	return id, actions
}

func TestStreamPanicSendsInternalErrorAndPassesThrough(t *testing.T) {
	callbacks := []string{
		"OnHttpRequestHeaders", "OnHttpRequestBody", "OnHttpRequestTrailers", "OnHttpResponseHeaders",
	}
	for i, callback := range callbacks {
		t.Run(callback, func(t *testing.T) {
			p := &scriptedPlugin{panicIn: map[string]any{callback: "boom"}}
			host := startHost(t, p)

			id, actions := runStream(host)

			// The panicking callback pauses (a local reply was sent); every
			// later one continues without entering user code.
			want := []types.Action{0, 0, 0, 0, 0, 0}
			want[i] = types.ActionPause
			if !slices.Equal(actions, want) {
				t.Errorf("actions = %v, want %v", actions, want)
			}
			wantCalls := []string{"NewHttpContext/" + itoa(id)}
			for _, c := range callbacks[:i+1] {
				wantCalls = append(wantCalls, c+"/"+itoa(id))
			}
			wantCalls = append(wantCalls, "OnHttpStreamDone/"+itoa(id))
			if !slices.Equal(p.calls, wantCalls) {
				t.Errorf("calls = %v, want %v", p.calls, wantCalls)
			}
			reply := host.GetSentLocalResponse(id)
			if reply == nil {
				t.Fatal("no local reply")
			}
			if reply.StatusCode != 500 || string(reply.Data) != internalError || reply.GRPCStatus != -1 {
				t.Errorf("reply = %d %q grpc %d", reply.StatusCode, reply.Data, reply.GRPCStatus)
			}
			if !slices.Equal(reply.Headers, [][2]string{{"content-type", "application/json"}}) {
				t.Errorf("reply headers = %v", reply.Headers)
			}
			logs := host.GetErrorLogs()
			if len(logs) != 1 || !strings.HasPrefix(logs[0], "pdroute: panic in "+callback+" (context "+itoa(id)+"): boom\n") {
				t.Errorf("error logs = %q", logs)
			}

			// The VM keeps serving: the next stream runs normally.
			delete(p.panicIn, callback)
			p.calls = nil
			next, actions := runStream(host)
			if !slices.Equal(actions, []types.Action{0, 0, 0, 0, 0, 0}) || host.GetSentLocalResponse(next) != nil {
				t.Errorf("next stream: actions %v, reply %v", actions, host.GetSentLocalResponse(next))
			}
			if len(p.calls) != 8 {
				t.Errorf("next stream calls = %v", p.calls)
			}
		})
	}
}

func TestPanicAfterResponseStartedClosesStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		callback string
	}{
		{"response body", "OnHttpResponseBody"},
		{"response trailers", "OnHttpResponseTrailers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &scriptedPlugin{panicIn: map[string]any{tc.callback: errors.New("boom")}}
			host := startHost(t, p)
			id, _ := runStream(host)
			if r := host.GetSentLocalResponse(id); r != nil {
				t.Errorf("local reply after response headers continued: %d %q", r.StatusCode, r.Data)
			}
			// proxytest cannot close a stream: the binding reports it.
			logs := host.GetErrorLogs()
			if len(logs) != 2 || !strings.HasPrefix(logs[0], "pdroute: panic in "+tc.callback) ||
				logs[1] != "pdroute: stream "+itoa(id)+": close after panic: "+types.ErrorUnimplemented.Error() {
				t.Errorf("error logs = %q", logs)
			}
		})
	}
}

func TestPausedResponseStillGetsInternalError(t *testing.T) {
	// Response headers paused: nothing went downstream, a local reply works.
	p := &scriptedPlugin{
		panicIn: map[string]any{"OnHttpResponseBody": "boom"},
		actions: map[string]types.Action{"OnHttpResponseHeaders": types.ActionPause},
	}
	host := startHost(t, p)
	id, _ := runStream(host)
	if r := host.GetSentLocalResponse(id); r == nil || r.StatusCode != 500 || string(r.Data) != internalError {
		t.Fatalf("reply = %+v", r)
	}
}

func TestResumedResponseCountsAsStarted(t *testing.T) {
	p := &scriptedPlugin{
		panicIn: map[string]any{"OnHttpResponseBody": "boom"},
		actions: map[string]types.Action{"OnHttpResponseHeaders": types.ActionPause},
	}
	host := startHost(t, p)
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, requestHeaders, true)
	host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	// A root callback resumes the response: headers go downstream.
	if err := abi.SetEffectiveContext(id); err != nil {
		t.Fatal(err)
	}
	if err := abi.ResumeHttpResponse(); err != nil {
		t.Fatal(err)
	}
	host.CallOnResponseBody(id, []byte("x"), true)
	if r := host.GetSentLocalResponse(id); r != nil {
		t.Errorf("local reply after the response was resumed: %+v", r)
	}
}

func TestPanicInStreamDoneIsLoggedOnly(t *testing.T) {
	p := &scriptedPlugin{panicIn: map[string]any{"OnHttpStreamDone": "boom"}}
	host := startHost(t, p)
	id, actions := runStream(host)
	if !slices.Equal(actions, []types.Action{0, 0, 0, 0, 0, 0}) || host.GetSentLocalResponse(id) != nil {
		t.Errorf("actions %v, reply %v", actions, host.GetSentLocalResponse(id))
	}
	if logs := host.GetErrorLogs(); len(logs) != 1 || !strings.HasPrefix(logs[0], "pdroute: panic in OnHttpStreamDone") {
		t.Errorf("error logs = %q", logs)
	}
}

func TestPanicInNewHttpContextFailsThatStream(t *testing.T) {
	p := &scriptedPlugin{panicIn: map[string]any{"NewHttpContext": "boom"}}
	host := startHost(t, p)
	id, actions := runStream(host)
	if actions[0] != types.ActionPause {
		t.Errorf("request headers action = %v", actions[0])
	}
	if r := host.GetSentLocalResponse(id); r == nil || r.StatusCode != 500 || string(r.Data) != internalError {
		t.Fatalf("reply = %+v", r)
	}
	logs := host.GetErrorLogs()
	if len(logs) != 2 || !strings.HasPrefix(logs[0], "pdroute: panic in NewHttpContext (context "+itoa(id)+"): boom") {
		t.Errorf("error logs = %q", logs)
	}
}

func TestInternalErrorBodyEscapesPanicValue(t *testing.T) {
	p := &scriptedPlugin{panicIn: map[string]any{"OnHttpRequestHeaders": "bad \"quote\"\n<tag>"}}
	host := startHost(t, p)
	id, _ := runStream(host)
	want := `{"error":{"message":"pdroute: internal error: bad \"quote\"\n\u003ctag\u003e","type":"internal_error","code":500}}`
	if r := host.GetSentLocalResponse(id); r == nil || string(r.Data) != want {
		t.Fatalf("reply = %+v, want body %s", r, want)
	}
}

func TestRootPanics(t *testing.T) {
	t.Run("OnVMStart fails the start", func(t *testing.T) {
		p := &scriptedPlugin{panicIn: map[string]any{"OnVMStart": "boom"}}
		host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(abi.Guard(scriptedVM{p})))
		defer reset()
		if host.StartVM() {
			t.Error("StartVM succeeded after a panic")
		}
		if logs := host.GetErrorLogs(); len(logs) != 1 || !strings.HasPrefix(logs[0], "pdroute: panic in OnVMStart (context 0): boom") {
			t.Errorf("error logs = %q", logs)
		}
	})
	t.Run("OnPluginStart fails the start", func(t *testing.T) {
		p := &scriptedPlugin{panicIn: map[string]any{"OnPluginStart": "boom"}}
		host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(abi.Guard(scriptedVM{p})))
		defer reset()
		if host.StartPlugin() {
			t.Error("StartPlugin succeeded after a panic")
		}
	})
	t.Run("OnTick keeps the VM running", func(t *testing.T) {
		p := &scriptedPlugin{panicIn: map[string]any{"OnTick": "boom"}}
		host := startHost(t, p)
		host.Tick()
		host.Tick()
		if !slices.Equal(p.calls, []string{"OnTick/1", "OnTick/1"}) {
			t.Errorf("calls = %v", p.calls)
		}
		if logs := host.GetErrorLogs(); len(logs) != 2 {
			t.Errorf("error logs = %q", logs)
		}
		if _, actions := runStream(host); !slices.Equal(actions, []types.Action{0, 0, 0, 0, 0, 0}) {
			t.Errorf("stream after tick panics: %v", actions)
		}
	})
}

func TestPanicRepliesToPanickingStreamAfterEffectiveContextMoved(t *testing.T) {
	p := &scriptedPlugin{
		panicIn: map[string]any{},
		actions: map[string]types.Action{"OnHttpRequestHeaders": types.ActionPause},
	}
	host := startHost(t, p)
	other := host.InitializeHttpContext()
	host.CallOnRequestHeaders(other, requestHeaders, true)

	p.panicIn["OnHttpRequestHeaders"] = "boom"
	p.onHeaders = func(uint32) {
		if err := abi.SetEffectiveContext(other); err != nil {
			t.Fatal(err)
		}
	}
	victim := host.InitializeHttpContext()
	host.CallOnRequestHeaders(victim, requestHeaders, true)

	if r := host.GetSentLocalResponse(victim); r == nil || r.StatusCode != 500 {
		t.Errorf("panicking stream reply = %+v", r)
	}
	if r := host.GetSentLocalResponse(other); r != nil {
		t.Errorf("other stream got the reply: %+v", r)
	}
}
