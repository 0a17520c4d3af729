package envoyemu

import (
	"context"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// The env.proxy_* host functions of ABI 0.2.1, with Envoy's semantics
// (cpp-host src/exports.cc on top of Envoy's Context). Arguments are decoded
// as uint32(stack[i]): wazero leaves garbage in the upper bits of i32 slots.

const (
	stOK                  = uint64(abispec.StatusOK)
	stNotFound            = uint64(abispec.StatusNotFound)
	stBadArgument         = uint64(abispec.StatusBadArgument)
	stParseFailure        = uint64(abispec.StatusParseFailure)
	stInvalidMemoryAccess = uint64(abispec.StatusInvalidMemoryAccess)
	stEmpty               = uint64(abispec.StatusEmpty)
	stUnimplemented       = uint64(abispec.StatusUnimplemented)
)

// envFuncs are the non-proxy functions Envoy registers in env.
var envFuncs = map[string]hostFn{
	"pthread_equal": {key: "env.pthread_equal", sig: sig("pthread_equal", i32, i32), impl: func(_ *vm, s []uint64) {
		s[0] = boolArg(uint32(s[0]) == uint32(s[1]))
	}},
	"emscripten_notify_memory_growth": {key: "env.emscripten_notify_memory_growth",
		sig: abispec.Func{Name: "emscripten_notify_memory_growth", Params: []abispec.ValueType{i32}}, impl: func(*vm, []uint64) {}},
	"envoy_resolve_dns": {key: "env.envoy_resolve_dns", sig: sig("envoy_resolve_dns", i32, i32, i32),
		impl: constErrno(stUnimplemented)},
}

// proxyFuncs implement abispec.HostFunctions.
var proxyFuncs = map[string]func(v *vm, s []uint64){
	"proxy_log":                          proxyLog,
	"proxy_get_log_level":                proxyGetLogLevel,
	"proxy_get_status":                   proxyGetStatus,
	"proxy_set_property":                 proxySetProperty,
	"proxy_get_property":                 proxyGetProperty,
	"proxy_send_local_response":          proxySendLocalResponse,
	"proxy_get_shared_data":              proxyGetSharedData,
	"proxy_set_shared_data":              proxySetSharedData,
	"proxy_register_shared_queue":        proxyRegisterSharedQueue,
	"proxy_resolve_shared_queue":         proxyResolveSharedQueue,
	"proxy_dequeue_shared_queue":         proxyDequeueSharedQueue,
	"proxy_enqueue_shared_queue":         proxyEnqueueSharedQueue,
	"proxy_get_header_map_value":         proxyGetHeaderMapValue,
	"proxy_add_header_map_value":         proxyMutateHeaderMap((*headerMap).add),
	"proxy_replace_header_map_value":     proxyMutateHeaderMap((*headerMap).set),
	"proxy_remove_header_map_value":      proxyRemoveHeaderMapValue,
	"proxy_get_header_map_pairs":         proxyGetHeaderMapPairs,
	"proxy_set_header_map_pairs":         proxySetHeaderMapPairs,
	"proxy_get_header_map_size":          proxyGetHeaderMapSize,
	"proxy_get_buffer_status":            proxyGetBufferStatus,
	"proxy_get_buffer_bytes":             proxyGetBufferBytes,
	"proxy_set_buffer_bytes":             proxySetBufferBytes,
	"proxy_http_call":                    proxyHTTPCall,
	"proxy_grpc_call":                    proxyGrpcStart,
	"proxy_grpc_stream":                  proxyGrpcStart,
	"proxy_grpc_close":                   proxyGrpcToken,
	"proxy_grpc_cancel":                  proxyGrpcToken,
	"proxy_grpc_send":                    proxyGrpcToken,
	"proxy_set_tick_period_milliseconds": proxySetTickPeriod,
	"proxy_get_current_time_nanoseconds": proxyGetCurrentTime,
	"proxy_define_metric":                proxyDefineMetric,
	"proxy_increment_metric":             proxyIncrementMetric,
	"proxy_record_metric":                proxyRecordMetric,
	"proxy_get_metric":                   proxyGetMetric,
	"proxy_set_effective_context":        proxySetEffectiveContext,
	"proxy_done":                         proxyDone,
	"proxy_call_foreign_function":        proxyCallForeignFunction,
	"proxy_continue_stream":              proxyContinueStream,
	"proxy_close_stream":                 proxyCloseStream,
}

// registerHostModules instantiates env, wasi_snapshot_preview1 and
// wasi_unstable in rt with every function any profile links; loadModule's
// import check enforces the profile.
func registerHostModules(ctx context.Context, rt wazero.Runtime) error {
	env := rt.NewHostModuleBuilder(abispec.HostModule)
	for _, f := range abispec.HostFunctions {
		impl, ok := proxyFuncs[f.Name]
		if !ok {
			return fmt.Errorf("envoyemu: no implementation for %s", f.Name)
		}
		exportHostFn(env, hostFn{key: "env." + f.Name, sig: f, impl: impl})
	}
	for _, f := range envFuncs {
		exportHostFn(env, f)
	}
	if _, err := env.Instantiate(ctx); err != nil {
		return err
	}
	for _, modName := range []string{abispec.WASIModule, abispec.WASIUnstableModule} {
		b := rt.NewHostModuleBuilder(modName)
		for _, f := range wasiFuncs {
			exportHostFn(b, f)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return err
		}
	}
	return nil
}

func exportHostFn(b wazero.HostModuleBuilder, f hostFn) {
	conv := func(ts []abispec.ValueType) []api.ValueType {
		out := make([]api.ValueType, len(ts))
		for i, t := range ts {
			out[i] = api.ValueType(t)
		}
		return out
	}
	key, impl := f.key, f.impl
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
		v := ctx.Value(vmKey{}).(*vm)
		if v.restricted != nil && !v.restricted[key] {
			panic(trap("restricted_callback"))
		}
		if v.trapNext {
			v.trapNext = false
			panic(trap("injected trap"))
		}
		impl(v, stack)
	}), conv(f.sig.Params), conv(f.sig.Results)).Export(f.sig.Name)
}

func a32(s []uint64, i int) uint32 { return uint32(s[i]) }

// --- logging ---

func proxyLog(v *vm, s []uint64) {
	level := a32(s, 0)
	if level > uint32(LevelCritical) {
		s[0] = stBadArgument
		return
	}
	msg, ok := v.readString(a32(s, 1), a32(s, 2))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	v.logFromGuest(v.effectiveContext(), LogLevel(level), msg, false)
	s[0] = stOK
}

func proxyGetLogLevel(v *vm, s []uint64) {
	if !v.writeU32(a32(s, 0), uint32(v.proc.wasmLogLevel())) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyGetStatus(v *vm, s []uint64) {
	root := v.effectiveContext().root()
	if !v.writeU32(a32(s, 0), root.statusCode) || !v.copyOut([]byte(root.statusMsg), a32(s, 1), a32(s, 2)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

// --- properties ---

func proxySetProperty(v *vm, s []uint64) {
	c := v.effectiveContext()
	path, ok1 := v.readString(a32(s, 0), a32(s, 1))
	val, ok2 := v.read(a32(s, 2), a32(s, 3))
	if !ok1 || !ok2 {
		s[0] = stInvalidMemoryAccess
		return
	}
	if c.hooks == nil {
		s[0] = stNotFound
		return
	}
	if c.filterState == nil {
		c.filterState = map[string][]byte{}
	}
	c.filterState[path] = append([]byte(nil), val...)
	s[0] = stOK
}

func proxyGetProperty(v *vm, s []uint64) {
	c := v.effectiveContext()
	path, ok := v.read(a32(s, 0), a32(s, 1))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	val, found := c.property(string(path))
	if !found {
		s[0] = stNotFound
		return
	}
	if !v.copyOut(val, a32(s, 2), a32(s, 3)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

// --- stream control ---

func proxySendLocalResponse(v *vm, s []uint64) {
	c := v.effectiveContext()
	details, ok1 := v.readString(a32(s, 1), a32(s, 2))
	body, ok2 := v.read(a32(s, 3), a32(s, 4))
	hdrs, ok3 := v.read(a32(s, 5), a32(s, 6))
	if !ok1 || !ok2 || !ok3 {
		s[0] = stInvalidMemoryAccess
		return
	}
	c.sendLocalResponse(int(a32(s, 0)), append([]byte(nil), body...), envoyPairs(hdrs), int32(a32(s, 7)), details)
	v.stopNext = true
	s[0] = stOK
}

func proxyContinueStream(v *vm, s []uint64) {
	switch a32(s, 0) {
	case uint32(abispec.StreamTypeRequest):
		v.effectiveContext().continueStream(false)
	case uint32(abispec.StreamTypeResponse):
		v.effectiveContext().continueStream(true)
	case uint32(abispec.StreamTypeDownstream):
	case uint32(abispec.StreamTypeUpstream):
		s[0] = stUnimplemented
		return
	default:
		s[0] = stBadArgument
		return
	}
	s[0] = stOK
}

func proxyCloseStream(v *vm, s []uint64) {
	switch a32(s, 0) {
	case uint32(abispec.StreamTypeRequest), uint32(abispec.StreamTypeResponse):
		v.effectiveContext().closeStream()
	case uint32(abispec.StreamTypeDownstream), uint32(abispec.StreamTypeUpstream):
	default:
		s[0] = stBadArgument
		return
	}
	s[0] = stOK
}

func proxySetEffectiveContext(v *vm, s []uint64) {
	id := a32(s, 0)
	if v.contexts[id] == nil {
		s[0] = stBadArgument
		return
	}
	v.effective = id
	s[0] = stOK
}

func proxyDone(v *vm, s []uint64) {
	root := v.effectiveContext().root()
	if !v.pendingDone[root.id] {
		s[0] = stNotFound
		return
	}
	delete(v.pendingDone, root.id)
	v.addAfterVMCall(func() { root.deleteRoot() })
	s[0] = stOK
}

func proxyCallForeignFunction(v *vm, s []uint64) {
	name, ok1 := v.readString(a32(s, 0), a32(s, 1))
	_, ok2 := v.read(a32(s, 2), a32(s, 3))
	if !ok1 || !ok2 {
		s[0] = stInvalidMemoryAccess
		return
	}
	if name != "clear_route_cache" {
		s[0] = stNotFound
		return
	}
	if c := v.effectiveContext(); c.hooks != nil {
		c.hooks.clearRouteCache()
	}
	if (a32(s, 4) != 0 && !v.writeU32(a32(s, 4), 0)) || (a32(s, 5) != 0 && !v.writeU32(a32(s, 5), 0)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

// --- header maps ---

func proxyGetHeaderMapValue(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.MapTypeHttpCallResponseTrailers) {
		s[0] = stBadArgument
		return
	}
	c := v.effectiveContext()
	key, ok := v.readString(a32(s, 1), a32(s, 2))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	m := c.headerMapFor(t)
	if m == nil {
		if c.accessLog {
			s[0] = stNotFound
		} else {
			s[0] = stBadArgument
		}
		return
	}
	val, found := m.get(key)
	if !found {
		s[0] = stNotFound
		return
	}
	if !v.copyOut([]byte(val), a32(s, 3), a32(s, 4)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyMutateHeaderMap(op func(*headerMap, string, string)) func(*vm, []uint64) {
	return func(v *vm, s []uint64) {
		t := a32(s, 0)
		if t > uint32(abispec.MapTypeHttpCallResponseTrailers) {
			s[0] = stBadArgument
			return
		}
		c := v.effectiveContext()
		key, ok1 := v.readString(a32(s, 1), a32(s, 2))
		val, ok2 := v.readString(a32(s, 3), a32(s, 4))
		if !ok1 || !ok2 {
			s[0] = stInvalidMemoryAccess
			return
		}
		m := c.mutableHeaderMap(t)
		if m == nil {
			s[0] = stBadArgument
			return
		}
		op(m, key, val)
		c.requestHeadersChanged(t)
		s[0] = stOK
	}
}

func proxyRemoveHeaderMapValue(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.MapTypeHttpCallResponseTrailers) {
		s[0] = stBadArgument
		return
	}
	c := v.effectiveContext()
	key, ok := v.readString(a32(s, 1), a32(s, 2))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	m := c.mutableHeaderMap(t)
	if m == nil {
		s[0] = stBadArgument
		return
	}
	m.remove(key)
	c.requestHeadersChanged(t)
	s[0] = stOK
}

func proxyGetHeaderMapPairs(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.MapTypeHttpCallResponseTrailers) {
		s[0] = stBadArgument
		return
	}
	m := v.effectiveContext().headerMapFor(t)
	var data []byte
	if m.len() > 0 {
		// Encoded in the VM's scratch, which copyOut copies at once.
		v.scratch = abispec.AppendPairs(v.scratch[:0], m.pairs)
		data = v.scratch
	}
	if !v.copyOut(data, a32(s, 1), a32(s, 2)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxySetHeaderMapPairs(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.MapTypeHttpCallResponseTrailers) {
		s[0] = stBadArgument
		return
	}
	c := v.effectiveContext()
	data, ok := v.read(a32(s, 1), a32(s, 2))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	m := c.mutableHeaderMap(t)
	if m == nil {
		s[0] = stBadArgument
		return
	}
	m.replaceAll(envoyPairs(data))
	c.requestHeadersChanged(t)
	s[0] = stOK
}

func proxyGetHeaderMapSize(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.MapTypeHttpCallResponseTrailers) {
		s[0] = stBadArgument
		return
	}
	m := v.effectiveContext().mutableHeaderMap(t)
	if m == nil {
		s[0] = stBadArgument
		return
	}
	if !v.writeU32(a32(s, 1), uint32(m.byteSize())) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

// envoyPairs is PairsUtil::toPairs: malformed input, more than 1 MiB or more
// than 1024 pairs silently become an empty list.
func envoyPairs(b []byte) [][2]string {
	if len(b) > abispec.MaxPairsBytes || len(b) < 4 {
		return nil
	}
	if le32(b) > abispec.MaxPairsCount {
		return nil
	}
	pairs, err := abispec.ParsePairs(b)
	if err != nil {
		return nil
	}
	return pairs
}

// --- buffers ---

// buffer is what getBuffer returns: the bytes, whether the plugin may modify
// them, and found=false for NotFound.
func (c *ctxState) buffer(t uint32) (buf *bodyBuf, mutable, found bool) {
	switch abispec.BufferType(t) {
	case abispec.BufferTypeHttpRequestBody:
		return c.requestBody(), true, true
	case abispec.BufferTypeHttpResponseBody:
		return c.responseBody(), true, true
	case abispec.BufferTypeDownstreamData, abispec.BufferTypeUpstreamData,
		abispec.BufferTypeGrpcReceiveBuffer, abispec.BufferTypeCallData:
		return nil, false, true
	case abispec.BufferTypeHttpCallResponseBody:
		if res := c.root().callResult; res != nil {
			return &bodyBuf{b: res.body}, false, true
		}
		return nil, false, false
	case abispec.BufferTypeVMConfiguration:
		return &bodyBuf{b: c.v.spec.VMConfig}, false, true
	case abispec.BufferTypePluginConfiguration:
		if c.pluginConfig {
			return &bodyBuf{b: c.v.spec.PluginConfig}, false, true
		}
	}
	return nil, false, false
}

func proxyGetBufferStatus(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.BufferTypeCallData) {
		s[0] = stBadArgument
		return
	}
	buf, _, found := v.effectiveContext().buffer(t)
	if !found {
		s[0] = stNotFound
		return
	}
	n := 0
	if buf != nil {
		n = len(buf.b)
	}
	if !v.writeU32(a32(s, 1), uint32(n)) || !v.writeU32(a32(s, 2), 0) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyGetBufferBytes(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.BufferTypeCallData) {
		s[0] = stBadArgument
		return
	}
	buf, _, found := v.effectiveContext().buffer(t)
	if !found {
		s[0] = stNotFound
		return
	}
	var data []byte
	if buf != nil {
		data = buf.b
	}
	start, length := uint64(a32(s, 1)), uint64(a32(s, 2))
	if start > uint64(len(data)) {
		length = 0
	} else if start+length > uint64(len(data)) {
		length = uint64(len(data)) - start
	}
	var out []byte
	if length > 0 {
		out = data[start : start+length]
	}
	if !v.copyOut(out, a32(s, 3), a32(s, 4)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxySetBufferBytes(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.BufferTypeCallData) {
		s[0] = stBadArgument
		return
	}
	buf, mutable, found := v.effectiveContext().buffer(t)
	if !found {
		s[0] = stNotFound
		return
	}
	data, ok := v.read(a32(s, 3), a32(s, 4))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	if !mutable || buf == nil || !buf.copyFrom(a32(s, 1), a32(s, 2), data) {
		s[0] = stBadArgument
		return
	}
	s[0] = stOK
}

// --- http call ---

func proxyHTTPCall(v *vm, s []uint64) {
	root := v.effectiveContext().root()
	cluster, ok1 := v.readString(a32(s, 0), a32(s, 1))
	hdrs, ok2 := v.read(a32(s, 2), a32(s, 3))
	body, ok3 := v.read(a32(s, 4), a32(s, 5))
	trailers, ok4 := v.read(a32(s, 6), a32(s, 7))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		s[0] = stInvalidMemoryAccess
		return
	}
	tokenPtr := a32(s, 9)
	if !v.writeU32(tokenPtr, 0) {
		s[0] = stInvalidMemoryAccess
		return
	}
	var own []byte // Envoy copies the body out of the VM once (Buffer::add)
	if len(body) > 0 {
		own = append(v.spares.get(len(body)), body...)
	}
	token, status := root.httpCall(cluster, envoyPairs(hdrs), own, envoyPairs(trailers), int32(a32(s, 8)))
	if status != stOK {
		v.spares.put(own) // refused: nothing holds it
	}
	v.writeU32(tokenPtr, token)
	s[0] = status
}

// proxyGrpcStart answers proxy_grpc_call/stream: ParseFailure for an unknown
// cluster as Envoy does, Unimplemented otherwise (gRPC is not emulated).
func proxyGrpcStart(v *vm, s []uint64) {
	svc, ok := v.readString(a32(s, 0), a32(s, 1))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	if !v.proc.hasCluster(svc) {
		s[0] = stParseFailure
		return
	}
	s[0] = stUnimplemented
}

// proxyGrpcToken answers close/cancel/send: no gRPC token ever exists.
func proxyGrpcToken(_ *vm, s []uint64) {
	switch a32(s, 0) & 3 {
	case 1, 2:
		s[0] = stNotFound
	default:
		s[0] = stBadArgument
	}
}

// --- timers and time ---

func proxySetTickPeriod(v *vm, s []uint64) {
	v.effectiveContext().root().setTickPeriod(time.Duration(a32(s, 0)) * time.Millisecond)
	s[0] = stOK
}

func proxyGetCurrentTime(v *vm, s []uint64) {
	if !v.writeU64(a32(s, 0), uint64(time.Now().UnixNano())) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

// --- shared data and queues ---

func proxyGetSharedData(v *vm, s []uint64) {
	key, ok := v.read(a32(s, 0), a32(s, 1))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	val, cas, found := v.proc.shared.get(v.spec.VMID, key)
	if !found {
		s[0] = stNotFound
		return
	}
	if !v.copyOut(val, a32(s, 2), a32(s, 3)) || !v.writeU32(a32(s, 4), cas) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxySetSharedData(v *vm, s []uint64) {
	key, ok1 := v.readString(a32(s, 0), a32(s, 1))
	val, ok2 := v.read(a32(s, 2), a32(s, 3))
	if !ok1 || !ok2 {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = uint64(v.proc.shared.set(v.spec.VMID, key, val, a32(s, 4)))
}

func proxyRegisterSharedQueue(v *vm, s []uint64) {
	name, ok := v.readString(a32(s, 0), a32(s, 1))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	token := v.proc.queues.register(v.spec.VMID, name, v, v.effectiveContext().root().id)
	if !v.writeU32(a32(s, 2), token) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyResolveSharedQueue(v *vm, s []uint64) {
	vmID, ok1 := v.readString(a32(s, 0), a32(s, 1))
	name, ok2 := v.readString(a32(s, 2), a32(s, 3))
	if !ok1 || !ok2 {
		s[0] = stInvalidMemoryAccess
		return
	}
	if vmID == "" {
		vmID = v.spec.VMID
	}
	token := v.proc.queues.resolve(vmID, name)
	if token == 0 {
		s[0] = stNotFound
		return
	}
	if !v.writeU32(a32(s, 4), token) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyDequeueSharedQueue(v *vm, s []uint64) {
	data, status := v.proc.queues.dequeue(a32(s, 0))
	if status != abispec.StatusOK {
		s[0] = uint64(status)
		return
	}
	if !v.copyOut(data, a32(s, 1), a32(s, 2)) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyEnqueueSharedQueue(v *vm, s []uint64) {
	data, ok := v.read(a32(s, 1), a32(s, 2))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = uint64(v.proc.queues.enqueue(a32(s, 0), append([]byte(nil), data...)))
}

// --- metrics ---

func proxyDefineMetric(v *vm, s []uint64) {
	t := a32(s, 0)
	if t > uint32(abispec.MetricTypeHistogram) {
		s[0] = stBadArgument
		return
	}
	name, ok := v.readString(a32(s, 1), a32(s, 2))
	if !ok {
		s[0] = stInvalidMemoryAccess
		return
	}
	v.nextMetricID[t] += 4
	id := v.nextMetricID[t]
	v.metrics[id] = v.proc.stats.metric(abispec.MetricType(t), name)
	if !v.writeU32(a32(s, 3), id) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}

func proxyIncrementMetric(v *vm, s []uint64) {
	id, offset := a32(s, 0), int64(s[1])
	m := v.metrics[id]
	switch abispec.MetricType(id & 3) {
	case abispec.MetricTypeCounter:
		if m == nil {
			s[0] = stNotFound
		} else if offset <= 0 {
			s[0] = stBadArgument
		} else {
			m.add(offset)
			s[0] = stOK
		}
	case abispec.MetricTypeGauge:
		if m == nil {
			s[0] = stNotFound
		} else {
			m.add(offset)
			s[0] = stOK
		}
	default:
		s[0] = stBadArgument
	}
}

func proxyRecordMetric(v *vm, s []uint64) {
	m := v.metrics[a32(s, 0)]
	if m == nil {
		s[0] = stNotFound
		return
	}
	m.record(s[1])
	s[0] = stOK
}

func proxyGetMetric(v *vm, s []uint64) {
	id := a32(s, 0)
	if abispec.MetricType(id&3) == abispec.MetricTypeHistogram {
		s[0] = stBadArgument
		return
	}
	m := v.metrics[id]
	if m == nil {
		s[0] = stNotFound
		return
	}
	if !v.writeU64(a32(s, 1), m.value()) {
		s[0] = stInvalidMemoryAccess
		return
	}
	s[0] = stOK
}
