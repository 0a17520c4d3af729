package stack

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pdroute/pdroute/filter/config"
)

// Bootstrap is everything an Envoy bootstrap for pdroute depends on. Render
// turns it into the YAML that the emulator, real Envoy, `make dev` and the
// checked-in e2e/envoy/envoy.yaml all load: one generator, so the configs
// cannot drift apart.
type Bootstrap struct {
	// Listener is the client-facing listener's IP:port ("127.0.0.1:10000";
	// port 0 lets the emulator pick one).
	Listener string
	// Admin is the admin listener's IP:port (/stats, /stats/prometheus, /ready).
	Admin string
	// WasmFile is the module's path as Envoy opens it (relative paths resolve
	// against Envoy's working directory).
	WasmFile string
	// Plugin is the pdroute plugin configuration (JSON). The route header,
	// the ORIGINAL_DST cluster's name and the kvbridge cluster are read from
	// it, so the route and clusters always match what the filter sets.
	Plugin []byte
	// Clusters maps every static cluster the plugin configuration names
	// (engine endpoints given by cluster, metrics clusters, kvbridge) to its
	// IP:port. A cluster the configuration does not name is still written,
	// so the kvbridge cluster can exist in every mode.
	Clusters map[string]string
	// StreamIdleTimeout is the HCM stream_idle_timeout; zero writes
	// DefaultStreamIdleTimeout. The real-Envoy runner shortens it to measure
	// what ends a request the filter never resumes.
	StreamIdleTimeout time.Duration
	// RequestTimeout is the HCM request_timeout; zero writes
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// NoStopIteration leaves allow_on_headers_stop_iteration out of the wasm
	// filter's config, as Istio's WasmPlugin, Envoy Gateway's
	// EnvoyExtensionPolicy and Envoy 1.33/1.34 (which reject the field) do.
	// Requests then take pdroute's headers way (route_at).
	NoStopIteration bool
}

// The HCM timeouts every bootstrap writes (see docs/OPERATIONS.md, "Bounded
// waits", and RATIONALE.md).
const (
	// DefaultRequestTimeout bounds the time until the request has passed
	// every filter: Envoy arms it when the stream starts and disarms it when
	// the router has the end of the request or the response starts. It is
	// what ends a request the filter holds when its VM has died (nothing will
	// ever resume it), and it never cuts a generation, which starts later. It
	// must exceed what the filter legitimately holds a request for: the body
	// upload, prefill_timeout_ms (30 s) and lmcache's kv_wait_timeout_ms (10 s).
	DefaultRequestTimeout = 60 * time.Second
	// DefaultStreamIdleTimeout bounds silence on a stream. A non-streamed
	// generation sends nothing until it is done, so Envoy's 5 min default
	// would cut the long ones; 10 min matches the 600 s route timeout of the
	// Envoy Gateway manifests.
	DefaultStreamIdleTimeout = 10 * time.Minute
)

// Names written into every bootstrap.
const (
	// PluginName is the wasm filter's PluginConfig name, root_id and vm_id.
	// The vm_id namespaces shared data (the balancers' state).
	PluginName = "pdroute"
	// BufferLimitBytes is the listener's per_connection_buffer_limit_bytes: 8 MiB, above the plugin's largest
	// default max_body_bytes (4 MiB), because Envoy answers 413 itself when a
	// buffered request outgrows it (its default is 1 MiB, a 128k-token chat
	// prompt is 0.5–1 MiB).
	BufferLimitBytes = 8 << 20
	// statPrefix is the HCM's stat_prefix.
	statPrefix = "pdroute_ingress"
	// connectTimeout is every cluster's connect_timeout: loopback or LAN
	// engines connect in microseconds; a dead one should fail fast.
	connectTimeout = "1s"
)

// The typed_config URLs of the bootstrap.
const (
	typeHCM         = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeWasm        = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	typeRouter      = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	typeStringValue = "type.googleapis.com/google.protobuf.StringValue"
)

// Render validates b and returns the Envoy bootstrap YAML: an admin
// listener; one listener whose HTTP connection manager (request_timeout and
// stream_idle_timeout written out) runs the pdroute wasm filter (body
// readable before routing, FAIL_RELOAD) and the router on a
// catch-all route that takes its cluster from the plugin's route_header with
// no route timeout (Envoy's default 15 s would cut long generations); one
// STATIC cluster per entry of Clusters; and the ORIGINAL_DST cluster that
// endpoints given by address go through.
func (b Bootstrap) Render() ([]byte, error) {
	cfg, err := config.Parse(b.Plugin)
	if err != nil {
		return nil, err
	}
	if err := b.check(cfg); err != nil {
		return nil, err
	}
	listener, err := socketAddress(b.Listener)
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	admin, err := socketAddress(b.Admin)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	hcm := hcmConfig{
		Type:       typeHCM,
		StatPrefix: statPrefix,
		CodecType:  "AUTO",
		RouteConfig: routeConfig{
			Name: "pdroute",
			VirtualHosts: []virtualHost{{
				Name:    "pdroute",
				Domains: []string{"*"},
				Routes: []route{{
					Match: routeMatch{Prefix: "/"},
					Route: routeAction{ClusterHeader: cfg.RouteHeader, Timeout: "0s"},
				}},
			}},
		},
		HTTPFilters: []httpFilter{
			{Name: "envoy.filters.http.wasm", TypedConfig: wasmConfig{
				Type: typeWasm,
				Config: pluginConfig{
					Name:   PluginName,
					RootID: PluginName,
					VMConfig: vmConfig{
						VMID:    PluginName,
						Runtime: "envoy.wasm.runtime.v8",
						Code:    codeSource{Local: localFile{Filename: b.WasmFile}},
					},
					Configuration:               stringValue{Type: typeStringValue, Value: string(b.Plugin)},
					FailurePolicy:               "FAIL_RELOAD",
					AllowOnHeadersStopIteration: !b.NoStopIteration,
				},
			}},
			{Name: "envoy.filters.http.router", TypedConfig: routerConfig{Type: typeRouter}},
		},
	}
	hcm.StreamIdleTimeout = durationString(cmp.Or(b.StreamIdleTimeout, DefaultStreamIdleTimeout))
	hcm.RequestTimeout = durationString(cmp.Or(b.RequestTimeout, DefaultRequestTimeout))
	boot := bootstrap{
		Admin: adminConfig{Address: address{SocketAddress: admin}},
		StaticResources: staticResources{
			Listeners: []listenerConfig{{
				Name:                          "pdroute",
				Address:                       address{SocketAddress: listener},
				PerConnectionBufferLimitBytes: BufferLimitBytes,
				FilterChains:                  []filterChain{{Filters: []networkFilter{{Name: "envoy.filters.network.http_connection_manager", TypedConfig: hcm}}}},
			}},
		},
	}
	names := make([]string, 0, len(b.Clusters))
	for name := range b.Clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sa, err := socketAddress(b.Clusters[name])
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", name, err)
		}
		boot.StaticResources.Clusters = append(boot.StaticResources.Clusters, clusterConfig{
			Name:           name,
			Type:           "STATIC",
			ConnectTimeout: connectTimeout,
			LbPolicy:       "ROUND_ROBIN",
			LoadAssignment: &loadAssignment{
				ClusterName: name,
				Endpoints:   []localityEndpoints{{LbEndpoints: []lbEndpoint{{Endpoint: endpoint{Address: address{SocketAddress: sa}}}}}},
			},
		})
	}
	boot.StaticResources.Clusters = append(boot.StaticResources.Clusters, clusterConfig{
		Name:                cfg.OriginalDstCluster,
		Type:                "ORIGINAL_DST",
		ConnectTimeout:      connectTimeout,
		LbPolicy:            "CLUSTER_PROVIDED",
		OriginalDstLbConfig: &originalDstLbConfig{UseHTTPHeader: true},
	})
	var out bytes.Buffer
	if b.NoStopIteration {
		out.WriteString(yamlHeaderNoFlag)
	} else {
		out.WriteString(yamlHeader)
	}
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(boot); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// yamlHeader starts a rendered bootstrap.
const yamlHeader = `# Envoy bootstrap for pdroute, written by e2e/stack (Bootstrap.Render).
# Needs Envoy >= 1.35 (allow_on_headers_stop_iteration). Do not edit by hand:
# regenerate it (see e2e/envoy/README.md).
`

// yamlHeaderNoFlag starts a bootstrap rendered with NoStopIteration.
const yamlHeaderNoFlag = `# Envoy bootstrap for pdroute, written by e2e/stack (Bootstrap.Render).
# For Envoy >= 1.33, 1.33 and 1.34 included: the wasm filter has no
# allow_on_headers_stop_iteration, so requests take pdroute's headers way (the
# decoder chosen from the headers). Do not edit by hand: regenerate it (see
# e2e/envoy/README.md).
`

// check reports what in b contradicts the plugin configuration.
func (b Bootstrap) check(cfg *config.Config) error {
	var errs []error
	need := map[string]string{}
	for _, pool := range []struct {
		name string
		p    *config.Pool
	}{{"prefill", &cfg.Prefill}, {"decode", &cfg.Decode}} {
		for i, e := range pool.p.Endpoints {
			path := fmt.Sprintf("%s.endpoints[%d]", pool.name, i)
			if e.Cluster != "" {
				need[e.Cluster] = path + ".cluster"
			}
			// metrics_cluster defaults to the endpoint's cluster.
			if _, named := need[e.MetricsCluster]; !named && e.MetricsCluster != "" && e.MetricsCluster != cfg.OriginalDstCluster {
				need[e.MetricsCluster] = path + ".metrics_cluster"
			}
		}
	}
	if cfg.Mode == config.ModeLMCache {
		need[cfg.LMCache.KVBridgeCluster] = "lmcache.kvbridge_cluster"
	}
	for name, path := range need {
		if _, ok := b.Clusters[name]; !ok {
			errs = append(errs, fmt.Errorf("%s names cluster %q, which Clusters does not define", path, name))
		}
	}
	if _, ok := b.Clusters[cfg.OriginalDstCluster]; ok {
		errs = append(errs, fmt.Errorf("cluster %q is the ORIGINAL_DST cluster; it cannot be static too", cfg.OriginalDstCluster))
	}
	if cfg.MaxBodyBytes > BufferLimitBytes {
		errs = append(errs, fmt.Errorf("max_body_bytes %d is above the listener buffer limit %d: Envoy would answer 413 first", cfg.MaxBodyBytes, BufferLimitBytes))
	}
	if b.WasmFile == "" {
		errs = append(errs, errors.New("WasmFile is required"))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

func socketAddress(s string) (sockAddr, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return sockAddr{}, fmt.Errorf("%q is not an IP:port", s)
	}
	return sockAddr{Address: ap.Addr().String(), PortValue: ap.Port()}, nil
}

// durationString writes d the way proto3 JSON writes a Duration ("1.5s").
func durationString(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// The YAML shapes below mirror Envoy's v3 protos field for field (in the
// order Envoy's docs list them); only what pdroute needs is present.

type bootstrap struct {
	Admin           adminConfig     `yaml:"admin"`
	StaticResources staticResources `yaml:"static_resources"`
}

type adminConfig struct {
	Address address `yaml:"address"`
}

type address struct {
	SocketAddress sockAddr `yaml:"socket_address"`
}

type sockAddr struct {
	Address   string `yaml:"address"`
	PortValue uint16 `yaml:"port_value"`
}

type staticResources struct {
	Listeners []listenerConfig `yaml:"listeners"`
	Clusters  []clusterConfig  `yaml:"clusters"`
}

type listenerConfig struct {
	Name                          string        `yaml:"name"`
	Address                       address       `yaml:"address"`
	PerConnectionBufferLimitBytes int           `yaml:"per_connection_buffer_limit_bytes"`
	FilterChains                  []filterChain `yaml:"filter_chains"`
}

type filterChain struct {
	Filters []networkFilter `yaml:"filters"`
}

type networkFilter struct {
	Name        string    `yaml:"name"`
	TypedConfig hcmConfig `yaml:"typed_config"`
}

type hcmConfig struct {
	Type              string       `yaml:"@type"`
	StatPrefix        string       `yaml:"stat_prefix"`
	CodecType         string       `yaml:"codec_type"`
	StreamIdleTimeout string       `yaml:"stream_idle_timeout,omitempty"`
	RequestTimeout    string       `yaml:"request_timeout,omitempty"`
	RouteConfig       routeConfig  `yaml:"route_config"`
	HTTPFilters       []httpFilter `yaml:"http_filters"`
}

type routeConfig struct {
	Name         string        `yaml:"name"`
	VirtualHosts []virtualHost `yaml:"virtual_hosts"`
}

type virtualHost struct {
	Name    string   `yaml:"name"`
	Domains []string `yaml:"domains"`
	Routes  []route  `yaml:"routes"`
}

type route struct {
	Match routeMatch  `yaml:"match"`
	Route routeAction `yaml:"route"`
}

type routeMatch struct {
	Prefix string `yaml:"prefix"`
}

type routeAction struct {
	ClusterHeader string `yaml:"cluster_header"`
	Timeout       string `yaml:"timeout"`
}

type httpFilter struct {
	Name        string `yaml:"name"`
	TypedConfig any    `yaml:"typed_config"`
}

type wasmConfig struct {
	Type   string       `yaml:"@type"`
	Config pluginConfig `yaml:"config"`
}

type pluginConfig struct {
	Name                        string      `yaml:"name"`
	RootID                      string      `yaml:"root_id"`
	VMConfig                    vmConfig    `yaml:"vm_config"`
	Configuration               stringValue `yaml:"configuration"`
	FailurePolicy               string      `yaml:"failure_policy"`
	AllowOnHeadersStopIteration bool        `yaml:"allow_on_headers_stop_iteration,omitempty"`
}

type vmConfig struct {
	VMID    string     `yaml:"vm_id"`
	Runtime string     `yaml:"runtime"`
	Code    codeSource `yaml:"code"`
}

type codeSource struct {
	Local localFile `yaml:"local"`
}

type localFile struct {
	Filename string `yaml:"filename"`
}

type stringValue struct {
	Type  string `yaml:"@type"`
	Value string `yaml:"value"`
}

type routerConfig struct {
	Type string `yaml:"@type"`
}

type clusterConfig struct {
	Name                string               `yaml:"name"`
	Type                string               `yaml:"type"`
	ConnectTimeout      string               `yaml:"connect_timeout"`
	LbPolicy            string               `yaml:"lb_policy"`
	LoadAssignment      *loadAssignment      `yaml:"load_assignment,omitempty"`
	OriginalDstLbConfig *originalDstLbConfig `yaml:"original_dst_lb_config,omitempty"`
}

type loadAssignment struct {
	ClusterName string              `yaml:"cluster_name"`
	Endpoints   []localityEndpoints `yaml:"endpoints"`
}

type localityEndpoints struct {
	LbEndpoints []lbEndpoint `yaml:"lb_endpoints"`
}

type lbEndpoint struct {
	Endpoint endpoint `yaml:"endpoint"`
}

type endpoint struct {
	Address address `yaml:"address"`
}

type originalDstLbConfig struct {
	UseHTTPHeader bool `yaml:"use_http_header"`
}
