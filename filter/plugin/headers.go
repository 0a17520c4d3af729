package plugin

import (
	"strconv"
	"unsafe"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
)

// Header maps are read whole, once per callback, with one host call
// (abi.Visit*Headers) rather than one proxy_get_header_map_value per
// header: each of those is a host call, an allocation the host asks the
// VM for, and a string copied out of it. The visitor sees the map in
// memory the VM reuses; what a stream keeps is copied.

// requestHead is what OnHttpRequestHeaders reads that the stream does
// not keep.
type requestHead struct {
	// contentLength is the client's content-length ("" when none).
	contentLength string
	// routeHeader and originalDst: the client sent the route header or
	// x-envoy-original-dst-host (removed: they are the filter's alone).
	routeHeader, originalDst bool
}

// The request headers readRequestHeaders keeps, by index.
const (
	keptMethod = iota
	keptPath
	keptContentType
	keptAuthority
	keptAuthorization
	keptRequestID
	keptContentLength
	keptCount
)

// keptHeader is the index of request header key among the kept ones, or -1.
// Envoy's header keys are lower case.
func keptHeader(key []byte) int {
	switch string(key) {
	case ":method":
		return keptMethod
	case ":path":
		return keptPath
	case "content-type":
		return keptContentType
	case ":authority":
		return keptAuthority
	case "authorization":
		return keptAuthorization
	case "x-request-id":
		return keptRequestID
	case "content-length":
		return keptContentLength
	}
	return -1
}

// maxKeptHeaderBuf bounds the header buffer a reused stream keeps (wasm
// memory never shrinks); a larger one goes with the stream's reset.
const maxKeptHeaderBuf = 1 << 10

// readRequestHeaders reads the request headers in one host call and sets
// the stream's header fields. The first value of each counts, as
// proxy_get_header_map_value would return it. The kept values are gathered
// in the stream's own buffer, which the fields alias: it lives as long as
// the stream object and is only rewritten when the object, reset, serves
// another stream (newStream), so a reused stream reads its headers without
// an allocation.
func (s *stream) readRequestHeaders() requestHead {
	var h requestHead
	var spans [keptCount]struct{ at, n int }
	var seen [keptCount]bool
	buf := s.hdr[:0]
	route := s.cfg().RouteHeader
	_ = abi.VisitHttpRequestHeaders(func(key, value []byte) {
		if i := keptHeader(key); i >= 0 {
			if !seen[i] {
				seen[i] = true
				spans[i].at, spans[i].n = len(buf), len(value)
				buf = append(buf, value...)
			}
			return
		}
		switch string(key) { // lower case, as route_header must be
		case originalDstHeader:
			h.originalDst = true
		case route:
			h.routeHeader = true
		}
	})
	s.hdr = buf
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	var v [keptCount]string
	for i, sp := range spans {
		v[i] = all[sp.at : sp.at+sp.n]
	}
	s.method, s.path, s.contentType = v[keptMethod], v[keptPath], v[keptContentType]
	s.authority, s.authorization, s.clientRequestID = v[keptAuthority], v[keptAuthorization], v[keptRequestID]
	s.hasContentLength = v[keptContentLength] != ""
	h.contentLength = v[keptContentLength]
	return h
}

// responseHead is what the filter reads of response headers: the status
// (0 when absent or not a number) and whether the content type is a plain
// one (config.PlainContentType), the two things the response callbacks
// decide on.
type responseHead struct {
	status int
	plain  bool
}

// readResponseHeaders reads the response headers in one host call.
func readResponseHeaders() responseHead {
	var r responseHead
	var status, contentType bool
	_ = abi.VisitHttpResponseHeaders(func(key, value []byte) {
		switch string(key) {
		case ":status":
			if !status {
				status, r.status = true, atoi(value)
			}
		case "content-type":
			if !contentType {
				// value lives while this function runs, and
				// PlainContentType keeps nothing; an engine's usual
				// answer is JSON, which is not plain, without its call
				contentType = true
				r.plain = string(value) != "application/json" &&
					config.PlainContentType(unsafe.String(unsafe.SliceData(value), len(value)))
			}
		}
	})
	return r
}

// parseLength is strconv.Atoi(v) for a content-length: its digits are read
// here, and only another spelling goes to strconv.
func parseLength(v string) (int, bool) {
	if len(v) == 0 || len(v) > 18 {
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// atoi is the non-negative decimal number b, or 0 when b is anything else
// (an HTTP status; strconv.Atoi would need b as a string).
func atoi(b []byte) int {
	if len(b) == 0 || len(b) > 9 {
		return 0
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}
