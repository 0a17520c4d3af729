package abispec

// ValueType is a wasm value type, encoded as in the binary format (and in
// wazero's api.ValueType), so a host converts it with a plain type conversion.
type ValueType byte

// The two value types the ABI uses: every pointer, size, id and status is an
// i32; only metric values and a few WASI arguments are i64.
const (
	I32 ValueType = 0x7f
	I64 ValueType = 0x7e
)

// String returns "i32" or "i64".
func (t ValueType) String() string {
	switch t {
	case I32:
		return "i32"
	case I64:
		return "i64"
	}
	return "unknown"
}

// Func is the name and wasm signature of an import or export.
type Func struct {
	// Name is the import or export name, e.g. "proxy_http_call".
	Name string
	// Params are the wasm parameter types, in order.
	Params []ValueType
	// Results are the wasm result types: none or one.
	Results []ValueType
}

// i32s returns n i32 value types.
func i32s(n int) []ValueType {
	t := make([]ValueType, n)
	for i := range t {
		t[i] = I32
	}
	return t
}

var status = []ValueType{I32}

// HostFunctions are the env.proxy_* functions Envoy links for an ABI 0.2.1
// module (cpp-host FOR_ALL_HOST_FUNCTIONS plus continue_stream, close_stream
// and get_log_level). A module may import any subset; an import outside this
// list, or with another signature, fails to link. Every function returns a
// Status.
var HostFunctions = []Func{
	{"proxy_log", i32s(3), status},
	{"proxy_get_log_level", i32s(1), status},
	{"proxy_get_status", i32s(3), status},
	{"proxy_set_property", i32s(4), status},
	{"proxy_get_property", i32s(4), status},
	{"proxy_send_local_response", i32s(8), status},
	{"proxy_get_shared_data", i32s(5), status},
	{"proxy_set_shared_data", i32s(5), status},
	{"proxy_register_shared_queue", i32s(3), status},
	{"proxy_resolve_shared_queue", i32s(5), status},
	{"proxy_dequeue_shared_queue", i32s(3), status},
	{"proxy_enqueue_shared_queue", i32s(3), status},
	{"proxy_get_header_map_value", i32s(5), status},
	{"proxy_add_header_map_value", i32s(5), status},
	{"proxy_replace_header_map_value", i32s(5), status},
	{"proxy_remove_header_map_value", i32s(3), status},
	{"proxy_get_header_map_pairs", i32s(3), status},
	{"proxy_set_header_map_pairs", i32s(3), status},
	{"proxy_get_header_map_size", i32s(2), status},
	{"proxy_get_buffer_status", i32s(3), status},
	{"proxy_get_buffer_bytes", i32s(5), status},
	{"proxy_set_buffer_bytes", i32s(5), status},
	{"proxy_http_call", i32s(10), status},
	{"proxy_grpc_call", i32s(12), status},
	{"proxy_grpc_stream", i32s(9), status},
	{"proxy_grpc_close", i32s(1), status},
	{"proxy_grpc_cancel", i32s(1), status},
	{"proxy_grpc_send", i32s(4), status},
	{"proxy_set_tick_period_milliseconds", i32s(1), status},
	{"proxy_get_current_time_nanoseconds", i32s(1), status},
	{"proxy_define_metric", i32s(4), status},
	{"proxy_increment_metric", []ValueType{I32, I64}, status},
	{"proxy_record_metric", []ValueType{I32, I64}, status},
	{"proxy_get_metric", i32s(2), status},
	{"proxy_set_effective_context", i32s(1), status},
	{"proxy_done", nil, status},
	{"proxy_call_foreign_function", i32s(6), status},
	{"proxy_continue_stream", i32s(1), status},
	{"proxy_close_stream", i32s(1), status},
}

// ForbiddenHostFunctions are host functions Envoy links but pdroute must not
// import: time comes from WASI clock_time_get through the Go runtime.
var ForbiddenHostFunctions = []string{"proxy_get_current_time_nanoseconds"}

// Callbacks are the module exports an ABI 0.2.x host looks up, with the exact
// signatures cpp-host checks (a mismatch fails the load). All are optional
// except the ABI marker and the allocator (malloc or proxy_on_memory_allocate).
// Boolean results (vm_start, configure, done) and actions are i32.
var Callbacks = []Func{
	{ABIVersionExport, nil, nil},
	{"_initialize", nil, nil},
	{"proxy_on_memory_allocate", i32s(1), i32s(1)},
	{"proxy_on_context_create", i32s(2), nil},
	{"proxy_on_vm_start", i32s(2), i32s(1)},
	{"proxy_on_configure", i32s(2), i32s(1)},
	{"proxy_on_validate_configuration", i32s(2), i32s(1)},
	{"proxy_on_tick", i32s(1), nil},
	{"proxy_on_new_connection", i32s(1), i32s(1)},
	{"proxy_on_downstream_data", i32s(3), i32s(1)},
	{"proxy_on_upstream_data", i32s(3), i32s(1)},
	{"proxy_on_downstream_connection_close", i32s(2), nil},
	{"proxy_on_upstream_connection_close", i32s(2), nil},
	{"proxy_on_request_headers", i32s(3), i32s(1)},
	{"proxy_on_request_body", i32s(3), i32s(1)},
	{"proxy_on_request_trailers", i32s(2), i32s(1)},
	{"proxy_on_request_metadata", i32s(2), i32s(1)},
	{"proxy_on_response_headers", i32s(3), i32s(1)},
	{"proxy_on_response_body", i32s(3), i32s(1)},
	{"proxy_on_response_trailers", i32s(2), i32s(1)},
	{"proxy_on_response_metadata", i32s(2), i32s(1)},
	{"proxy_on_http_call_response", i32s(5), nil},
	{"proxy_on_grpc_receive", i32s(3), nil},
	{"proxy_on_grpc_close", i32s(3), nil},
	{"proxy_on_grpc_receive_initial_metadata", i32s(3), nil},
	{"proxy_on_grpc_receive_trailing_metadata", i32s(3), nil},
	{"proxy_on_queue_ready", i32s(2), nil},
	{"proxy_on_foreign_function", i32s(3), nil},
	{"proxy_on_done", i32s(1), i32s(1)},
	{"proxy_on_log", i32s(1), nil},
	{"proxy_on_delete", i32s(1), nil},
}

// PdrouteCallbacks names the Callbacks the pdroute module exports; the build
// check asserts the compiled module exports exactly these (plus memory).
var PdrouteCallbacks = []string{
	ABIVersionExport, "_initialize", "proxy_on_memory_allocate",
	"proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure",
	"proxy_on_tick", "proxy_on_request_headers", "proxy_on_request_body",
	"proxy_on_request_trailers", "proxy_on_response_headers",
	"proxy_on_response_body", "proxy_on_response_trailers",
	"proxy_on_http_call_response", "proxy_on_queue_ready", "proxy_on_done",
	"proxy_on_log", "proxy_on_delete",
}

// WASIEnvoy133 is the WASI set of Envoy 1.33–1.38 (cpp-host PR #427, before
// #533), registered under both WASIModule and WASIUnstableModule. Importing
// any other WASI function (fd_filestat_get, clock_res_get, ...) fails to link
// on those versions, so the module must stay within this list. Envoy ≥ 1.39
// links a superset.
var WASIEnvoy133 = []Func{
	{"fd_write", i32s(4), status},
	{"fd_read", i32s(4), status},
	{"fd_seek", []ValueType{I32, I64, I32, I32}, status},
	{"fd_close", i32s(1), status},
	{"fd_fdstat_get", i32s(2), status},
	{"fd_fdstat_set_flags", i32s(2), status},
	{"environ_get", i32s(2), status},
	{"environ_sizes_get", i32s(2), status},
	{"args_get", i32s(2), status},
	{"args_sizes_get", i32s(2), status},
	{"clock_time_get", []ValueType{I32, I64, I32}, status},
	{"random_get", i32s(2), status},
	{"sched_yield", nil, status},
	{"poll_oneoff", i32s(4), status},
	{"proc_exit", i32s(1), nil},
	{"path_open", []ValueType{I32, I32, I32, I32, I32, I64, I64, I32, I32}, status},
	{"fd_prestat_get", i32s(2), status},
	{"fd_prestat_dir_name", i32s(3), status},
}

// Lookup returns the Func named name in fs.
func Lookup(fs []Func, name string) (Func, bool) {
	for _, f := range fs {
		if f.Name == name {
			return f, true
		}
	}
	return Func{}, false
}
