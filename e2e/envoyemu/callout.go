package envoyemu

import (
	"strconv"
	"time"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// callout is one proxy_http_call in flight.
type callout struct {
	token    uint32
	rootID   uint32
	cluster  string
	headers  *headerMap
	body     []byte
	trailers *headerMap
	timeout  time.Duration // 0 = none
	cancel   func()        // set by the dispatcher; aborts the request
}

// calloutResult is what the plugin reads in proxy_on_http_call_response.
// Failed means a reset after the response started (or a buffer overflow):
// the callback then sees 0 headers and proxy_get_status answers 11 "reset".
type calloutResult struct {
	headers  *headerMap
	body     []byte
	trailers *headerMap
	failed   bool
}

// httpCall is Context::httpCall on a root context.
func (c *ctxState) httpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string, timeoutMs int32) (uint32, uint64) {
	if timeoutMs < 0 {
		return 0, stBadArgument
	}
	if !c.v.proc.hasCluster(cluster) {
		return 0, stBadArgument
	}
	h := newHeaderMap(headers)
	_, hasPath := h.get(":path")
	_, hasMethod := h.get(":method")
	_, hasAuthority := h.get(":authority")
	if !hasPath || !hasMethod || !hasAuthority {
		return 0, stBadArgument
	}
	if len(body) > 0 {
		h.set("content-length", strconv.Itoa(len(body)))
	}
	c.v.nextHTTPCallID += 4
	co := &callout{
		token: c.v.nextHTTPCallID, rootID: c.id, cluster: cluster, headers: h, body: body,
		timeout: time.Duration(timeoutMs) * time.Millisecond,
	}
	if len(trailers) > 0 {
		co.trailers = newHeaderMap(trailers)
	}
	if c.callouts == nil {
		c.callouts = map[uint32]*callout{}
	}
	c.callouts[co.token] = co
	c.v.env.dispatch(c.v, co)
	return co.token, stOK
}

// deliverCallout is Context::onHttpCallSuccess/onHttpCallFailure: it runs on
// the VM's goroutine, after (never inside) the call that dispatched.
func (v *vm) deliverCallout(co *callout, res *calloutResult) {
	root := v.contexts[co.rootID]
	if v.closed || root == nil || root.callouts[co.token] != co {
		return // the root context died: the call was cancelled
	}
	if v.inVMCall() {
		v.addAfterVMCall(func() { v.deliverCallout(co, res) })
		return
	}
	v.proc.logLine(LevelDebug, v.name, "wasm: http call "+strconv.FormatUint(uint64(co.token), 10)+" to "+co.cluster+
		" answered (failed="+strconv.FormatBool(res.failed)+")")
	nh, nt := 0, 0
	if res.failed {
		root.statusCode = uint32(abispec.StatusBrokenConnection)
		root.statusMsg = "reset"
	} else {
		root.callResult = res
		nh, nt = res.headers.len(), res.trailers.len()
	}
	body := len(res.body)
	if res.failed {
		body = 0
	}
	v.deferActions(func() {
		v.addAfterVMCall(func() {
			root.callResult = nil
			if res.failed {
				root.statusMsg = ""
			}
			delete(root.callouts, co.token)
		})
		if !root.isFailed() && v.fns["proxy_on_http_call_response"] != nil {
			v.call(root, "proxy_on_http_call_response", uint64(root.id), uint64(co.token), uint64(nh), uint64(body), uint64(nt))
		}
	})
}

// cancelCallouts aborts every call of a dying root context.
func (c *ctxState) cancelCallouts() {
	for token, co := range c.callouts {
		if co.cancel != nil {
			co.cancel()
		}
		delete(c.callouts, token)
	}
}
