//go:build wasip1

package abi

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// Host functions (module env). Sizes and ids are uint32, in-pointers *byte,
// out-words *uint32: all lower to i32 (metric values to i64), matching
// abispec.HostFunctions exactly. The compiler moves whatever these pointers
// point to onto the heap (an import may keep them), and Go's heap does not
// move, so the host may write through them even while it re-enters the
// allocator. Every function returns a proxy_status_t.

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg *byte, msgLen uint32) uint32

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(level *uint32) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(code *uint32, msgPtr *uint32, msgLen *uint32) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path *byte, pathLen uint32, retPtr *uint32, retLen *uint32) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(path *byte, pathLen uint32, value *byte, valueLen uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(bufferType, start, maxSize uint32, retPtr *uint32, retLen *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(bufferType, start, size uint32, data *byte, dataLen uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(mapType uint32, retPtr *uint32, retLen *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func proxySetHeaderMapPairs(mapType uint32, pairs *byte, pairsLen uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(mapType uint32, key *byte, keyLen uint32, retPtr *uint32, retLen *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(mapType uint32, key *byte, keyLen uint32, value *byte, valueLen uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(mapType uint32, key *byte, keyLen uint32, value *byte, valueLen uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(mapType uint32, key *byte, keyLen uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(streamType uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(streamType uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(code uint32, details *byte, detailsLen uint32, body *byte, bodyLen uint32,
	headers *byte, headersLen uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_http_call
func proxyHttpCall(cluster *byte, clusterLen uint32, headers *byte, headersLen uint32, body *byte, bodyLen uint32,
	trailers *byte, trailersLen uint32, timeoutMillis uint32, token *uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key *byte, keyLen uint32, retPtr *uint32, retLen *uint32, cas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key *byte, keyLen uint32, value *byte, valueLen uint32, cas uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func proxyRegisterSharedQueue(name *byte, nameLen uint32, queueID *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func proxyResolveSharedQueue(vmID *byte, vmIDLen uint32, name *byte, nameLen uint32, queueID *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxyEnqueueSharedQueue(queueID uint32, value *byte, valueLen uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxyDequeueSharedQueue(queueID uint32, retPtr *uint32, retLen *uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriodMilliseconds(period uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(contextID uint32) uint32

//go:wasmimport env proxy_done
func proxyDone() uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(metricType uint32, name *byte, nameLen uint32, metricID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(metricID uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(metricID uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(metricID uint32, value *uint64) uint32

// statusError is a host status the SDK's types package has no error for.
type statusError abispec.Status

func (e statusError) Error() string {
	return "error status returned by host: " + abispec.Status(e).String()
}

// toError maps a host status to the SDK's error values, as the SDK does.
func toError(status uint32) error {
	switch abispec.Status(status) {
	case abispec.StatusOK:
		return nil
	case abispec.StatusNotFound:
		return types.ErrorStatusNotFound
	case abispec.StatusBadArgument:
		return types.ErrorStatusBadArgument
	case abispec.StatusEmpty:
		return types.ErrorStatusEmpty
	case abispec.StatusCasMismatch:
		return types.ErrorStatusCasMismatch
	case abispec.StatusInternalFailure:
		return types.ErrorInternalFailure
	case abispec.StatusUnimplemented:
		return types.ErrorUnimplemented
	}
	return statusError(status)
}

func bytesPtr(b []byte) *byte { return unsafe.SliceData(b) }

func stringPtr(s string) *byte { return unsafe.StringData(s) }

// errForeignMemory means the host returned a pointer the allocator never
// handed out: a host bug, reported instead of reading arbitrary memory.
var errForeignMemory = errors.New("pdroute/abi: host returned memory the module did not allocate")

// hostReturn receives the (pointer, length) words of a host call that returns
// data. One instance serves every call: the VM is single-threaded and no host
// call that returns data runs inside another (the allocator makes none).
var hostReturn struct{ ptr, size uint32 }

// hostWord and hostWord64 receive a host call's other out-words (a cas, a
// token, an id, a level, a metric value). A local variable would do, but
// passing its address to an import moves it to the heap: one allocation
// per call. One of each serves every call, as hostReturn does.
var (
	hostWord   uint32
	hostWord64 uint64
)

// A host call that returns data writes its (pointer, length) words into
// hostReturn: the call site passes ret()'s pointers to the import and hands
// its status to returned (or returnedData). Straight calls rather than
// helpers taking a closure: a closure is one more distinct function per
// kind of read, and these run several times per request.

// ret resets hostReturn and returns the pointers of its words.
func ret() (ptr, size *uint32) {
	hostReturn.ptr, hostReturn.size = 0, 0
	return &hostReturn.ptr, &hostReturn.size
}

// returned claims the data of the host call that wrote hostReturn and
// returned status, and disarms (arm): the allocation at the returned
// pointer, cut to its size, which the module then forgets; data written
// into an armed target keeps the target's capacity. An OK status with no
// data is (nil, nil). One function for every read (it was four layers).
func returned(status uint32) ([]byte, error) {
	dst, handed, adopt := into.dst, into.handed, into.adopt
	into.dst, into.armed, into.handed, into.adopt = nil, false, false, false
	if status != uint32(abispec.StatusOK) {
		return nil, toError(status)
	}
	ptr, size := hostReturn.ptr, hostReturn.size
	if ptr == 0 {
		return nil, nil
	}
	if handed && ptr == uint32(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))) && uint64(size) <= uint64(cap(dst)) {
		return dst[:size], nil
	}
	for i := len(allocations) - 1; i >= 0; i-- {
		b := allocations[i]
		if uint32(uintptr(unsafe.Pointer(&b[0]))) != ptr {
			continue
		}
		if int(size) > len(b) {
			return nil, errForeignMemory
		}
		last := len(allocations) - 1
		allocations[i] = allocations[last]
		allocations[last] = nil
		allocations = allocations[:last]
		if adopt {
			return b[:size], nil
		}
		return b[:size:size], nil
	}
	return nil, errForeignMemory
}

// returnedData is returned where no data means NotFound, as the SDK
// reports empty buffers and maps.
func returnedData(status uint32) ([]byte, error) {
	b, err := returned(status)
	if err == nil && b == nil {
		return nil, types.ErrorStatusNotFound
	}
	return b, err
}

// arm makes the next host call that returns data write it into dst's room
// when it fits (the result then aliases dst), else into a fresh allocation
// whose room the caller may keep (adopt) for the next read. returned
// disarms.
func arm(dst []byte, adopt bool) {
	into.dst, into.armed, into.adopt = dst[:cap(dst)], true, adopt
}

// armScratch is arm for data the caller reads only before its next host
// call that returns data, never keeping a reference to it: the host writes
// it into the VM's scratch buffer rather than a fresh allocation (unless
// the buffer is busy or the data larger than maxScratch). It reports
// whether it armed, for returnedScratch.
func armScratch() bool {
	if scratch.busy {
		return false
	}
	arm(scratch.buf, true)
	return true
}

// returnedScratch is returned for a call made after armScratch. An OK
// status with no data is (nil, nil).
func returnedScratch(armed bool, status uint32) ([]byte, error) {
	b, err := returned(status)
	if armed && cap(b) <= maxScratch && cap(b) > cap(scratch.buf) {
		scratch.buf = b[:0]
	}
	return b, err
}

// visitScratch calls fn with each pair of a pairs serialization read after
// armScratch (status is the read's): key and value are valid only while fn
// runs. No data is types.ErrorStatusNotFound, as for getMap.
func visitScratch(armed bool, status uint32, fn func(key, value []byte)) error {
	b, err := returned(status) // returnedScratch written out: one layer less
	if armed && cap(b) <= maxScratch && cap(b) > cap(scratch.buf) {
		scratch.buf = b[:0]
	}
	if err == nil && b == nil {
		return types.ErrorStatusNotFound
	}
	if err != nil {
		return err
	}
	// The scratch buffer holds what fn reads: a read inside fn allocates.
	// A panic in fn leaves busy set until the next callback's enter.
	busy := scratch.busy
	scratch.busy = true
	err = abispec.EachPair(b, fn)
	scratch.busy = busy
	return err
}

func logMessage(level abispec.LogLevel, msg string) {
	proxyLog(uint32(level), stringPtr(msg), uint32(len(msg)))
}

func getLogLevel() (abispec.LogLevel, error) {
	hostWord = 0
	err := toError(proxyGetLogLevel(&hostWord))
	return abispec.LogLevel(hostWord), err
}

// propertyPath joins path segments with NUL, the ABI's property path form.
func propertyPath(path []string) string { return strings.Join(path, "\x00") }

func getProperty(path []string) ([]byte, error) {
	p := propertyPath(path)
	ptr, size := ret()
	return returned(proxyGetProperty(stringPtr(p), uint32(len(p)), ptr, size))
}

func setProperty(path []string, value []byte) error {
	p := propertyPath(path)
	return toError(proxySetProperty(stringPtr(p), uint32(len(p)), bytesPtr(value), uint32(len(value))))
}

func getBuffer(t abispec.BufferType, start, maxSize int) ([]byte, error) {
	ptr, size := ret()
	return returnedData(proxyGetBufferBytes(uint32(t), uint32(start), uint32(maxSize), ptr, size))
}

// getBufferInto is getBuffer into dst's room (arm).
func getBufferInto(t abispec.BufferType, dst []byte, start, maxSize int) ([]byte, error) {
	arm(dst, true)
	ptr, size := ret()
	b, err := returned(proxyGetBufferBytes(uint32(t), uint32(start), uint32(maxSize), ptr, size))
	if err == nil && b == nil {
		return nil, types.ErrorStatusNotFound
	}
	return b, err
}

// setBuffer maps the operation onto proxy_set_buffer_bytes(start, size):
// Envoy drains size bytes at start 0 then prepends, and appends at start ≥
// length.
func setBuffer(t abispec.BufferType, op bufferOp, data []byte) error {
	var start, size uint32
	switch op {
	case bufferAppend:
		start = whole
	case bufferReplace:
		size = whole
	}
	return toError(proxySetBufferBytes(uint32(t), start, size, bytesPtr(data), uint32(len(data))))
}

// drainPrepend is proxy_set_buffer_bytes(t, 0, drain, data).
func drainPrepend(t abispec.BufferType, drain int, data []byte) error {
	return toError(proxySetBufferBytes(uint32(t), 0, uint32(drain), bytesPtr(data), uint32(len(data))))
}

func getMap(t abispec.MapType) ([][2]string, error) {
	ptr, size := ret()
	b, err := returnedData(proxyGetHeaderMapPairs(uint32(t), ptr, size))
	if err != nil {
		return nil, err
	}
	return abispec.ParsePairs(b)
}

// pairsOut is the buffer outgoing header maps are serialized in: the host
// copies them before the call returns, so one buffer per VM serves every
// call (kept up to maxScratch bytes).
var pairsOut []byte

// emptyPairs is the serialization of no pairs.
var emptyPairs = []byte{0, 0, 0, 0}

// outPairs serializes pairs for one host call (in pairsOut).
func outPairs(pairs [][2]string) []byte {
	if len(pairs) == 0 {
		return emptyPairs
	}
	b := abispec.AppendPairs(pairsOut[:0], pairs)
	if cap(b) <= maxScratch {
		pairsOut = b
	}
	return b
}

func setMap(t abispec.MapType, pairs [][2]string) error {
	b := outPairs(pairs)
	return toError(proxySetHeaderMapPairs(uint32(t), bytesPtr(b), uint32(len(b))))
}

func visitMap(t abispec.MapType, fn func(key, value []byte)) error {
	armed := armScratch()
	ptr, size := ret()
	return visitScratch(armed, proxyGetHeaderMapPairs(uint32(t), ptr, size), fn)
}

// getMapValue reads the value into scratch memory: the string is its copy.
func getMapValue(t abispec.MapType, key string) (string, error) {
	armed := armScratch()
	ptr, size := ret()
	b, err := returnedScratch(armed, proxyGetHeaderMapValue(uint32(t), stringPtr(key), uint32(len(key)), ptr, size))
	return string(b), err
}

func addMapValue(t abispec.MapType, key, value string) error {
	return toError(proxyAddHeaderMapValue(uint32(t), stringPtr(key), uint32(len(key)),
		stringPtr(value), uint32(len(value))))
}

func replaceMapValue(t abispec.MapType, key, value string) error {
	return toError(proxyReplaceHeaderMapValue(uint32(t), stringPtr(key), uint32(len(key)),
		stringPtr(value), uint32(len(value))))
}

func removeMapValue(t abispec.MapType, key string) error {
	return toError(proxyRemoveHeaderMapValue(uint32(t), stringPtr(key), uint32(len(key))))
}

func continueStream(t abispec.StreamType) error { return toError(proxyContinueStream(uint32(t))) }

func closeStream(t abispec.StreamType) error { return toError(proxyCloseStream(uint32(t))) }

func sendLocalResponse(code uint32, details string, headers [][2]string, body []byte, grpcStatus int32) error {
	h := outPairs(headers)
	return toError(proxySendLocalResponse(code, stringPtr(details), uint32(len(details)),
		bytesPtr(body), uint32(len(body)), bytesPtr(h), uint32(len(h)), grpcStatus))
}

// CallBodyCopied: the host copies a DispatchHttpCall body before the call
// returns (Envoy's proxy_http_call does), so the caller may reuse it.
const CallBodyCopied = true

// reuseGuards: the module's only reference to a stream's guard is
// guards.streams (proxy_on_context_create drops the one it is given), so
// an ended stream's guard can serve the next stream.
const reuseGuards = true

func httpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string,
	timeout uint32, caller uint32, callBack func(int, int, int)) (uint32, error) {
	h := outPairs(headers)
	t := emptyPairs
	if len(trailers) > 0 {
		t = abispec.AppendPairs(nil, trailers)
	}
	hostWord = 0
	err := toError(proxyHttpCall(stringPtr(cluster), uint32(len(cluster)), bytesPtr(h), uint32(len(h)),
		bytesPtr(body), uint32(len(body)), bytesPtr(t), uint32(len(t)), timeout, &hostWord))
	if err != nil {
		return 0, err
	}
	token := hostWord
	vm.callouts.Put(token, callout{caller: caller, callBack: callBack})
	return token, nil
}

func getStatus() (uint32, string, error) {
	hostWord = 0
	armed := armScratch()
	ptr, size := ret()
	msg, err := returnedScratch(armed, proxyGetStatus(&hostWord, ptr, size))
	return hostWord, string(msg), err
}

// getSharedData reads prefix + key (joinKey).
func getSharedData(prefix, key string) ([]byte, uint32, error) {
	key = joinKey(prefix, key)
	hostWord = 0
	ptr, size := ret()
	value, err := returned(proxyGetSharedData(stringPtr(key), uint32(len(key)), ptr, size, &hostWord))
	if err != nil {
		return nil, 0, err
	}
	return value, hostWord, nil
}

// getSharedDataInto is getSharedData into dst's room (arm): a value that
// does not fit is a new allocation, as without it.
func getSharedDataInto(dst []byte, prefix, key string) ([]byte, uint32, error) {
	key = joinKey(prefix, key)
	hostWord = 0
	arm(dst, false)
	ptr, size := ret()
	value, err := returned(proxyGetSharedData(stringPtr(key), uint32(len(key)), ptr, size, &hostWord))
	if err != nil {
		return nil, 0, err
	}
	return value, hostWord, nil
}

// keyBuf is where joinKey joins shared-data keys.
var keyBuf []byte

// joinKey returns prefix + key in keyBuf, valid until the next joinKey: the
// host reads a key during the call and keeps a copy of it (Envoy's shared
// data stores std::string keys), so nothing holds it afterwards.
func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	keyBuf = append(append(keyBuf[:0], prefix...), key...)
	return unsafe.String(unsafe.SliceData(keyBuf), len(keyBuf))
}

// setSharedData writes prefix + key (joinKey).
func setSharedData(prefix, key string, data []byte, cas uint32) error {
	key = joinKey(prefix, key)
	return toError(proxySetSharedData(stringPtr(key), uint32(len(key)), bytesPtr(data), uint32(len(data)), cas))
}

func registerSharedQueue(name string) (uint32, error) {
	hostWord = 0
	err := toError(proxyRegisterSharedQueue(stringPtr(name), uint32(len(name)), &hostWord))
	return hostWord, err
}

func resolveSharedQueue(vmID, name string) (uint32, error) {
	hostWord = 0
	err := toError(proxyResolveSharedQueue(stringPtr(vmID), uint32(len(vmID)), stringPtr(name), uint32(len(name)), &hostWord))
	return hostWord, err
}

func enqueueSharedQueue(id uint32, data []byte) error {
	return toError(proxyEnqueueSharedQueue(id, bytesPtr(data), uint32(len(data))))
}

func dequeueSharedQueue(id uint32) ([]byte, error) {
	ptr, size := ret()
	return returned(proxyDequeueSharedQueue(id, ptr, size))
}

func setTickPeriod(ms uint32) error { return toError(proxySetTickPeriodMilliseconds(ms)) }

func setEffectiveContext(id uint32) error { return toError(proxySetEffectiveContext(id)) }

// done ignores the status: Envoy answers NotFound unless the root was
// pending, and the SDK's PluginDone returns nothing either.
func done() { proxyDone() }

func defineMetric(t abispec.MetricType, name string) (uint32, error) {
	hostWord = 0
	err := toError(proxyDefineMetric(uint32(t), stringPtr(name), uint32(len(name)), &hostWord))
	return hostWord, err
}

func addMetric(_ abispec.MetricType, id uint32, delta int64) error {
	return toError(proxyIncrementMetric(id, delta))
}

func recordMetric(id uint32, value uint64) error { return toError(proxyRecordMetric(id, value)) }

func getMetric(_ abispec.MetricType, id uint32) (uint64, error) {
	hostWord64 = 0
	err := toError(proxyGetMetric(id, &hostWord64))
	return hostWord64, err
}

// wasiRandomGet is WASI random_get, the same import the Go runtime uses.
//
//go:wasmimport wasi_snapshot_preview1 random_get
//go:noescape
func wasiRandomGet(buf *byte, bufLen uint32) uint32

// maxRandomGet is Envoy's limit for one random_get (larger: EINVAL).
const maxRandomGet = 64 << 10

func randomBytes(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), maxRandomGet)
		if errno := wasiRandomGet(&b[0], uint32(n)); errno != 0 {
			return fmt.Errorf("random_get: WASI errno %d", errno)
		}
		b = b[n:]
	}
	return nil
}
