//go:build !wasip1

package abi_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

// calloutPlugin makes every stream dispatch one call in its request headers
// and pause; the callback copies the answer into a request header, records
// GetStatus and resumes the stream.
func calloutPlugin(t *testing.T) *scriptedPlugin {
	p := &scriptedPlugin{
		panicIn: map[string]any{},
		actions: map[string]types.Action{"OnHttpRequestHeaders": types.ActionPause},
	}
	p.onHeaders = func(caller uint32) {
		callHeaders := append(slices.Clone(requestHeaders), [2]string{"x-caller", itoa(caller)})
		_, err := abi.DispatchHttpCall("prefill", callHeaders, []byte("ask"), nil, 1000,
			func(numHeaders, bodySize, numTrailers int) {
				p.hook("callout", caller)
				code, msg, err := abi.GetStatus()
				if err != nil {
					t.Errorf("GetStatus: %v", err)
				}
				answer := "status " + itoa(code) + " " + msg
				if numHeaders > 0 {
					body, err := abi.GetHttpCallResponseBody(0, bodySize)
					if err != nil {
						t.Errorf("GetHttpCallResponseBody: %v", err)
					}
					answer = string(body)
				}
				if err := abi.AddHttpRequestHeader("x-answer", answer); err != nil {
					t.Errorf("AddHttpRequestHeader: %v", err)
				}
				if err := abi.ResumeHttpRequest(); err != nil {
					t.Errorf("ResumeHttpRequest: %v", err)
				}
			})
		if err != nil {
			t.Errorf("DispatchHttpCall: %v", err)
		}
	}
	return p
}

// startCall opens a stream that dispatched its call and returns the stream
// id and the call's id.
func startCall(t *testing.T, host proxytest.HostEmulator) (uint32, uint32) {
	t.Helper()
	id := host.InitializeHttpContext()
	if a := host.CallOnRequestHeaders(id, requestHeaders, true); a != types.ActionPause {
		t.Fatalf("request headers action = %v", a)
	}
	calls := host.GetCalloutAttributesFromContext(id)
	if len(calls) != 1 || calls[0].Upstream != "prefill" || string(calls[0].Body) != "ask" {
		t.Fatalf("callouts of %d = %+v", id, calls)
	}
	if !slices.Contains(calls[0].Headers, [2]string{"x-caller", itoa(id)}) {
		t.Fatalf("callout headers = %v", calls[0].Headers)
	}
	return id, calls[0].CalloutID
}

func header(headers [][2]string, key string) string {
	for _, h := range headers {
		if h[0] == key {
			return h[1]
		}
	}
	return ""
}

func TestHttpCallCallbackRunsInCallerContext(t *testing.T) {
	p := calloutPlugin(t)
	host := startHost(t, p)
	first, firstCall := startCall(t, host)
	second, secondCall := startCall(t, host)

	// Answers arrive in reverse order; each reaches its own stream.
	host.CallOnHttpCallResponse(secondCall, [][2]string{{":status", "200"}}, nil, []byte("answer-2"))
	host.CallOnHttpCallResponse(firstCall, [][2]string{{":status", "200"}}, nil, []byte("answer-1"))

	for _, tc := range []struct {
		id     uint32
		answer string
	}{{first, "answer-1"}, {second, "answer-2"}} {
		if got := header(host.GetCurrentRequestHeaders(tc.id), "x-answer"); got != tc.answer {
			t.Errorf("stream %d: x-answer = %q, want %q", tc.id, got, tc.answer)
		}
		if a := host.GetCurrentHttpStreamAction(tc.id); a != types.ActionContinue {
			t.Errorf("stream %d: action = %v, want resumed", tc.id, a)
		}
	}
	want := []string{"callout/" + itoa(second), "callout/" + itoa(first)}
	if got := slices.DeleteFunc(p.calls, func(c string) bool { return !strings.HasPrefix(c, "callout/") }); !slices.Equal(got, want) {
		t.Errorf("callbacks = %v, want %v", got, want)
	}
}

func TestFailedHttpCallReportsReset(t *testing.T) {
	p := calloutPlugin(t)
	host := startHost(t, p)
	id, call := startCall(t, host)
	host.CallOnHttpCallResponse(call, nil, nil, nil)
	if got := header(host.GetCurrentRequestHeaders(id), "x-answer"); got != "status 11 reset" {
		t.Errorf("x-answer = %q", got)
	}
	if code, msg, _ := abi.GetStatus(); code != 0 || msg != "" {
		t.Errorf("GetStatus outside the callback = %d %q", code, msg)
	}
}

func TestHttpCallOfEndedStreamIsDropped(t *testing.T) {
	p := calloutPlugin(t)
	host := startHost(t, p)
	ended, endedCall := startCall(t, host)
	live, liveCall := startCall(t, host)
	host.CompleteHttpContext(ended)

	host.CallOnHttpCallResponse(endedCall, [][2]string{{":status", "200"}}, nil, []byte("late"))
	host.CallOnHttpCallResponse(liveCall, [][2]string{{":status", "200"}}, nil, []byte("on time"))

	if slices.Contains(p.calls, "callout/"+itoa(ended)) {
		t.Errorf("callback of ended stream %d ran: %v", ended, p.calls)
	}
	if got := header(host.GetCurrentRequestHeaders(live), "x-answer"); got != "on time" {
		t.Errorf("live stream x-answer = %q", got)
	}
}

func TestPanicInHttpCallCallbackFailsCaller(t *testing.T) {
	p := calloutPlugin(t)
	host := startHost(t, p)
	victim, victimCall := startCall(t, host)
	bystander, bystanderCall := startCall(t, host)

	p.panicIn["callout"] = "boom"
	host.CallOnHttpCallResponse(victimCall, [][2]string{{":status", "200"}}, nil, []byte("x"))
	delete(p.panicIn, "callout")
	host.CallOnHttpCallResponse(bystanderCall, [][2]string{{":status", "200"}}, nil, []byte("fine"))

	if r := host.GetSentLocalResponse(victim); r == nil || r.StatusCode != 500 || string(r.Data) != internalError {
		t.Fatalf("victim reply = %+v", r)
	}
	if logs := host.GetErrorLogs(); len(logs) != 1 ||
		!strings.HasPrefix(logs[0], "pdroute: panic in http call callback (context "+itoa(victim)+"): boom") {
		t.Errorf("error logs = %q", logs)
	}
	if r := host.GetSentLocalResponse(bystander); r != nil {
		t.Errorf("bystander got a local reply: %+v", r)
	}
	if got := header(host.GetCurrentRequestHeaders(bystander), "x-answer"); got != "fine" {
		t.Errorf("bystander x-answer = %q", got)
	}
	// The failed stream passes through from now on.
	p.calls = nil
	if a := host.CallOnResponseHeaders(victim, [][2]string{{":status", "500"}}, true); a != types.ActionContinue {
		t.Errorf("victim response headers action = %v", a)
	}
	host.CompleteHttpContext(victim)
	if want := []string{"OnHttpStreamDone/" + itoa(victim)}; !slices.Equal(p.calls, want) {
		t.Errorf("victim calls after failure = %v, want %v", p.calls, want)
	}
}

func TestHttpCallFromRootIsAttributedToRoot(t *testing.T) {
	p := &scriptedPlugin{}
	host := startHost(t, p)
	var got []int
	var gotHeaders [][2]string
	// Outside any stream the active context is the root (id 1 in proxytest).
	if err := abi.SetEffectiveContext(proxytest.PluginContextID); err != nil {
		t.Fatal(err)
	}
	if _, err := abi.DispatchHttpCall("metrics", requestHeaders, nil, nil, 100, func(h, b, tr int) {
		got = append(got, h, b, tr)
		gotHeaders, _ = abi.GetHttpCallResponseHeaders()
		panic("boom")
	}); err != nil {
		t.Fatal(err)
	}
	calls := host.GetCalloutAttributesFromContext(proxytest.PluginContextID)
	if len(calls) != 1 {
		t.Fatalf("root callouts = %+v", calls)
	}
	host.CallOnHttpCallResponse(calls[0].CalloutID, [][2]string{{":status", "200"}, {"a", "b"}}, nil, []byte("abc"))
	if !slices.Equal(got, []int{2, 3, 0}) {
		t.Errorf("callback args = %v", got)
	}
	if !slices.Equal(gotHeaders, [][2]string{{":status", "200"}, {"a", "b"}}) {
		t.Errorf("call response headers = %v", gotHeaders)
	}
	if logs := host.GetErrorLogs(); len(logs) != 1 || !strings.HasPrefix(logs[0], "pdroute: panic in http call callback (context 1)") {
		t.Errorf("error logs = %q", logs)
	}
}
