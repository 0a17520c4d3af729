//go:build !wasip1

package abi

import (
	crand "crypto/rand"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"math"
	"strings"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// Native build: every primitive delegates to the SDK's proxywasm package, so
// the plugin runs under the SDK's proxytest host. Where the SDK has no
// equivalent, the primitive does the closest honest thing and says so.

func setVMContext(vm types.VMContext) { proxywasm.SetVMContext(vm) }

var sdkLog = [...]func(string){
	abispec.LogLevelTrace:    proxywasm.LogTrace,
	abispec.LogLevelDebug:    proxywasm.LogDebug,
	abispec.LogLevelInfo:     proxywasm.LogInfo,
	abispec.LogLevelWarn:     proxywasm.LogWarn,
	abispec.LogLevelError:    proxywasm.LogError,
	abispec.LogLevelCritical: proxywasm.LogCritical,
}

func logMessage(level abispec.LogLevel, msg string) { sdkLog[level](msg) }

// getLogLevel: proxytest records every level, so everything is enabled.
func getLogLevel() (abispec.LogLevel, error) { return abispec.LogLevelTrace, nil }

func getProperty(path []string) ([]byte, error)     { return proxywasm.GetProperty(path) }
func setProperty(path []string, value []byte) error { return proxywasm.SetProperty(path, value) }

// sdkMap holds the SDK functions serving one header map; nil where the SDK
// offers none (the public API never asks for those).
type sdkMap struct {
	get          func() ([][2]string, error)
	set          func([][2]string) error
	value        func(key string) (string, error)
	add, replace func(key, value string) error
	remove       func(key string) error
}

var sdkMaps = map[abispec.MapType]sdkMap{
	abispec.MapTypeHttpRequestHeaders: {
		proxywasm.GetHttpRequestHeaders, proxywasm.ReplaceHttpRequestHeaders,
		proxywasm.GetHttpRequestHeader, proxywasm.AddHttpRequestHeader,
		proxywasm.ReplaceHttpRequestHeader, proxywasm.RemoveHttpRequestHeader,
	},
	abispec.MapTypeHttpRequestTrailers: {
		proxywasm.GetHttpRequestTrailers, proxywasm.ReplaceHttpRequestTrailers,
		proxywasm.GetHttpRequestTrailer, proxywasm.AddHttpRequestTrailer,
		proxywasm.ReplaceHttpRequestTrailer, proxywasm.RemoveHttpRequestTrailer,
	},
	abispec.MapTypeHttpResponseHeaders: {
		proxywasm.GetHttpResponseHeaders, proxywasm.ReplaceHttpResponseHeaders,
		proxywasm.GetHttpResponseHeader, proxywasm.AddHttpResponseHeader,
		proxywasm.ReplaceHttpResponseHeader, proxywasm.RemoveHttpResponseHeader,
	},
	abispec.MapTypeHttpResponseTrailers: {
		proxywasm.GetHttpResponseTrailers, proxywasm.ReplaceHttpResponseTrailers,
		proxywasm.GetHttpResponseTrailer, proxywasm.AddHttpResponseTrailer,
		proxywasm.ReplaceHttpResponseTrailer, proxywasm.RemoveHttpResponseTrailer,
	},
	abispec.MapTypeHttpCallResponseHeaders:  {get: proxywasm.GetHttpCallResponseHeaders},
	abispec.MapTypeHttpCallResponseTrailers: {get: proxywasm.GetHttpCallResponseTrailers},
}

func getMap(t abispec.MapType) ([][2]string, error)             { return sdkMaps[t].get() }
func setMap(t abispec.MapType, pairs [][2]string) error         { return sdkMaps[t].set(pairs) }
func getMapValue(t abispec.MapType, key string) (string, error) { return sdkMaps[t].value(key) }

// visitMap: proxytest returns the map as strings; each is copied for fn.
func visitMap(t abispec.MapType, fn func(key, value []byte)) error {
	pairs, err := sdkMaps[t].get()
	if err != nil {
		return err
	}
	for _, p := range pairs {
		fn([]byte(p[0]), []byte(p[1]))
	}
	return nil
}
func addMapValue(t abispec.MapType, key, value string) error {
	return sdkMaps[t].add(key, value)
}
func replaceMapValue(t abispec.MapType, key, value string) error {
	return sdkMaps[t].replace(key, value)
}
func removeMapValue(t abispec.MapType, key string) error { return sdkMaps[t].remove(key) }

// sdkBuffer holds the SDK functions serving one buffer.
type sdkBuffer struct {
	get                      func(start, maxSize int) ([]byte, error)
	append, prepend, replace func([]byte) error
}

// wholeBuffer adapts the SDK's configuration getters, which take no range:
// the public API always reads them whole.
func wholeBuffer(get func() ([]byte, error)) func(int, int) ([]byte, error) {
	return func(int, int) ([]byte, error) { return get() }
}

var sdkBuffers = map[abispec.BufferType]sdkBuffer{
	abispec.BufferTypeHttpRequestBody: {
		proxywasm.GetHttpRequestBody, proxywasm.AppendHttpRequestBody,
		proxywasm.PrependHttpRequestBody, proxywasm.ReplaceHttpRequestBody,
	},
	abispec.BufferTypeHttpResponseBody: {
		proxywasm.GetHttpResponseBody, proxywasm.AppendHttpResponseBody,
		proxywasm.PrependHttpResponseBody, proxywasm.ReplaceHttpResponseBody,
	},
	abispec.BufferTypeHttpCallResponseBody: {get: proxywasm.GetHttpCallResponseBody},
	abispec.BufferTypeVMConfiguration:      {get: wholeBuffer(proxywasm.GetVMConfiguration)},
	abispec.BufferTypePluginConfiguration:  {get: wholeBuffer(proxywasm.GetPluginConfiguration)},
}

func getBuffer(t abispec.BufferType, start, maxSize int) ([]byte, error) {
	return sdkBuffers[t].get(start, maxSize)
}

// getBufferInto copies into dst's room, so that natively too the result
// aliases dst, as in the VM when it fits.
func getBufferInto(t abispec.BufferType, dst []byte, start, maxSize int) ([]byte, error) {
	b, err := getBuffer(t, start, maxSize)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return b, nil
	}
	return append(dst[:0], b...), nil
}

func setBuffer(t abispec.BufferType, op bufferOp, data []byte) error {
	b := sdkBuffers[t]
	switch op {
	case bufferAppend:
		return b.append(data)
	case bufferPrepend:
		return b.prepend(data)
	default:
		return b.replace(data)
	}
}

// drainPrepend emulates proxy_set_buffer_bytes(t, 0, drain, data) with the
// SDK's whole-buffer calls: proxytest cannot drain part of a buffer.
func drainPrepend(t abispec.BufferType, drain int, data []byte) error {
	b := sdkBuffers[t]
	cur, err := b.get(0, math.MaxInt32)
	if err != nil {
		return err
	}
	if drain > len(cur) {
		drain = len(cur)
	}
	return b.replace(append(append(make([]byte, 0, len(data)+len(cur)-drain), data...), cur[drain:]...))
}

func continueStream(t abispec.StreamType) error {
	if t == abispec.StreamTypeResponse {
		return proxywasm.ResumeHttpResponse()
	}
	return proxywasm.ResumeHttpRequest()
}

// closeStream: the SDK exposes no HTTP close (its emulator only logs), so be
// honest about it.
func closeStream(abispec.StreamType) error { return types.ErrorUnimplemented }

// sendLocalResponse: the SDK cannot pass response code details; they are
// dropped.
func sendLocalResponse(code uint32, _ string, headers [][2]string, body []byte, grpcStatus int32) error {
	return proxywasm.SendHttpResponse(code, headers, body, grpcStatus)
}

// callStatus is what GetStatus reports: Envoy's (11, "reset") inside the
// callback of a failed call, else (0, "").
var callStatus struct {
	code    uint32
	message string
}

// CallBodyCopied: proxytest keeps a DispatchHttpCall body as it is given,
// for tests to read, so it is not to be reused.
const CallBodyCopied = false

// reuseGuards: proxytest keeps the contexts it created and may call them
// after their end, so a stream's guard is not reused.
const reuseGuards = false

func httpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string,
	timeout uint32, caller uint32, callBack func(int, int, int)) (uint32, error) {
	callBack = guardCallout(caller, callBack)
	return proxywasm.DispatchHttpCall(cluster, headers, body, trailers, timeout,
		func(numHeaders, bodySize, numTrailers int) {
			if numHeaders == 0 {
				callStatus.code, callStatus.message = uint32(abispec.StatusBrokenConnection), "reset"
			}
			defer func() { callStatus.code, callStatus.message = 0, "" }()
			callBack(numHeaders, bodySize, numTrailers)
		})
}

func getStatus() (uint32, string, error) { return callStatus.code, callStatus.message, nil }

// joinKey returns prefix + key as a string of its own: proxytest keeps
// the keys it is given, and lb/prefix passes keys that share a buffer it
// reuses (prefix + key is key itself when prefix is empty).
func joinKey(prefix, key string) string { return strings.Clone(prefix + key) }

func getSharedData(prefix, key string) ([]byte, uint32, error) {
	return proxywasm.GetSharedData(joinKey(prefix, key))
}

// getSharedDataInto is getSharedData: proxytest returns its own copy.
func getSharedDataInto(_ []byte, prefix, key string) ([]byte, uint32, error) {
	return getSharedData(prefix, key)
}

func setSharedData(prefix, key string, data []byte, cas uint32) error {
	return proxywasm.SetSharedData(joinKey(prefix, key), data, cas)
}

func registerSharedQueue(name string) (uint32, error) { return proxywasm.RegisterSharedQueue(name) }
func resolveSharedQueue(vmID, name string) (uint32, error) {
	return proxywasm.ResolveSharedQueue(vmID, name)
}
func enqueueSharedQueue(id uint32, data []byte) error { return proxywasm.EnqueueSharedQueue(id, data) }
func dequeueSharedQueue(id uint32) ([]byte, error)    { return proxywasm.DequeueSharedQueue(id) }

func setTickPeriod(ms uint32) error       { return proxywasm.SetTickPeriodMilliSeconds(ms) }
func setEffectiveContext(id uint32) error { return proxywasm.SetEffectiveContext(id) }
func done()                               { proxywasm.PluginDone() }

// The SDK's metric calls panic on a host error instead of returning it;
// proxytest never fails a defined metric, so these report no error.

func defineMetric(t abispec.MetricType, name string) (uint32, error) {
	switch t {
	case abispec.MetricTypeCounter:
		return uint32(proxywasm.DefineCounterMetric(name)), nil
	case abispec.MetricTypeGauge:
		return uint32(proxywasm.DefineGaugeMetric(name)), nil
	default:
		return uint32(proxywasm.DefineHistogramMetric(name)), nil
	}
}

func addMetric(t abispec.MetricType, id uint32, delta int64) error {
	if t == abispec.MetricTypeCounter {
		proxywasm.MetricCounter(id).Increment(uint64(delta))
	} else {
		proxywasm.MetricGauge(id).Add(delta)
	}
	return nil
}

func recordMetric(id uint32, value uint64) error {
	proxywasm.MetricHistogram(id).Record(value)
	return nil
}

func getMetric(t abispec.MetricType, id uint32) (uint64, error) {
	switch t {
	case abispec.MetricTypeCounter:
		return proxywasm.MetricCounter(id).Value(), nil
	case abispec.MetricTypeGauge:
		return uint64(proxywasm.MetricGauge(id).Value()), nil
	default:
		return proxywasm.MetricHistogram(id).Value(), nil
	}
}

// randomBytes natively is crypto/rand (timers are harmless outside wasm).
func randomBytes(b []byte) error {
	_, err := crand.Read(b)
	return err
}
