package envoyemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// baseYAML is a complete config; tests patch one part of it.
const baseYAML = `
admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: 9901 }
static_resources:
  listeners:
  - name: main
    address:
      socket_address: { address: 127.0.0.1, port_value: 10000 }
    per_connection_buffer_limit_bytes: 2048
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          codec_type: AUTO
          stream_idle_timeout: 30s
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { path: "/exact" }
                route: { cluster: static, timeout: 0s }
              - match: { prefix: "/" }
                route: { cluster_header: X-Target, timeout: 2.5s, cluster_not_found_response_code: NOT_FOUND }
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: pdroute
                root_id: root
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"mode":"nixl"}'
                failure_policy: FAIL_RELOAD
                reload_config: { backoff: { base_interval: 0.25s } }
                vm_config:
                  vm_id: vm
                  runtime: envoy.wasm.runtime.v8
                  code: { local: { filename: MODULE } }
                  configuration: { "@type": type.googleapis.com/google.protobuf.BytesValue, value: "aGk=" }
                  environment_variables: { key_values: { GOGC: "50", A: "1" } }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: static
    connectTimeout: 0.5s
    type: STATIC
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: static
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8001 } } }
        - endpoint: { address: { socket_address: { address: "::1", portValue: "8002" } } }
  - name: dyn
    type: ORIGINAL_DST
    lb_policy: CLUSTER_PROVIDED
    original_dst_lb_config: { use_http_header: true, http_header_name: X-Dst }
`

func moduleFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "m.wasm")
	if err := os.WriteFile(p, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseConfig(t *testing.T) {
	mod := moduleFile(t)
	cfg, err := ParseConfig([]byte(strings.Replace(baseYAML, "MODULE", mod, 1)), EnvoyVersion{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminAddr != "127.0.0.1:9901" || len(cfg.Listeners) != 1 {
		t.Fatalf("admin %q listeners %d", cfg.AdminAddr, len(cfg.Listeners))
	}
	l := cfg.Listeners[0]
	if l.Addr != "127.0.0.1:10000" || l.BufferLimit != 2048 || l.StreamIdleTimeout != 30*time.Second || l.StatPrefix != "ingress" {
		t.Errorf("listener %+v", l)
	}
	routes := l.Routes[0].Routes
	if !routes[0].IsPath || routes[0].Path != "/exact" || routes[0].Cluster != "static" || routes[0].Timeout != 0 || routes[0].NotFoundCode != 503 {
		t.Errorf("route 0 %+v", routes[0])
	}
	if routes[1].Prefix != "/" || routes[1].ClusterHeader != "x-target" || routes[1].Timeout != 2500*time.Millisecond || routes[1].NotFoundCode != 404 {
		t.Errorf("route 1 %+v", routes[1])
	}
	p := l.Plugin
	if p.Name != "pdroute" || p.RootID != "root" || p.VMID != "vm" || string(p.PluginConfig) != `{"mode":"nixl"}` ||
		string(p.VMConfig) != "hi" || p.FailurePolicy != FailReload || p.ReloadBackoff != 250*time.Millisecond ||
		p.Filename != mod || len(p.Code) != 8 {
		t.Errorf("plugin %+v", p)
	}
	if len(p.Env) != 2 || p.Env[0] != [2]string{"A", "1"} || p.Env[1] != [2]string{"GOGC", "50"} {
		t.Errorf("env %v", p.Env)
	}
	st := cfg.Clusters["static"]
	if st.ConnectTimeout != 500*time.Millisecond || strings.Join(st.Endpoints, ",") != "127.0.0.1:8001,[::1]:8002" || st.OriginalDst {
		t.Errorf("static %+v", st)
	}
	if dyn := cfg.Clusters["dyn"]; !dyn.OriginalDst || dyn.DstHeader != "x-dst" || dyn.ConnectTimeout != 5*time.Second {
		t.Errorf("dyn %+v", dyn)
	}
}

// TestParseConfigErrors: every rejection names the field.
func TestParseConfigErrors(t *testing.T) {
	mod := moduleFile(t)
	tests := []struct {
		name    string
		old     string
		new     string
		version EnvoyVersion
		want    string
	}{
		{"unknown cluster field", "    lb_policy: ROUND_ROBIN\n", "    lb_policy: ROUND_ROBIN\n    foo: 1\n", EnvoyVersion{},
			`static_resources.clusters[0]: unknown field "foo"`},
		{"unknown deep field", "cluster_name: static\n", "cluster_name: static\n      policy: {}\n", EnvoyVersion{},
			`static_resources.clusters[0].load_assignment: unknown field "policy"`},
		{"bad port", "port_value: 8001", "port_value: 80001", EnvoyVersion{},
			"static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: 80001 is out of range"},
		{"not an IP", "address: 127.0.0.1, port_value: 8001", "address: localhost, port_value: 8001", EnvoyVersion{},
			`static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: not an IP address: "localhost"`},
		{"bad duration", "connectTimeout: 0.5s", "connectTimeout: 5m", EnvoyVersion{},
			`static_resources.clusters[0].connect_timeout: invalid duration "5m"`},
		{"zero connect timeout", "connectTimeout: 0.5s", "connectTimeout: 0s", EnvoyVersion{},
			"static_resources.clusters[0].connect_timeout: must be greater than 0s"},
		{"unemulated cluster type", "type: STATIC", "type: STRICT_DNS", EnvoyVersion{},
			`static_resources.clusters[0].type: cluster type "STRICT_DNS" is not emulated`},
		{"original dst lb policy", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN", EnvoyVersion{},
			`static_resources.clusters[1].lb_policy: only CLUSTER_PROVIDED is allowed with cluster type ORIGINAL_DST`},
		{"unknown route cluster", "cluster: static, timeout: 0s", "cluster: nope, timeout: 0s", EnvoyVersion{},
			`static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0].route.cluster: unknown cluster "nope"`},
		{"both prefix and path", `match: { path: "/exact" }`, `match: { path: "/exact", prefix: "/" }`, EnvoyVersion{},
			"routes[0].match: set only one of prefix and path"},
		{"router not last", "          - name: envoy.filters.http.router\n", "          - name: envoy.filters.http.routerx\n", EnvoyVersion{},
			"typed_config.http_filters: the last HTTP filter must be envoy.filters.http.router"},
		{"bad failure policy", "failure_policy: FAIL_RELOAD", "failure_policy: FAIL_SOMETIMES", EnvoyVersion{},
			`http_filters[0].typed_config.config.failure_policy: unknown failure policy "FAIL_SOMETIMES"`},
		{"fail_open with failure_policy", "failure_policy: FAIL_RELOAD", "failure_policy: FAIL_RELOAD\n                fail_open: true", EnvoyVersion{},
			"http_filters[0].typed_config.config: only one of fail_open or failure_policy can be set"},
		{"allow_on_headers_stop_iteration before 1.35", "failure_policy: FAIL_RELOAD", "failure_policy: FAIL_RELOAD\n                allow_on_headers_stop_iteration: true", EnvoyVersion{34},
			`unknown field "allow_on_headers_stop_iteration" (added in Envoy 1.35`},
		{"allow_on_headers_stop_iteration false on 1.33", "failure_policy: FAIL_RELOAD", "failure_policy: FAIL_RELOAD\n                allow_on_headers_stop_iteration: false", EnvoyVersion{33},
			`unknown field "allow_on_headers_stop_iteration" (added in Envoy 1.35`},
		{"bad runtime", "runtime: envoy.wasm.runtime.v8", "runtime: envoy.wasm.runtime.wazero", EnvoyVersion{},
			`vm_config.runtime: unknown wasm runtime "envoy.wasm.runtime.wazero"`},
		{"missing module", "filename: MODULE", "filename: /nonexistent/x.wasm", EnvoyVersion{},
			"vm_config.code.local.filename: open /nonexistent/x.wasm"},
		{"unknown any type", "type.googleapis.com/google.protobuf.StringValue", "type.googleapis.com/google.protobuf.Int32Value", EnvoyVersion{},
			`typed_config.config.configuration.@type: unsupported configuration type`},
		{"wrong hcm type", "v3.HttpConnectionManager", "v2.HttpConnectionManager", EnvoyVersion{},
			`static_resources.listeners[0].filter_chains[0].filters[0].typed_config.@type: want`},
		{"list for a scalar", "stat_prefix: ingress", "stat_prefix: [a]", EnvoyVersion{},
			"typed_config.stat_prefix: want a string, got a list"},
		{"duplicate field", "stat_prefix: ingress", "stat_prefix: ingress\n          statPrefix: again", EnvoyVersion{},
			`field "stat_prefix" set twice`},
		{"duplicate cluster", "  - name: dyn\n", "  - name: static\n", EnvoyVersion{},
			`static_resources.clusters[1].name: duplicate cluster "static"`},
		{"bad not-found code", "cluster_not_found_response_code: NOT_FOUND", "cluster_not_found_response_code: GONE", EnvoyVersion{},
			`cluster_not_found_response_code: unknown value "GONE"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := strings.Replace(baseYAML, tt.old, tt.new, 1)
			if y == baseYAML {
				t.Fatalf("patch %q did not apply", tt.old)
			}
			_, err := ParseConfig([]byte(strings.Replace(y, "MODULE", mod, 1)), tt.version)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestAllowOnHeadersStopIterationFrom135(t *testing.T) {
	y := strings.Replace(baseYAML, "failure_policy: FAIL_RELOAD", "failure_policy: FAIL_RELOAD\n                allow_on_headers_stop_iteration: true", 1)
	cfg, err := ParseConfig([]byte(strings.Replace(y, "MODULE", moduleFile(t), 1)), EnvoyVersion{35})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Listeners[0].Plugin.AllowOnHeadersStopIteration {
		t.Error("allow_on_headers_stop_iteration not set")
	}
}

func TestParseProtoDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1s", time.Second, true},
		{"0.250s", 250 * time.Millisecond, true},
		{"1.000000001s", time.Second + 1, true},
		{"0s", 0, true},
		{"15s", 15 * time.Second, true},
		{"1", 0, false},
		{"1ms", 0, false},
		{"-1s", 0, false},
		{".5s", 0, false},
		{"1.0000000001s", 0, false},
		{"s", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseProtoDuration(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseProtoDuration(%q) = %v, %t; want %v, %t", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseEnvoyVersion(t *testing.T) {
	tests := []struct {
		in     string
		minor  int
		strict bool
		err    bool
	}{
		{"1.33", 33, true, false},
		{"1.38.2", 38, true, false},
		{"v1.39", 39, false, false},
		{"1.40", 40, false, false},
		{"1.32", 0, false, true},
		{"2.0", 0, false, true},
		{"1", 0, false, true},
		{"1.x", 0, false, true},
	}
	for _, tt := range tests {
		v, err := ParseEnvoyVersion(tt.in)
		if (err != nil) != tt.err || (err == nil && (v.Minor != tt.minor || v.StrictWASI() != tt.strict)) {
			t.Errorf("ParseEnvoyVersion(%q) = %+v, %v", tt.in, v, err)
		}
	}
	if !(EnvoyVersion{}).StrictWASI() || (EnvoyVersion{}).String() != "1.35" {
		t.Error("the zero version is not 1.35 (pdroute's minimum, strict WASI)")
	}
}

// FuzzParseConfig: no input makes the parser panic, and a config it accepts
// has its listeners and clusters resolved.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(strings.Replace(baseYAML, "MODULE", "plugin.wasm", 1)))
	f.Add([]byte("static_resources: {clusters: [{name: a, type: ORIGINAL_DST, lb_policy: CLUSTER_PROVIDED}]}"))
	f.Add([]byte("admin: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}\nstatic_resources: {}"))
	f.Add([]byte("a: &x [*x]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		module := func(string) ([]byte, error) { return []byte("\x00asm\x01\x00\x00\x00"), nil }
		cfg, err := parseConfig(data, EnvoyVersion{}, module)
		if err != nil {
			return
		}
		for _, l := range cfg.Listeners {
			for _, vh := range l.Routes {
				for _, r := range vh.Routes {
					if r.Cluster != "" && cfg.Clusters[r.Cluster] == nil {
						t.Fatalf("route to unknown cluster %q accepted", r.Cluster)
					}
				}
			}
		}
	})
}
