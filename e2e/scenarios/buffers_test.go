package scenarios

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
)

// TestVMReusesBuffersSafely drives disaggregated requests through one VM
// so that the buffers the filter keeps between callbacks are reused across
// streams: request bodies (read into one root buffer), prefill answers
// (another), decode edits (another), header maps (the VM's scratch
// buffer). Two requests are in flight at once, each answered after the
// other's body was read, with bodies and answers that grow past the kept
// room, fall back within it, and exceed what is kept (2 MiB), and with a
// header map larger than the scratch buffer. Every decode body must be its
// own client body with its own answer's kv_transfer_params, and the
// headers each request keeps (its x-request-id) its own.
func TestVMReusesBuffersSafely(t *testing.T) {
	d, err := startDriver(pluginCode(t), []byte(`{"mode":"nixl","threshold_tokens":0,`+
		`"prefill":{"endpoints":[{"name":"p","address":"10.0.0.1:8000"}]},`+
		`"decode":{"endpoints":[{"name":"d","address":"10.0.0.2:8000"}]}}`), stack.EmulatedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	type flight struct {
		id             uint32
		body, answer   []byte
		reqID, bigHead string
	}
	start := func(i, size, blocks int, bigHeader bool) flight {
		f := flight{
			body:   chat(fmt.Sprintf("request %d: %s", i, text(size)), nil),
			answer: prefillAnswerOf(i, blocks),
			reqID:  fmt.Sprintf("client-request-%d", i),
		}
		headers := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "pdroute"},
			{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(f.body))},
			{"x-request-id", f.reqID}, {"x-pdroute-cluster", "client-chosen"}}
		if bigHeader {
			f.bigHead = strings.Repeat(strconv.Itoa(i), 24<<10) // beyond the scratch buffer
			headers = append(headers, [2]string{"x-big", f.bigHead})
		}
		f.id = d.InitializeHttpContext()
		d.CallOnRequestHeaders(f.id, headers, false)
		for off := 0; off < len(f.body); off += requestChunk {
			end := min(off+requestChunk, len(f.body))
			d.CallOnRequestBody(f.id, f.body[off:end], end == len(f.body))
		}
		return f
	}
	pending := func() uint32 {
		t.Helper()
		p := d.PendingHTTPCallouts()
		if len(p) == 0 {
			t.Fatalf("no prefill dispatched (VM failure %.300q)", d.Failed())
		}
		return p[len(p)-1]
	}
	finish := func(f flight, token uint32) {
		t.Helper()
		d.CallOnHttpCallResponse(token, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, nil, f.answer)
		if d.ContinueCount(f.id, false) != 1 {
			t.Fatalf("request %s not resumed: %+v (VM failure %.300q)", f.reqID, d.SentLocalResponse(f.id), d.Failed())
		}
		req, err := connector.NewRequest(config.APIChat, f.body)
		if err != nil {
			t.Fatal(err)
		}
		ans, err := connector.ParsePrefillAnswer(f.answer)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.RequestBody(f.id), connector.NIXLDecode(req, ans.KVParams).Apply(f.body); !bytes.Equal(got, want) {
			t.Errorf("request %s: decode body of %d bytes differs from its own (%d bytes): %.200q…", f.reqID, len(got), len(want), got)
		}
		h := d.RequestHeaders(f.id)
		if v := header(h, "x-request-id"); v != f.reqID {
			t.Errorf("request %s: x-request-id %q", f.reqID, v)
		}
		if v := header(h, "x-pdroute-cluster"); v == "client-chosen" || v == "" {
			t.Errorf("request %s: route header %q", f.reqID, v)
		}
		if f.bigHead != "" && header(h, "x-big") != f.bigHead {
			t.Errorf("request %s: x-big header changed", f.reqID)
		}
		d.CallOnResponseHeaders(f.id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
		d.CallOnResponseBody(f.id, []byte(`{"choices":[]}`), true)
		d.CompleteHttpContext(f.id)
	}
	// body sizes (bytes of prompt) and answer sizes (KV block ids)
	steps := []struct{ size, blocks int }{
		{2 << 10, 8}, {300 << 10, 4096}, {1 << 10, 4}, {2 << 20, 20000}, {3 << 10, 16}, {200 << 10, 64},
	}
	for i := 0; i+1 < len(steps); i += 2 {
		a := start(i, steps[i].size, steps[i].blocks, i == 0)
		ta := pending()
		b := start(i+1, steps[i+1].size, steps[i+1].blocks, false)
		tb := pending()
		finish(a, ta)
		finish(b, tb)
	}
	if failed := d.Failed(); failed != "" {
		t.Fatalf("VM failed: %.300q", failed)
	}
}

// prefillAnswerOf is a NixlConnector prefill answer naming request i with
// blocks KV block ids starting at i.
func prefillAnswerOf(i, blocks int) []byte {
	var ids strings.Builder
	for k := range blocks {
		if k > 0 {
			ids.WriteByte(',')
		}
		ids.WriteString(strconv.Itoa(i + k))
	}
	return []byte(fmt.Sprintf(`{"id":"cmpl-%d","choices":[{"index":0,"text":"x","finish_reason":"length"}],`+
		`"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[%s],"remote_engine_id":"e%d","remote_request_id":"r%d","remote_host":"10.0.0.1","remote_port":5600}}`,
		i, ids.String(), i, i))
}
