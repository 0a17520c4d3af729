package abi

import (
	"errors"
	"fmt"
	"math"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// whole asks a buffer read for everything from start: Envoy clamps the size.
const whole = math.MaxInt32

// bufferOp is how setBuffer changes a buffer.
type bufferOp int

const (
	bufferAppend bufferOp = iota
	bufferPrepend
	bufferReplace
)

var (
	errEmptyPath      = errors.New("pdroute/abi: property path must not be empty")
	errEmptyProperty  = errors.New("pdroute/abi: property value must not be empty")
	errEmptyQueueItem = errors.New("pdroute/abi: shared queue item must not be empty")
)

// SetVMContext installs the plugin. Call it from the main package's init():
// it only records ctx (wrapped by Guard) and makes no host call, because
// Envoy traps every host call other than logging while the module starts.
func SetVMContext(ctx types.VMContext) { setVMContext(Guard(ctx)) }

// LogTrace logs msg at trace level.
func LogTrace(msg string) { logMessage(abispec.LogLevelTrace, msg) }

// LogTracef formats like fmt.Sprintf and logs at trace level.
func LogTracef(format string, args ...any) {
	logMessage(abispec.LogLevelTrace, fmt.Sprintf(format, args...))
}

// LogDebug logs msg at debug level.
func LogDebug(msg string) { logMessage(abispec.LogLevelDebug, msg) }

// LogDebugf formats like fmt.Sprintf and logs at debug level.
func LogDebugf(format string, args ...any) {
	logMessage(abispec.LogLevelDebug, fmt.Sprintf(format, args...))
}

// LogInfo logs msg at info level.
func LogInfo(msg string) { logMessage(abispec.LogLevelInfo, msg) }

// LogInfof formats like fmt.Sprintf and logs at info level.
func LogInfof(format string, args ...any) {
	logMessage(abispec.LogLevelInfo, fmt.Sprintf(format, args...))
}

// LogWarn logs msg at warn level.
func LogWarn(msg string) { logMessage(abispec.LogLevelWarn, msg) }

// LogWarnf formats like fmt.Sprintf and logs at warn level.
func LogWarnf(format string, args ...any) {
	logMessage(abispec.LogLevelWarn, fmt.Sprintf(format, args...))
}

// LogError logs msg at error level.
func LogError(msg string) { logMessage(abispec.LogLevelError, msg) }

// LogErrorf formats like fmt.Sprintf and logs at error level.
func LogErrorf(format string, args ...any) {
	logMessage(abispec.LogLevelError, fmt.Sprintf(format, args...))
}

// LogCritical logs msg at critical level.
func LogCritical(msg string) { logMessage(abispec.LogLevelCritical, msg) }

// LogCriticalf formats like fmt.Sprintf and logs at critical level.
func LogCriticalf(format string, args ...any) {
	logMessage(abispec.LogLevelCritical, fmt.Sprintf(format, args...))
}

// GetLogLevel returns the host's current level for wasm logs
// (proxy_get_log_level, ABI 0.2.1), so callers can skip building messages
// that would be dropped. Under proxytest, which keeps every level, it
// returns abispec.LogLevelTrace.
func GetLogLevel() (abispec.LogLevel, error) { return getLogLevel() }

// GetProperty returns the host property at path (e.g. {"plugin_root_id"} or
// {"request", "path"}); see Envoy's attribute docs for the encodings.
func GetProperty(path []string) ([]byte, error) {
	if len(path) == 0 {
		return nil, errEmptyPath
	}
	return getProperty(path)
}

// GetPropertyMap returns a map- or list-typed property decoded from the ABI
// pairs encoding (a list's values are empty strings).
func GetPropertyMap(path []string) ([][2]string, error) {
	b, err := GetProperty(path)
	if err != nil {
		return nil, err
	}
	return abispec.ParsePairs(b)
}

// SetProperty sets the host property at path (Envoy keeps it as filter
// state "wasm.<path>"). Empty values are rejected, as in the SDK.
func SetProperty(path []string, data []byte) error {
	if len(path) == 0 {
		return errEmptyPath
	}
	if len(data) == 0 {
		return errEmptyProperty
	}
	return setProperty(path, data)
}

// GetVMConfiguration returns vm_config.configuration. An empty configuration
// is types.ErrorStatusNotFound, as in the SDK.
func GetVMConfiguration() ([]byte, error) {
	return getBuffer(abispec.BufferTypeVMConfiguration, 0, whole)
}

// GetPluginConfiguration returns the plugin configuration. Envoy serves it
// only during OnPluginStart. An empty configuration is
// types.ErrorStatusNotFound, as in the SDK.
func GetPluginConfiguration() ([]byte, error) {
	return getBuffer(abispec.BufferTypePluginConfiguration, 0, whole)
}

// GetHttpRequestHeaders returns all request headers. Envoy serves them in
// OnHttpRequestHeaders and while the request is paused; an empty or
// unavailable map is types.ErrorStatusNotFound.
func GetHttpRequestHeaders() ([][2]string, error) {
	return getMap(abispec.MapTypeHttpRequestHeaders)
}

// VisitHttpRequestHeaders calls fn with each request header in order, read
// with one host call and no allocation: key and value lie in memory the
// next read reuses, so they are valid only while fn runs (copy what you
// keep; string(value) does). An unavailable map is
// types.ErrorStatusNotFound, as for GetHttpRequestHeaders.
func VisitHttpRequestHeaders(fn func(key, value []byte)) error {
	return visitMap(abispec.MapTypeHttpRequestHeaders, fn)
}

// GetHttpRequestHeader returns the first value of request header key.
func GetHttpRequestHeader(key string) (string, error) {
	return getMapValue(abispec.MapTypeHttpRequestHeaders, key)
}

// AddHttpRequestHeader appends a request header (duplicates allowed).
// Changing request headers makes Envoy re-resolve the route (ABI ≤ 0.2.1).
func AddHttpRequestHeader(key, value string) error {
	return addMapValue(abispec.MapTypeHttpRequestHeaders, key, value)
}

// ReplaceHttpRequestHeader sets request header key to value.
func ReplaceHttpRequestHeader(key, value string) error {
	return replaceMapValue(abispec.MapTypeHttpRequestHeaders, key, value)
}

// RemoveHttpRequestHeader removes every value of request header key.
func RemoveHttpRequestHeader(key string) error {
	return removeMapValue(abispec.MapTypeHttpRequestHeaders, key)
}

// ReplaceHttpRequestHeaders replaces all request headers with headers.
func ReplaceHttpRequestHeaders(headers [][2]string) error {
	return setMap(abispec.MapTypeHttpRequestHeaders, headers)
}

// GetHttpRequestBody returns up to maxSize bytes of the buffered request body
// from start. Envoy serves it in OnHttpRequestBody and, while the request is
// paused, from any callback with the stream as effective context.
func GetHttpRequestBody(start, maxSize int) ([]byte, error) {
	return getBuffer(abispec.BufferTypeHttpRequestBody, start, maxSize)
}

// GetHttpRequestBodyInto is GetHttpRequestBody reading into dst's room:
// when the body fits, the host writes it there and the result aliases dst;
// otherwise the result is a fresh allocation with some room to spare, which
// the caller may keep as its next dst. A caller that reuses one buffer so
// spares a body-sized allocation (and its zeroing) per read, and must not
// keep the result, or anything aliasing it, past the next read into dst.
func GetHttpRequestBodyInto(dst []byte, start, maxSize int) ([]byte, error) {
	return getBufferInto(abispec.BufferTypeHttpRequestBody, dst, start, maxSize)
}

// AppendHttpRequestBody appends data to the buffered request body. The
// caller fixes or removes content-length when the length changes.
func AppendHttpRequestBody(data []byte) error {
	return setBuffer(abispec.BufferTypeHttpRequestBody, bufferAppend, data)
}

// PrependHttpRequestBody prepends data to the buffered request body.
func PrependHttpRequestBody(data []byte) error {
	return setBuffer(abispec.BufferTypeHttpRequestBody, bufferPrepend, data)
}

// ReplaceHttpRequestBody replaces the buffered request body with data.
func ReplaceHttpRequestBody(data []byte) error {
	return setBuffer(abispec.BufferTypeHttpRequestBody, bufferReplace, data)
}

// EditHttpRequestBody drops the first drain bytes of the buffered request
// body and puts prefix in front of the rest: Envoy's
// proxy_set_buffer_bytes(start 0, size drain). A rewrite that only touches
// the body's first members then never copies the rest (the prompt) through
// the wasm heap. The caller fixes content-length.
func EditHttpRequestBody(drain int, prefix []byte) error {
	return drainPrepend(abispec.BufferTypeHttpRequestBody, drain, prefix)
}

// RandomBytes fills b from the host's random source (WASI random_get; in
// Envoy, BoringSSL's RAND_bytes), at most 64 KiB per call as Envoy allows.
//
// Use it instead of crypto/rand inside the module: Go's crypto/rand arms a
// one-minute timer on its first use (a warning for a blocked getrandom), and
// a timer makes every later garbage collection poll the netpoller through
// WASI poll_oneoff, which Envoy 1.33–1.38 answer with ENOSYS: the runtime
// throws and the VM dies.
func RandomBytes(b []byte) error { return randomBytes(b) }

// GetHttpRequestTrailers returns all request trailers.
func GetHttpRequestTrailers() ([][2]string, error) {
	return getMap(abispec.MapTypeHttpRequestTrailers)
}

// GetHttpRequestTrailer returns the first value of request trailer key.
func GetHttpRequestTrailer(key string) (string, error) {
	return getMapValue(abispec.MapTypeHttpRequestTrailers, key)
}

// AddHttpRequestTrailer appends a request trailer.
func AddHttpRequestTrailer(key, value string) error {
	return addMapValue(abispec.MapTypeHttpRequestTrailers, key, value)
}

// ReplaceHttpRequestTrailer sets request trailer key to value.
func ReplaceHttpRequestTrailer(key, value string) error {
	return replaceMapValue(abispec.MapTypeHttpRequestTrailers, key, value)
}

// RemoveHttpRequestTrailer removes every value of request trailer key.
func RemoveHttpRequestTrailer(key string) error {
	return removeMapValue(abispec.MapTypeHttpRequestTrailers, key)
}

// ReplaceHttpRequestTrailers replaces all request trailers.
func ReplaceHttpRequestTrailers(trailers [][2]string) error {
	return setMap(abispec.MapTypeHttpRequestTrailers, trailers)
}

// GetHttpResponseHeaders returns all response headers (OnHttpResponseHeaders
// or while the response is paused).
func GetHttpResponseHeaders() ([][2]string, error) {
	return getMap(abispec.MapTypeHttpResponseHeaders)
}

// VisitHttpResponseHeaders is VisitHttpRequestHeaders for the response
// headers.
func VisitHttpResponseHeaders(fn func(key, value []byte)) error {
	return visitMap(abispec.MapTypeHttpResponseHeaders, fn)
}

// GetHttpResponseHeader returns the first value of response header key.
func GetHttpResponseHeader(key string) (string, error) {
	return getMapValue(abispec.MapTypeHttpResponseHeaders, key)
}

// AddHttpResponseHeader appends a response header.
func AddHttpResponseHeader(key, value string) error {
	return addMapValue(abispec.MapTypeHttpResponseHeaders, key, value)
}

// ReplaceHttpResponseHeader sets response header key to value.
func ReplaceHttpResponseHeader(key, value string) error {
	return replaceMapValue(abispec.MapTypeHttpResponseHeaders, key, value)
}

// RemoveHttpResponseHeader removes every value of response header key.
func RemoveHttpResponseHeader(key string) error {
	return removeMapValue(abispec.MapTypeHttpResponseHeaders, key)
}

// ReplaceHttpResponseHeaders replaces all response headers.
func ReplaceHttpResponseHeaders(headers [][2]string) error {
	return setMap(abispec.MapTypeHttpResponseHeaders, headers)
}

// GetHttpResponseBody returns up to maxSize bytes of the buffered response
// body from start.
func GetHttpResponseBody(start, maxSize int) ([]byte, error) {
	return getBuffer(abispec.BufferTypeHttpResponseBody, start, maxSize)
}

// AppendHttpResponseBody appends data to the buffered response body.
func AppendHttpResponseBody(data []byte) error {
	return setBuffer(abispec.BufferTypeHttpResponseBody, bufferAppend, data)
}

// PrependHttpResponseBody prepends data to the buffered response body.
func PrependHttpResponseBody(data []byte) error {
	return setBuffer(abispec.BufferTypeHttpResponseBody, bufferPrepend, data)
}

// ReplaceHttpResponseBody replaces the buffered response body with data.
func ReplaceHttpResponseBody(data []byte) error {
	return setBuffer(abispec.BufferTypeHttpResponseBody, bufferReplace, data)
}

// GetHttpResponseTrailers returns all response trailers.
func GetHttpResponseTrailers() ([][2]string, error) {
	return getMap(abispec.MapTypeHttpResponseTrailers)
}

// GetHttpResponseTrailer returns the first value of response trailer key.
func GetHttpResponseTrailer(key string) (string, error) {
	return getMapValue(abispec.MapTypeHttpResponseTrailers, key)
}

// AddHttpResponseTrailer appends a response trailer.
func AddHttpResponseTrailer(key, value string) error {
	return addMapValue(abispec.MapTypeHttpResponseTrailers, key, value)
}

// ReplaceHttpResponseTrailer sets response trailer key to value.
func ReplaceHttpResponseTrailer(key, value string) error {
	return replaceMapValue(abispec.MapTypeHttpResponseTrailers, key, value)
}

// RemoveHttpResponseTrailer removes every value of response trailer key.
func RemoveHttpResponseTrailer(key string) error {
	return removeMapValue(abispec.MapTypeHttpResponseTrailers, key)
}

// ReplaceHttpResponseTrailers replaces all response trailers.
func ReplaceHttpResponseTrailers(trailers [][2]string) error {
	return setMap(abispec.MapTypeHttpResponseTrailers, trailers)
}

// ResumeHttpRequest continues a paused request (proxy_continue_stream(0)).
// Envoy applies it after the current callback returns. Call it with the
// stream as effective context (see SetEffectiveContext) from root callbacks.
func ResumeHttpRequest() error { return continueStream(abispec.StreamTypeRequest) }

// ResumeHttpResponse continues a paused response (proxy_continue_stream(1)).
func ResumeHttpResponse() error {
	if s := streamOf(guards.active); s != nil {
		s.responseStarted = true
	}
	return continueStream(abispec.StreamTypeResponse)
}

// CloseHttpRequest resets the stream from the request side
// (proxy_close_stream(0)). The SDK has no HTTP close, so under proxytest it
// returns types.ErrorUnimplemented.
func CloseHttpRequest() error { return closeStream(abispec.StreamTypeRequest) }

// CloseHttpResponse resets the stream from the response side
// (proxy_close_stream(1)): the only way to fail a stream whose response
// headers already went downstream. types.ErrorUnimplemented under proxytest.
func CloseHttpResponse() error { return closeStream(abispec.StreamTypeResponse) }

// SendHttpResponse sends a local reply with statusCode, extra headers and body
// to the effective stream; return types.ActionPause from the current
// callback. gRPCStatus -1 means none. Impossible once response headers went
// downstream (use CloseHttpResponse then). The reply passes back through this
// filter's own response callbacks.
func SendHttpResponse(statusCode uint32, headers [][2]string, body []byte, gRPCStatus int32) error {
	return sendLocalResponse(statusCode, "", headers, body, gRPCStatus)
}

// DispatchHttpCall sends an HTTP request to cluster (headers must include
// :method, :path and :authority, else Envoy answers BadArgument) with a
// timeout (0 = none). callBack runs later, never inside the dispatching
// callback, with the dispatching context as effective context; numHeaders 0
// means the call failed (see GetStatus). If the dispatching stream has ended
// by then the callback is dropped. A panic in callBack fails that stream as a
// panic in its own callbacks does.
func DispatchHttpCall(
	cluster string,
	headers [][2]string,
	body []byte,
	trailers [][2]string,
	timeoutMillisecond uint32,
	callBack func(numHeaders, bodySize, numTrailers int),
) (calloutID uint32, err error) {
	return httpCall(cluster, headers, body, trailers, timeoutMillisecond, guards.active, callBack)
}

// GetHttpCallResponseHeaders returns the http-call response headers; only
// inside a DispatchHttpCall callback.
func GetHttpCallResponseHeaders() ([][2]string, error) {
	return getMap(abispec.MapTypeHttpCallResponseHeaders)
}

// VisitHttpCallResponseHeaders is VisitHttpRequestHeaders for the
// http-call response headers; only inside a DispatchHttpCall callback.
func VisitHttpCallResponseHeaders(fn func(key, value []byte)) error {
	return visitMap(abispec.MapTypeHttpCallResponseHeaders, fn)
}

// GetHttpCallResponseBody returns up to maxSize bytes of the http-call
// response body from start; only inside a DispatchHttpCall callback.
func GetHttpCallResponseBody(start, maxSize int) ([]byte, error) {
	return getBuffer(abispec.BufferTypeHttpCallResponseBody, start, maxSize)
}

// GetHttpCallResponseBodyInto is GetHttpCallResponseBody reading into
// dst's room, as GetHttpRequestBodyInto.
func GetHttpCallResponseBodyInto(dst []byte, start, maxSize int) ([]byte, error) {
	return getBufferInto(abispec.BufferTypeHttpCallResponseBody, dst, start, maxSize)
}

// GetHttpCallResponseTrailers returns the http-call response trailers; only
// inside a DispatchHttpCall callback.
func GetHttpCallResponseTrailers() ([][2]string, error) {
	return getMap(abispec.MapTypeHttpCallResponseTrailers)
}

// GetStatus returns the host's last async status (proxy_get_status): after
// a failed http call (callback with numHeaders 0) Envoy reports code 11
// (BrokenConnection) and message "reset". Envoy never clears the code after
// a failure, so read it only when numHeaders is 0. Under proxytest it
// reports 11 "reset" inside a callback that got 0 headers and 0 "" otherwise.
func GetStatus() (code uint32, message string, err error) { return getStatus() }

// GetSharedData returns the value and CAS of key in the VM-id-wide store.
// A missing key is types.ErrorStatusNotFound. There is no delete: pdroute
// writes an empty value and treats empty as absent.
func GetSharedData(key string) (value []byte, cas uint32, err error) {
	return getSharedData("", key)
}

// GetSharedDataUnder is GetSharedData(prefix + key) without building the
// joined key as a string: in the VM it is written into a buffer the host
// reads during the call, sparing an allocation per access.
func GetSharedDataUnder(prefix, key string) (value []byte, cas uint32, err error) {
	return getSharedData(prefix, key)
}

// GetSharedDataUnderInto is GetSharedDataUnder reading the value into
// dst's room when it fits (the value then aliases dst), else into a new
// allocation.
func GetSharedDataUnderInto(dst []byte, prefix, key string) (value []byte, cas uint32, err error) {
	return getSharedDataInto(dst, prefix, key)
}

// SetSharedDataUnder is SetSharedData(prefix + key, data, cas), as
// GetSharedDataUnder.
func SetSharedDataUnder(prefix, key string, data []byte, cas uint32) error {
	return setSharedData(prefix, key, data, cas)
}

// SetSharedData stores data under key if cas still matches (cas 0 always
// writes); a concurrent change is types.ErrorStatusCasMismatch — retry.
func SetSharedData(key string, data []byte, cas uint32) error {
	return setSharedData("", key, data, cas)
}

// RegisterSharedQueue creates or reopens queue name for this VM id and makes
// the calling root the queue's only consumer (OnQueueReady).
func RegisterSharedQueue(name string) (queueID uint32, err error) {
	return registerSharedQueue(name)
}

// ResolveSharedQueue returns the id of queue queueName of vmID ("" = own).
func ResolveSharedQueue(vmID, queueName string) (queueID uint32, err error) {
	return resolveSharedQueue(vmID, queueName)
}

// EnqueueSharedQueue appends data to the queue. Empty items are rejected
// because the SDK cannot pass them under proxytest.
func EnqueueSharedQueue(queueID uint32, data []byte) error {
	if len(data) == 0 {
		return errEmptyQueueItem
	}
	return enqueueSharedQueue(queueID, data)
}

// DequeueSharedQueue takes the oldest item; an empty queue is
// types.ErrorStatusEmpty.
func DequeueSharedQueue(queueID uint32) ([]byte, error) { return dequeueSharedQueue(queueID) }

// SetTickPeriodMilliSeconds sets the OnTick period of the current root
// context; 0 stops it. Envoy re-arms the timer after each tick returns.
func SetTickPeriodMilliSeconds(millSec uint32) error { return setTickPeriod(millSec) }

// SetEffectiveContext makes contextID the context later host calls of this
// callback act on, e.g. to resume a stream from OnTick or a root http-call
// callback. It also attributes http calls dispatched afterwards to contextID.
func SetEffectiveContext(contextID uint32) error {
	if err := setEffectiveContext(contextID); err != nil {
		return err
	}
	guards.active = contextID
	return nil
}

// PluginDone tells the host a root whose OnPluginDone returned false has
// finished its pending work and may be deleted.
func PluginDone() { done() }
