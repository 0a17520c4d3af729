package envoyemu

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// upstreamCluster is a cluster at run time: its HTTP/1.1 client and endpoint picker.
type upstreamCluster struct {
	cfg       *ClusterConfig
	transport *http.Transport
	next      atomic.Uint64
}

func newUpstreamCluster(cfg *ClusterConfig) *upstreamCluster {
	d := &net.Dialer{Timeout: cfg.ConnectTimeout}
	return &upstreamCluster{cfg: cfg, transport: &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     time.Hour,
		DisableCompression:  true,
	}}
}

// pick returns the endpoint for a request: round robin over a STATIC
// cluster's endpoints, or for ORIGINAL_DST the IP:port in the configured
// header of h (for a proxy_http_call, h is the call's own headers). false
// means no host: Envoy answers 503 "no healthy upstream".
func (c *upstreamCluster) pick(h *headerMap) (string, bool) {
	if c.cfg.OriginalDst {
		if c.cfg.DstHeader == "" {
			return "", false
		}
		v, ok := h.get(c.cfg.DstHeader)
		if !ok {
			return "", false
		}
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			return "", false
		}
		return ap.String(), true
	}
	if len(c.cfg.Endpoints) == 0 {
		return "", false
	}
	i := c.next.Add(1) - 1
	return c.cfg.Endpoints[i%uint64(len(c.cfg.Endpoints))], true
}

// hopByHop are the headers an HTTP/1.1 proxy does not forward.
var hopByHop = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "content-length"}

// newUpstreamRequest turns an Envoy header map into the HTTP/1.1 request the
// router sends to addr. contentLength < 0 means chunked.
func newUpstreamRequest(ctx context.Context, addr string, h *headerMap, body io.Reader, contentLength int64) (*http.Request, error) {
	method, _ := h.get(":method")
	path, _ := h.get(":path")
	authority, _ := h.get(":authority")
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, err
	}
	u.Scheme, u.Host = "http", addr
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Host = authority
	req.ContentLength = contentLength
	if body == nil || contentLength == 0 {
		req.Body = http.NoBody
	}
	for _, p := range h.pairs {
		if strings.HasPrefix(p[0], ":") || slices.Contains(hopByHop, p[0]) {
			continue
		}
		req.Header.Add(p[0], p[1])
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // keep Go from adding its own
	}
	return req, nil
}

// contentLength returns the request's declared content-length, or -1.
func contentLength(h *headerMap) int64 {
	if v, ok := h.get("content-length"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// responseHeaderMap is an upstream response as Envoy's codec presents it:
// ":status" first, then the headers lower-cased (sorted, as Go loses order).
func responseHeaderMap(resp *http.Response) *headerMap {
	h := &headerMap{}
	h.add(":status", strconv.Itoa(resp.StatusCode))
	addHeaders(h, resp.Header)
	return h
}

func addHeaders(h *headerMap, src http.Header) {
	keys := make([]string, 0, len(src))
	for k := range src {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range src[k] {
			h.add(k, v)
		}
	}
}

func trailerMap(t http.Header) *headerMap {
	if len(t) == 0 {
		return nil
	}
	h := &headerMap{}
	addHeaders(h, t)
	return h
}

// localReply is a response Envoy generates itself.
type localReply struct {
	code    int
	body    string
	details string
}

var (
	replyNoHealthyUpstream = localReply{503, "no healthy upstream", "no_healthy_upstream"}
	replyUpstreamTimeout   = localReply{504, "upstream request timeout", "upstream_response_timeout"}
	replyRouteNotFound     = localReply{404, "", "route_not_found"}
	replyTooLarge          = localReply{413, "Payload Too Large", "request_payload_too_large"}
	replyRespTooLarge      = localReply{500, "Internal Server Error", "response_payload_too_large"}
	replyIdleTimeout       = localReply{408, "stream timeout", "stream_idle_timeout"}
	replyRequestTimeout    = localReply{408, "request timeout", "request_overall_timeout"}
)

// upstreamFailure is the router's reply when the upstream failed before
// sending response headers.
func upstreamFailure(err error) localReply {
	const prefix = "upstream connect error or disconnect/reset before headers. reset reason: "
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if op.Timeout() {
			return localReply{503, prefix + "connection timeout", "upstream_reset_before_response_started{connection_timeout}"}
		}
		errno := "111"
		var sysErr syscall.Errno
		if errors.As(err, &sysErr) {
			errno = strconv.Itoa(int(sysErr))
		}
		return localReply{503, prefix + "remote connection failure, transport failure reason: delayed connect error: " + errno,
			"upstream_reset_before_response_started{remote_connection_failure,delayed_connect_error:_" + errno + "}"}
	}
	return localReply{503, prefix + "connection termination", "upstream_reset_before_response_started{connection_termination}"}
}

// replyHeaders are the headers of a local reply before the filter chain sees
// them: ":status", plus content-length and content-type text/plain when there
// is a body, plus the extra headers.
func replyHeaders(code int, body []byte, extra [][2]string) *headerMap {
	h := &headerMap{}
	h.add(":status", strconv.Itoa(code))
	// As Envoy's Utility::prepareLocalReply: the caller's headers first, then
	// text/plain only when they set no content-type.
	hasType := false
	for _, p := range extra {
		h.add(p[0], p[1])
		hasType = hasType || strings.EqualFold(p[0], "content-type")
	}
	if len(body) > 0 {
		h.add("content-length", strconv.Itoa(len(body)))
		if !hasType {
			h.add("content-type", "text/plain")
		}
	}
	return h
}

// doCallout performs a proxy_http_call like Envoy's async client: any HTTP
// answer is a result, including the router's own 503 (no host, connect
// failure) and 504 (timeout before headers); a reset after the headers is a
// failure. nil means the call was cancelled.
func doCallout(ctx context.Context, c *upstreamCluster, co *callout) *calloutResult {
	local := func(r localReply) *calloutResult {
		return &calloutResult{headers: replyHeaders(r.code, []byte(r.body), nil), body: []byte(r.body)}
	}
	addr, ok := c.pick(co.headers)
	if !ok {
		return local(replyNoHealthyUpstream)
	}
	callCtx := ctx
	if co.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, co.timeout)
		defer cancel()
	}
	req, err := newUpstreamRequest(callCtx, addr, co.headers, strings.NewReader(string(co.body)), int64(len(co.body)))
	if err != nil {
		return local(localReply{503, "upstream connect error or disconnect/reset before headers. reset reason: protocol error", "upstream_reset_before_response_started{protocol_error}"})
	}
	resp, err := c.transport.RoundTrip(req)
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil && callCtx.Err() != nil:
		return local(replyUpstreamTimeout)
	case err != nil:
		return local(upstreamFailure(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return &calloutResult{failed: true}
	}
	return &calloutResult{headers: responseHeaderMap(resp), body: body, trailers: trailerMap(resp.Trailer)}
}

// upstreamCall is the router's upstream request of one stream. Its goroutines
// do the I/O and post the results to the stream's worker.
type upstreamCall struct {
	s      *stream
	ctx    context.Context
	stop   context.CancelFunc
	pw     *io.PipeWriter
	writes *queue[upstreamWrite]
}

type upstreamWrite struct {
	data []byte
	eos  bool
	ack  func()
}

// responseChunk is the read size for response bodies.
const responseChunk = 16 << 10

// startUpstream sends the request headers (and, unless eos, a body stream)
// to addr and starts reading the response.
func startUpstream(s *stream, c *upstreamCluster, addr string, h *headerMap, eos bool) *upstreamCall {
	ctx, stop := context.WithCancel(context.Background())
	u := &upstreamCall{s: s, ctx: ctx, stop: stop}
	var body io.Reader
	length := int64(0)
	if !eos {
		pr, pw := io.Pipe()
		u.pw, body, length = pw, pr, contentLength(h)
		u.writes = newQueue[upstreamWrite]()
		go u.writeLoop()
	}
	req, err := newUpstreamRequest(ctx, addr, h, body, length)
	if err != nil {
		s.w.post(func() {
			s.onUpstreamFailure(localReply{503, "upstream connect error or disconnect/reset before headers. reset reason: protocol error",
				"upstream_reset_before_response_started{protocol_error}"})
		})
		return u
	}
	go u.roundTrip(c, req)
	return u
}

func (u *upstreamCall) roundTrip(c *upstreamCluster, req *http.Request) {
	s := u.s
	began := time.Now()
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		if u.ctx.Err() == nil {
			s.w.post(func() { s.onUpstreamFailure(upstreamFailure(err)) })
		}
		return
	}
	defer resp.Body.Close()
	h := responseHeaderMap(resp)
	h.add("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(began).Milliseconds(), 10))
	eos := resp.ContentLength == 0
	s.w.post(func() { s.onUpstreamHeaders(h, eos) })
	if eos {
		return
	}
	for {
		buf := make([]byte, responseChunk)
		n, err := resp.Body.Read(buf)
		eof := err == io.EOF
		if err != nil && !eof {
			if u.ctx.Err() == nil {
				s.w.post(func() { s.onUpstreamFailure(upstreamFailure(err)) })
			}
			return
		}
		if n == 0 && !eof {
			continue
		}
		var trailers *headerMap
		if eof {
			trailers = trailerMap(resp.Trailer)
		}
		ack := make(chan struct{})
		chunk := buf[:n]
		s.w.post(func() { s.onUpstreamData(chunk, eof && trailers == nil, sync.OnceFunc(func() { close(ack) })) })
		if trailers != nil {
			s.w.post(func() { s.onUpstreamTrailers(trailers) })
		}
		if eof {
			return
		}
		select {
		case <-ack:
		case <-u.ctx.Done():
			return
		}
	}
}

// write queues request body bytes for the upstream; ack runs once they are
// written (so the client is read no faster than the upstream takes it).
func (u *upstreamCall) write(b []byte, eos bool, ack func()) {
	if u.writes == nil {
		callAck(ack)
		return
	}
	u.writes.push(upstreamWrite{data: b, eos: eos, ack: ack})
}

func (u *upstreamCall) writeLoop() {
	failed := false
	for {
		select {
		case <-u.writes.wake:
		case <-u.ctx.Done():
			for _, w := range u.writes.take() {
				callAck(w.ack)
			}
			return
		}
		for _, w := range u.writes.take() {
			if !failed && len(w.data) > 0 {
				if _, err := u.pw.Write(w.data); err != nil {
					failed = true
				}
			}
			callAck(w.ack)
			if w.eos {
				u.pw.Close()
				return
			}
		}
	}
}

// cancel abandons the upstream request.
func (u *upstreamCall) cancel() {
	u.stop()
	if u.pw != nil {
		u.pw.CloseWithError(context.Canceled)
	}
}
