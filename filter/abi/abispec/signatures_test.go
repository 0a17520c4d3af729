package abispec

import (
	"slices"
	"strings"
	"testing"
)

func TestSignatureTablesAreConsistent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		funcs  []Func
		prefix string
	}{
		{"HostFunctions", HostFunctions, "proxy_"},
		{"Callbacks", Callbacks, ""},
		{"WASIEnvoy133", WASIEnvoy133, ""},
	} {
		seen := map[string]bool{}
		for _, f := range tc.funcs {
			if seen[f.Name] {
				t.Errorf("%s: %s listed twice", tc.name, f.Name)
			}
			seen[f.Name] = true
			if !strings.HasPrefix(f.Name, tc.prefix) {
				t.Errorf("%s: %s lacks prefix %q", tc.name, f.Name, tc.prefix)
			}
			for _, v := range slices.Concat(f.Params, f.Results) {
				if v != I32 && v != I64 {
					t.Errorf("%s: %s has value type %v", tc.name, f.Name, v)
				}
			}
		}
	}
	for _, name := range PdrouteCallbacks {
		if _, ok := Lookup(Callbacks, name); !ok {
			t.Errorf("PdrouteCallbacks: %s is not in Callbacks", name)
		}
	}
	for _, name := range ForbiddenHostFunctions {
		if _, ok := Lookup(HostFunctions, name); !ok {
			t.Errorf("ForbiddenHostFunctions: %s is not a host function", name)
		}
	}
	// Spot checks of the signatures Envoy is strictest about.
	for _, tc := range []struct {
		funcs []Func
		name  string
		want  string
	}{
		{Callbacks, "proxy_on_request_headers", "(i32 i32 i32) -> (i32)"},
		{Callbacks, "proxy_on_context_create", "(i32 i32) -> ()"},
		{Callbacks, "proxy_on_http_call_response", "(i32 i32 i32 i32 i32) -> ()"},
		{Callbacks, ABIVersionExport, "() -> ()"},
		{HostFunctions, "proxy_increment_metric", "(i32 i64) -> (i32)"},
		{HostFunctions, "proxy_http_call", "(i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) -> (i32)"},
		{WASIEnvoy133, "clock_time_get", "(i32 i64 i32) -> (i32)"},
		{WASIEnvoy133, "proc_exit", "(i32) -> ()"},
	} {
		f, ok := Lookup(tc.funcs, tc.name)
		if got := signature(f); !ok || got != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func signature(f Func) string {
	join := func(ts []ValueType) string {
		s := make([]string, len(ts))
		for i, v := range ts {
			s[i] = v.String()
		}
		return strings.Join(s, " ")
	}
	return "(" + join(f.Params) + ") -> (" + join(f.Results) + ")"
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{StatusCasMismatch.String(), "cas mismatch"},
		{StatusUnimplemented.String(), "unimplemented"},
		{Status(99).String(), "unknown status"},
		{LogLevelWarn.String(), "warn"},
		{LogLevel(9).String(), "unknown"},
		{ValueType(0).String(), "unknown"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
