// Package abispec is the proxy-wasm ABI v0.2.1 as data, shared by the guest
// binding (filter/abi) and the Envoy-faithful host (e2e/envoyemu): the
// enumerations, the wasm signatures of the host functions and callbacks, the
// WASI functions Envoy 1.33–1.38 links, and the pairs wire format.
//
// It is pure Go with no imports beyond the standard library, so it compiles
// into the wasm module and into native hosts alike. It must not import
// proxy-wasm SDK packages or wazero.
//
// Sources: proxy-wasm/spec abi-versions/v0.2.1, proxy-wasm-cpp-host
// include/proxy-wasm/exports.h and wasm.h (the list before PR #533, which is
// what Envoy 1.33–1.38 embed).
package abispec

// ABIVersionExport is the marker export the host reads to pick the ABI version.
// We claim 0.2.1 (not 0.2.0) because only 0.2.1 links proxy_get_log_level.
const ABIVersionExport = "proxy_abi_version_0_2_1"

// HostModule is the import module of every proxy_* host function.
const HostModule = "env"

// WASIModule is the import module Go's wasip1 port uses. Envoy registers the
// same functions under WASIUnstableModule as well.
const WASIModule = "wasi_snapshot_preview1"

// WASIUnstableModule is the legacy WASI module name Envoy also registers.
const WASIUnstableModule = "wasi_unstable"

// Status is proxy_status_t, the i32 every host function returns.
type Status uint32

// Status values (cpp-host WasmResult). The spec lists only a subset.
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusBadExpression        Status = 5
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusResultMismatch       Status = 9
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

var statusNames = [...]string{
	"ok", "not found", "bad argument", "serialization failure", "parse failure",
	"bad expression", "invalid memory access", "empty", "cas mismatch",
	"result mismatch", "internal failure", "broken connection", "unimplemented",
}

// String returns the cpp-host name of the status in words, e.g. "cas mismatch".
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown status"
}

// MapType selects a header map in the header-map host functions.
type MapType uint32

// MapType values.
const (
	MapTypeHttpRequestHeaders       MapType = 0
	MapTypeHttpRequestTrailers      MapType = 1
	MapTypeHttpResponseHeaders      MapType = 2
	MapTypeHttpResponseTrailers     MapType = 3
	MapTypeGrpcInitialMetadata      MapType = 4
	MapTypeGrpcTrailingMetadata     MapType = 5
	MapTypeHttpCallResponseHeaders  MapType = 6
	MapTypeHttpCallResponseTrailers MapType = 7
)

// BufferType selects a buffer in the buffer host functions.
type BufferType uint32

// BufferType values. The spec text names HTTP_RESPONSE_BODY for http-call
// responses; Envoy and every SDK use BufferTypeHttpCallResponseBody (4).
const (
	BufferTypeHttpRequestBody      BufferType = 0
	BufferTypeHttpResponseBody     BufferType = 1
	BufferTypeDownstreamData       BufferType = 2
	BufferTypeUpstreamData         BufferType = 3
	BufferTypeHttpCallResponseBody BufferType = 4
	BufferTypeGrpcReceiveBuffer    BufferType = 5
	BufferTypeVMConfiguration      BufferType = 6
	BufferTypePluginConfiguration  BufferType = 7
	BufferTypeCallData             BufferType = 8
)

// StreamType selects the direction for proxy_continue_stream / proxy_close_stream.
type StreamType uint32

// StreamType values.
const (
	StreamTypeRequest    StreamType = 0
	StreamTypeResponse   StreamType = 1
	StreamTypeDownstream StreamType = 2
	StreamTypeUpstream   StreamType = 3
)

// LogLevel is the level of proxy_log and proxy_get_log_level.
type LogLevel uint32

// LogLevel values. proxy_log answers BadArgument above LogLevelCritical.
const (
	LogLevelTrace    LogLevel = 0
	LogLevelDebug    LogLevel = 1
	LogLevelInfo     LogLevel = 2
	LogLevelWarn     LogLevel = 3
	LogLevelError    LogLevel = 4
	LogLevelCritical LogLevel = 5
)

var logLevelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

// String returns the lower-case level name used by Envoy's logger.
func (l LogLevel) String() string {
	if int(l) < len(logLevelNames) {
		return logLevelNames[l]
	}
	return "unknown"
}

// MetricType is the kind given to proxy_define_metric.
type MetricType uint32

// MetricType values.
const (
	MetricTypeCounter   MetricType = 0
	MetricTypeGauge     MetricType = 1
	MetricTypeHistogram MetricType = 2
)
