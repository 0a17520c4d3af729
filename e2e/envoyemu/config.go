package envoyemu

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The config is a subset of Envoy's v3 bootstrap (envoy.config.bootstrap.v3.Bootstrap).
// The yaml* types mirror its messages: every field has the name and meaning it
// has in Envoy, so one file loads in both. Fields Envoy has but the emulator does not implement are rejected as
// unknown rather than silently ignored, so a config never means something else here.

// Type URLs of the typed_config messages the emulator understands.
const (
	typeHCM          = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeWasm         = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	typeRouter       = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	typeStringValue  = "type.googleapis.com/google.protobuf.StringValue"
	typeBytesValue   = "type.googleapis.com/google.protobuf.BytesValue"
	typeStruct       = "type.googleapis.com/google.protobuf.Struct"
	filterHCM        = "envoy.filters.network.http_connection_manager"
	filterWasm       = "envoy.filters.http.wasm"
	filterRouter     = "envoy.filters.http.router"
	defaultBufferLim = 1 << 20 // Envoy's per_connection_buffer_limit_bytes default (1 MiB).
)

// yamlBootstrap is the root of an Envoy bootstrap config (the subset emulated).
type yamlBootstrap struct {
	Node            *yamlNode            `yaml:"node"`
	Admin           *yamlAdmin           `yaml:"admin"`
	StaticResources *yamlStaticResources `yaml:"static_resources"`
}

// yamlNode identifies the proxy (node.id, node.cluster); informational only.
type yamlNode struct {
	ID      string `yaml:"id"`
	Cluster string `yaml:"cluster"`
}

// yamlAdmin is the admin listener (GET /stats, /stats/prometheus, /ready).
type yamlAdmin struct {
	Address *yamlAddress `yaml:"address"`
}

// yamlStaticResources holds the listeners and clusters.
type yamlStaticResources struct {
	Listeners []yamlListener `yaml:"listeners"`
	Clusters  []yamlCluster  `yaml:"clusters"`
}

// yamlAddress is envoy.config.core.v3.Address (socket_address only).
type yamlAddress struct {
	SocketAddress *yamlSocketAddress `yaml:"socket_address"`
}

// yamlSocketAddress is an IP address and port.
type yamlSocketAddress struct {
	Address   string `yaml:"address"`
	PortValue uint32 `yaml:"port_value"`
	Protocol  string `yaml:"protocol"`
}

// yamlListener is one HTTP listener with exactly one HTTP connection manager.
type yamlListener struct {
	Name    string       `yaml:"name"`
	Address *yamlAddress `yaml:"address"`
	// PerConnectionBufferLimitBytes bounds buffered bodies (413/500 over it);
	// Envoy's default is 1 MiB.
	PerConnectionBufferLimitBytes *uint32           `yaml:"per_connection_buffer_limit_bytes"`
	FilterChains                  []yamlFilterChain `yaml:"filter_chains"`
}

// yamlFilterChain is a listener filter chain (one network filter: the HCM).
type yamlFilterChain struct {
	Filters []yamlNetworkFilter `yaml:"filters"`
}

// yamlNetworkFilter is a listener network filter; only the HCM is emulated.
type yamlNetworkFilter struct {
	Name        string                     `yaml:"name"`
	TypedConfig *yamlHttpConnectionManager `yaml:"typed_config"`
}

// yamlHttpConnectionManager is the HCM (HTTP/1.1 only in the emulator).
type yamlHttpConnectionManager struct {
	StatPrefix  string                  `yaml:"stat_prefix"`
	CodecType   string                  `yaml:"codec_type"`
	RouteConfig *yamlRouteConfiguration `yaml:"route_config"`
	HTTPFilters []yamlHTTPFilter        `yaml:"http_filters"`
	// StreamIdleTimeout resets a stream with no activity (Envoy default 5 min);
	// it is what ends a request the filter paused and never resumed.
	StreamIdleTimeout *yamlDuration `yaml:"stream_idle_timeout"`
	// RequestTimeout bounds receiving the whole request (Envoy default: none).
	RequestTimeout *yamlDuration `yaml:"request_timeout"`
}

func (h *yamlHttpConnectionManager) unmarshalYAML(budget *int, path string, n *yaml.Node) error {
	type plain yamlHttpConnectionManager
	return decodeTyped(budget, path, n, typeHCM, (*plain)(h))
}

// yamlRouteConfiguration is an inline route table.
type yamlRouteConfiguration struct {
	Name         string            `yaml:"name"`
	VirtualHosts []yamlVirtualHost `yaml:"virtual_hosts"`
}

// yamlVirtualHost groups routes by :authority (domains "*" matches any host).
type yamlVirtualHost struct {
	Name    string      `yaml:"name"`
	Domains []string    `yaml:"domains"`
	Routes  []yamlRoute `yaml:"routes"`
}

// yamlRoute is a match plus a route action.
type yamlRoute struct {
	Name  string           `yaml:"name"`
	Match yamlRouteMatch   `yaml:"match"`
	Route *yamlRouteAction `yaml:"route"`
}

// yamlRouteMatch matches :path by prefix or exactly (query string excluded).
type yamlRouteMatch struct {
	Prefix *string `yaml:"prefix"`
	Path   *string `yaml:"path"`
}

// yamlRouteAction selects the upstream cluster.
type yamlRouteAction struct {
	Cluster       string `yaml:"cluster"`
	ClusterHeader string `yaml:"cluster_header"`
	// Timeout covers the whole upstream response; Envoy's default is 15 s, 0 disables it.
	Timeout *yamlDuration `yaml:"timeout"`
	// ClusterNotFoundResponseCode is the answer when the cluster does not exist
	// (also a missing cluster_header): SERVICE_UNAVAILABLE (503, Envoy's default),
	// NOT_FOUND (404) or INTERNAL_SERVER_ERROR (500).
	ClusterNotFoundResponseCode yamlEnum `yaml:"cluster_not_found_response_code"`
}

// yamlHTTPFilter is one entry of http_filters: the wasm filter or the router.
type yamlHTTPFilter struct {
	Name        string                `yaml:"name"`
	TypedConfig *yamlHTTPFilterConfig `yaml:"typed_config"`
}

// yamlHTTPFilterConfig is the typed_config of an HTTP filter: exactly one of Wasm
// (envoy.extensions.filters.http.wasm.v3.Wasm) or Router is set.
type yamlHTTPFilterConfig struct {
	Type   string
	Wasm   *yamlWasmFilter
	Router *yamlRouterFilter
}

func (c *yamlHTTPFilterConfig) unmarshalYAML(budget *int, path string, n *yaml.Node) error {
	t, err := anyType(path, n)
	if err != nil {
		return err
	}
	c.Type = t
	switch t {
	case typeWasm:
		c.Wasm = &yamlWasmFilter{}
		return decodeTyped(budget, path, n, t, c.Wasm)
	case typeRouter:
		c.Router = &yamlRouterFilter{}
		return decodeTyped(budget, path, n, t, c.Router)
	}
	return errAt(joinPath(path, "@type"), "unsupported HTTP filter type %q (the emulator runs the wasm filter and the router)", t)
}

// yamlWasmFilter is envoy.extensions.filters.http.wasm.v3.Wasm.
type yamlWasmFilter struct {
	Config *yamlPluginConfig `yaml:"config"`
}

// yamlRouterFilter is envoy.extensions.filters.http.router.v3.Router (no options emulated).
type yamlRouterFilter struct{}

// yamlPluginConfig is envoy.extensions.wasm.v3.PluginConfig.
type yamlPluginConfig struct {
	Name          string            `yaml:"name"`
	RootID        string            `yaml:"root_id"`
	VMConfig      *yamlVMConfig     `yaml:"vm_config"`
	Configuration *yamlAnyBytes     `yaml:"configuration"`
	FailurePolicy yamlEnum          `yaml:"failure_policy"`
	FailOpen      bool              `yaml:"fail_open"`
	ReloadConfig  *yamlReloadConfig `yaml:"reload_config"`
	// AllowOnHeadersStopIteration keeps a header-phase Pause as StopIteration, so
	// body callbacks still reach the plugin while headers wait. Added in Envoy 1.35.
	AllowOnHeadersStopIteration *bool `yaml:"allow_on_headers_stop_iteration"`
}

// yamlReloadConfig is the FAIL_RELOAD backoff.
type yamlReloadConfig struct {
	Backoff *yamlBackoffStrategy `yaml:"backoff"`
}

// yamlBackoffStrategy is envoy.config.core.v3.BackoffStrategy; Envoy's wasm reload
// uses only base_interval (default 1 s).
type yamlBackoffStrategy struct {
	BaseInterval *yamlDuration `yaml:"base_interval"`
	MaxInterval  *yamlDuration `yaml:"max_interval"`
}

// yamlVMConfig is envoy.extensions.wasm.v3.VmConfig.
type yamlVMConfig struct {
	VMID                 string                    `yaml:"vm_id"`
	Runtime              string                    `yaml:"runtime"`
	Code                 *yamlAsyncDataSource      `yaml:"code"`
	Configuration        *yamlAnyBytes             `yaml:"configuration"`
	EnvironmentVariables *yamlEnvironmentVariables `yaml:"environment_variables"`
}

// yamlAsyncDataSource is the module source; only local files are emulated.
type yamlAsyncDataSource struct {
	Local *yamlDataSource `yaml:"local"`
}

// yamlDataSource is a local file (relative paths resolve against the process cwd, as in Envoy).
type yamlDataSource struct {
	Filename string `yaml:"filename"`
}

// yamlEnvironmentVariables become the module's WASI environ.
type yamlEnvironmentVariables struct {
	HostEnvKeys []string          `yaml:"host_env_keys"`
	KeyValues   map[string]string `yaml:"key_values"`
}

// yamlCluster is envoy.config.cluster.v3.Cluster (STATIC and ORIGINAL_DST).
type yamlCluster struct {
	Name string `yaml:"name"`
	// Type is STATIC or ORIGINAL_DST.
	Type yamlEnum `yaml:"type"`
	// ConnectTimeout bounds the TCP connect; Envoy's default is 5 s.
	ConnectTimeout *yamlDuration `yaml:"connect_timeout"`
	// LbPolicy is ROUND_ROBIN (default), RANDOM or LEAST_REQUEST for STATIC
	// (all picked round robin here) and CLUSTER_PROVIDED for ORIGINAL_DST.
	LbPolicy            yamlEnum                   `yaml:"lb_policy"`
	LoadAssignment      *yamlClusterLoadAssignment `yaml:"load_assignment"`
	OriginalDstLbConfig *yamlOriginalDstLbConfig   `yaml:"original_dst_lb_config"`
}

// yamlClusterLoadAssignment lists the endpoints of a STATIC cluster.
type yamlClusterLoadAssignment struct {
	ClusterName string                    `yaml:"cluster_name"`
	Endpoints   []yamlLocalityLbEndpoints `yaml:"endpoints"`
}

// yamlLocalityLbEndpoints is one locality's endpoints.
type yamlLocalityLbEndpoints struct {
	LbEndpoints []yamlLbEndpoint `yaml:"lb_endpoints"`
}

// yamlLbEndpoint wraps an endpoint.
type yamlLbEndpoint struct {
	Endpoint *yamlEndpoint `yaml:"endpoint"`
}

// yamlEndpoint is an upstream host address.
type yamlEndpoint struct {
	Address *yamlAddress `yaml:"address"`
}

// yamlOriginalDstLbConfig makes an ORIGINAL_DST cluster take its host from a request
// header (x-envoy-original-dst-host unless http_header_name says otherwise).
type yamlOriginalDstLbConfig struct {
	UseHTTPHeader  bool   `yaml:"use_http_header"`
	HTTPHeaderName string `yaml:"http_header_name"`
}

// yamlDuration is a google.protobuf.Duration: "1.5s" or {seconds, nanos}.
type yamlDuration struct {
	D time.Duration
}

func (d *yamlDuration) unmarshalYAML(budget *int, path string, n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		var raw struct {
			Seconds string `yaml:"seconds"`
			Nanos   string `yaml:"nanos"`
		}
		if err := decodeStruct(budget, path, n, reflectValue(&raw)); err != nil {
			return err
		}
		s, err1 := strconv.ParseInt(orZero(raw.Seconds), 10, 64)
		ns, err2 := strconv.ParseInt(orZero(raw.Nanos), 10, 32)
		if err1 != nil || err2 != nil || s < 0 || ns < 0 || ns > 999999999 {
			return errAt(path, "invalid duration {seconds: %q, nanos: %q}", raw.Seconds, raw.Nanos)
		}
		d.D = time.Duration(s)*time.Second + time.Duration(ns)
		return nil
	}
	s, err := scalarString(path, n)
	if err != nil {
		return err
	}
	v, ok := parseProtoDuration(s)
	if !ok {
		return errAt(path, "invalid duration %q (want e.g. \"1.5s\")", s)
	}
	d.D = v
	return nil
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// parseProtoDuration parses the proto3 JSON duration form: decimal seconds with an "s" suffix.
func parseProtoDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(s, "s")
	if !ok || num == "" || strings.HasPrefix(num, "-") || strings.HasPrefix(num, "+") {
		return 0, false
	}
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" || len(frac) > 9 {
		return 0, false
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs > math.MaxInt64/int64(time.Second) {
		return 0, false
	}
	var nanos int64
	if frac != "" {
		f, err := strconv.ParseUint(frac, 10, 32)
		if err != nil {
			return 0, false
		}
		nanos = int64(f) * int64(math.Pow10(9-len(frac)))
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), true
}

// yamlEnum is a proto enum given by name.
type yamlEnum string

func (e *yamlEnum) unmarshalYAML(_ *int, path string, n *yaml.Node) error {
	s, err := scalarString(path, n)
	if err != nil {
		return err
	}
	*e = yamlEnum(s)
	return nil
}

// yamlAnyBytes is a google.protobuf.Any carrying a StringValue, BytesValue or
// Struct; Bytes is what the plugin reads: the string, the decoded bytes, or
// the Struct as JSON.
type yamlAnyBytes struct {
	Type  string
	Bytes []byte
}

func (a *yamlAnyBytes) unmarshalYAML(budget *int, path string, n *yaml.Node) error {
	t, err := anyType(path, n)
	if err != nil {
		return err
	}
	a.Type = t
	switch t {
	case typeStringValue, typeBytesValue:
		var v struct {
			Type  string `yaml:"@type"`
			Value string `yaml:"value"`
		}
		if err := decodeStruct(budget, path, n, reflectValue(&v)); err != nil {
			return err
		}
		if t == typeStringValue {
			a.Bytes = []byte(v.Value)
			return nil
		}
		b, err := base64.StdEncoding.DecodeString(v.Value)
		if err != nil {
			return errAt(joinPath(path, "value"), "BytesValue is not base64: %v", err)
		}
		a.Bytes = b
		return nil
	case typeStruct:
		// Proto3 JSON puts a Struct's fields next to "@type" ... except that
		// Struct is a well-known type whose JSON form is {"@type", "value": {...}}.
		var val *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch k := resolve(n.Content[i]).Value; k {
			case "@type":
			case "value":
				val = resolve(n.Content[i+1])
			default:
				return errAt(path, "unknown field %q", k)
			}
		}
		if val == nil || val.Kind != yaml.MappingNode {
			return errAt(joinPath(path, "value"), "want an object for google.protobuf.Struct")
		}
		b, err := yamlToJSON(joinPath(path, "value"), val)
		if err != nil {
			return err
		}
		a.Bytes = b
		return nil
	}
	return errAt(joinPath(path, "@type"), "unsupported configuration type %q (want StringValue, BytesValue or Struct)", t)
}

// reflectValue returns the addressable value p points to.
func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

// anyType returns the "@type" of a google.protobuf.Any object.
func anyType(path string, n *yaml.Node) (string, error) {
	if n.Kind != yaml.MappingNode {
		return "", errAt(path, "want an object with \"@type\", got %s", describe(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if resolve(n.Content[i]).Value == "@type" {
			return scalarString(joinPath(path, "@type"), resolve(n.Content[i+1]))
		}
	}
	return "", errAt(path, "missing \"@type\"")
}

// decodeTyped decodes an Any's fields (all keys but "@type") into out after
// checking the type URL.
func decodeTyped(budget *int, path string, n *yaml.Node, want string, out any) error {
	t, err := anyType(path, n)
	if err != nil {
		return err
	}
	if t != want {
		return errAt(joinPath(path, "@type"), "want %q, got %q", want, t)
	}
	rest := *n
	rest.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if resolve(n.Content[i]).Value != "@type" {
			rest.Content = append(rest.Content, n.Content[i], n.Content[i+1])
		}
	}
	return decodeStruct(budget, path, &rest, reflectValue(out))
}

// Config is a validated bootstrap ready to run: defaults applied, references
// resolved, module files read.
type Config struct {
	// Listeners in config order; Host.Addr is the first one's address.
	Listeners []*ListenerConfig
	// Clusters by name.
	Clusters map[string]*ClusterConfig
	// AdminAddr is the admin listener address ("" when no admin block).
	AdminAddr string
	// Version is the Envoy version the config was validated against.
	Version EnvoyVersion
}

// ListenerConfig is a listener after validation.
type ListenerConfig struct {
	Name string
	// Addr is "ip:port"; port 0 lets the kernel choose.
	Addr       string
	StatPrefix string
	// BufferLimit is per_connection_buffer_limit_bytes (Envoy's default 1 MiB):
	// a buffered body beyond it is answered 413 (request) or 500 (response).
	BufferLimit int
	// StreamIdleTimeout is the HCM stream_idle_timeout (default 5 min, 0 = none).
	StreamIdleTimeout time.Duration
	// RequestTimeout is the HCM request_timeout (default none).
	RequestTimeout time.Duration
	Routes         []*VirtualHostConfig
	// Plugin is the wasm filter, nil when the chain has none.
	Plugin *PluginSpec
}

// VirtualHostConfig is a virtual host after validation.
type VirtualHostConfig struct {
	Name    string
	Domains []string
	Routes  []*RouteConfig
}

// RouteConfig is a route after validation.
type RouteConfig struct {
	Name string
	// Prefix matches the start of :path (query included); with IsPath, Path
	// must equal :path without its query.
	Prefix string
	Path   string
	IsPath bool
	// Cluster is the fixed cluster, or ClusterHeader the request header naming it.
	Cluster       string
	ClusterHeader string
	// Timeout is the route timeout (Envoy's default 15 s, 0 = none).
	Timeout time.Duration
	// NotFoundCode answers a missing or unknown cluster (Envoy's default 503).
	NotFoundCode int
}

// ClusterConfig is a cluster after validation.
type ClusterConfig struct {
	Name string
	// OriginalDst marks an ORIGINAL_DST cluster; DstHeader is the request
	// header holding its host ("" when use_http_header is false: no host).
	OriginalDst bool
	DstHeader   string
	// Endpoints are the "ip:port" of a STATIC cluster.
	Endpoints []string
	// ConnectTimeout is connect_timeout (Envoy's default 5 s).
	ConnectTimeout time.Duration
}

// PluginSpec is a wasm plugin after validation: module read, configs unwrapped.
type PluginSpec struct {
	// Name, RootID and VMID are the PluginConfig name, root_id and vm_id (the
	// shared-data and queue namespace).
	Name, RootID, VMID string
	Runtime            string
	// Filename is where Code was read from.
	Filename string
	Code     []byte
	// VMConfig and PluginConfig are what VM_CONFIGURATION and
	// PLUGIN_CONFIGURATION return.
	VMConfig     []byte
	PluginConfig []byte
	// Env is the WASI environ: key_values sorted by key, then host_env_keys.
	Env           [][2]string
	FailurePolicy FailurePolicy
	// ReloadBackoff is reload_config.backoff.base_interval (Envoy's default 1 s).
	ReloadBackoff time.Duration
	// AllowOnHeadersStopIteration keeps a header Pause as StopIteration.
	AllowOnHeadersStopIteration bool
}

// FailurePolicy is what happens to streams when the plugin's VM has failed.
type FailurePolicy int

// Failure policies, as in envoy.extensions.wasm.v3.FailurePolicy.
const (
	// FailClosed answers 503 for the VM's streams (Envoy's default when unset).
	FailClosed FailurePolicy = iota
	// FailOpen lets streams pass through without the filter.
	FailOpen
	// FailReload creates a fresh VM for new streams, with backoff; in between it fails closed.
	FailReload
)

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "FAIL_OPEN"
	case FailReload:
		return "FAIL_RELOAD"
	}
	return "FAIL_CLOSED"
}

// LoadConfig reads and validates an Envoy bootstrap YAML file for version v.
func LoadConfig(path string, v EnvoyVersion) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(data, v)
}

// ParseConfig parses and validates bootstrap YAML for Envoy version v. Errors
// name the field path. Relative module filenames resolve against the process
// working directory, as in Envoy.
func ParseConfig(data []byte, v EnvoyVersion) (*Config, error) {
	return parseConfig(data, v, os.ReadFile)
}

// parseConfig is ParseConfig with the module reader injected (the fuzz test
// must not open whatever path a mutated config names).
func parseConfig(data []byte, v EnvoyVersion, readFile func(string) ([]byte, error)) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var b yamlBootstrap
	if r := resolve(&root); r != nil {
		if err := decodeYAML("", r, &b); err != nil {
			return nil, err
		}
	}
	return validate(&b, v, readFile)
}

func validate(b *yamlBootstrap, v EnvoyVersion, readFile func(string) ([]byte, error)) (*Config, error) {
	cfg := &Config{Clusters: map[string]*ClusterConfig{}, Version: v}
	if b.Admin != nil {
		addr, err := socketAddr("admin.address", b.Admin.Address)
		if err != nil {
			return nil, err
		}
		cfg.AdminAddr = addr
	}
	sr := b.StaticResources
	if sr == nil {
		return nil, errAt("static_resources", "required")
	}
	for i := range sr.Clusters {
		c, err := validateCluster(fmt.Sprintf("static_resources.clusters[%d]", i), &sr.Clusters[i])
		if err != nil {
			return nil, err
		}
		if _, dup := cfg.Clusters[c.Name]; dup {
			return nil, errAt(fmt.Sprintf("static_resources.clusters[%d].name", i), "duplicate cluster %q", c.Name)
		}
		cfg.Clusters[c.Name] = c
	}
	names := map[string]bool{}
	for i := range sr.Listeners {
		path := fmt.Sprintf("static_resources.listeners[%d]", i)
		l, err := validateListener(path, &sr.Listeners[i], cfg, v, readFile)
		if err != nil {
			return nil, err
		}
		if names[l.Name] {
			return nil, errAt(joinPath(path, "name"), "duplicate listener %q", l.Name)
		}
		names[l.Name] = true
		cfg.Listeners = append(cfg.Listeners, l)
	}
	return cfg, nil
}

func socketAddr(path string, a *yamlAddress) (string, error) {
	if a == nil || a.SocketAddress == nil {
		return "", errAt(joinPath(path, "socket_address"), "required")
	}
	sa := a.SocketAddress
	p := joinPath(path, "socket_address")
	if sa.Protocol != "" && sa.Protocol != "TCP" {
		return "", errAt(joinPath(p, "protocol"), "only TCP is emulated, got %q", sa.Protocol)
	}
	ip, err := netip.ParseAddr(sa.Address)
	if err != nil {
		return "", errAt(joinPath(p, "address"), "not an IP address: %q", sa.Address)
	}
	if sa.PortValue > 65535 {
		return "", errAt(joinPath(p, "port_value"), "%d is out of range", sa.PortValue)
	}
	return netip.AddrPortFrom(ip, uint16(sa.PortValue)).String(), nil
}

func validateCluster(path string, c *yamlCluster) (*ClusterConfig, error) {
	if c.Name == "" {
		return nil, errAt(joinPath(path, "name"), "required")
	}
	cc := &ClusterConfig{Name: c.Name, ConnectTimeout: 5 * time.Second}
	if c.ConnectTimeout != nil {
		if c.ConnectTimeout.D <= 0 {
			return nil, errAt(joinPath(path, "connect_timeout"), "must be greater than 0s")
		}
		cc.ConnectTimeout = c.ConnectTimeout.D
	}
	typ := c.Type
	if typ == "" {
		typ = "STATIC"
	}
	switch typ {
	case "STATIC":
		switch c.LbPolicy {
		case "", "ROUND_ROBIN", "RANDOM", "LEAST_REQUEST":
		case "CLUSTER_PROVIDED":
			return nil, errAt(joinPath(path, "lb_policy"), "CLUSTER_PROVIDED is only valid for ORIGINAL_DST clusters")
		default:
			return nil, errAt(joinPath(path, "lb_policy"), "unknown or unsupported lb_policy %q", c.LbPolicy)
		}
		if c.OriginalDstLbConfig != nil {
			return nil, errAt(joinPath(path, "original_dst_lb_config"), "only valid for ORIGINAL_DST clusters")
		}
		if c.LoadAssignment == nil {
			return nil, errAt(joinPath(path, "load_assignment"), "required for a STATIC cluster")
		}
		for i, loc := range c.LoadAssignment.Endpoints {
			for j, ep := range loc.LbEndpoints {
				p := fmt.Sprintf("%s.load_assignment.endpoints[%d].lb_endpoints[%d].endpoint", path, i, j)
				if ep.Endpoint == nil {
					return nil, errAt(p, "required")
				}
				addr, err := socketAddr(joinPath(p, "address"), ep.Endpoint.Address)
				if err != nil {
					return nil, err
				}
				cc.Endpoints = append(cc.Endpoints, addr)
			}
		}
	case "ORIGINAL_DST":
		cc.OriginalDst = true
		if c.LbPolicy != "CLUSTER_PROVIDED" {
			return nil, errAt(joinPath(path, "lb_policy"), "only CLUSTER_PROVIDED is allowed with cluster type ORIGINAL_DST, got %q", c.LbPolicy)
		}
		if c.LoadAssignment != nil {
			return nil, errAt(joinPath(path, "load_assignment"), "ORIGINAL_DST clusters must have no load assignment configured")
		}
		if o := c.OriginalDstLbConfig; o != nil && o.UseHTTPHeader {
			cc.DstHeader = "x-envoy-original-dst-host"
			if o.HTTPHeaderName != "" {
				cc.DstHeader = strings.ToLower(o.HTTPHeaderName)
			}
		}
	default:
		return nil, errAt(joinPath(path, "type"), "cluster type %q is not emulated (STATIC or ORIGINAL_DST)", c.Type)
	}
	return cc, nil
}

func validateListener(path string, l *yamlListener, cfg *Config, v EnvoyVersion, readFile func(string) ([]byte, error)) (*ListenerConfig, error) {
	addr, err := socketAddr(joinPath(path, "address"), l.Address)
	if err != nil {
		return nil, err
	}
	lc := &ListenerConfig{Name: l.Name, Addr: addr, BufferLimit: defaultBufferLim, StreamIdleTimeout: 5 * time.Minute}
	if l.PerConnectionBufferLimitBytes != nil {
		lc.BufferLimit = int(*l.PerConnectionBufferLimitBytes)
	}
	if len(l.FilterChains) != 1 {
		return nil, errAt(joinPath(path, "filter_chains"), "want exactly one filter chain, got %d", len(l.FilterChains))
	}
	fc := l.FilterChains[0]
	fpath := joinPath(path, "filter_chains[0].filters")
	if len(fc.Filters) != 1 {
		return nil, errAt(fpath, "want exactly one network filter (%s), got %d", filterHCM, len(fc.Filters))
	}
	nf := fc.Filters[0]
	fpath += "[0]"
	if nf.Name != filterHCM {
		return nil, errAt(joinPath(fpath, "name"), "only %s is emulated, got %q", filterHCM, nf.Name)
	}
	hcm := nf.TypedConfig
	if hcm == nil {
		return nil, errAt(joinPath(fpath, "typed_config"), "required")
	}
	hpath := joinPath(fpath, "typed_config")
	if hcm.StatPrefix == "" {
		return nil, errAt(joinPath(hpath, "stat_prefix"), "required")
	}
	lc.StatPrefix = hcm.StatPrefix
	switch hcm.CodecType {
	case "", "AUTO", "HTTP1":
	default:
		return nil, errAt(joinPath(hpath, "codec_type"), "only AUTO and HTTP1 are emulated (HTTP/1.1), got %q", hcm.CodecType)
	}
	if hcm.StreamIdleTimeout != nil {
		lc.StreamIdleTimeout = hcm.StreamIdleTimeout.D
	}
	if hcm.RequestTimeout != nil {
		lc.RequestTimeout = hcm.RequestTimeout.D
	}
	if hcm.RouteConfig == nil {
		return nil, errAt(joinPath(hpath, "route_config"), "required (rds is not emulated)")
	}
	if lc.Routes, err = validateRoutes(joinPath(hpath, "route_config"), hcm.RouteConfig, cfg); err != nil {
		return nil, err
	}
	if lc.Plugin, err = validateHTTPFilters(joinPath(hpath, "http_filters"), hcm.HTTPFilters, v, readFile); err != nil {
		return nil, err
	}
	return lc, nil
}

func validateRoutes(path string, rc *yamlRouteConfiguration, cfg *Config) ([]*VirtualHostConfig, error) {
	var out []*VirtualHostConfig
	for i, vh := range rc.VirtualHosts {
		vp := fmt.Sprintf("%s.virtual_hosts[%d]", path, i)
		if vh.Name == "" {
			return nil, errAt(joinPath(vp, "name"), "required")
		}
		if len(vh.Domains) == 0 {
			return nil, errAt(joinPath(vp, "domains"), "at least one domain is required")
		}
		vc := &VirtualHostConfig{Name: vh.Name, Domains: vh.Domains}
		for j, r := range vh.Routes {
			rp := fmt.Sprintf("%s.routes[%d]", vp, j)
			c := &RouteConfig{Name: r.Name, Timeout: 15 * time.Second}
			switch {
			case r.Match.Prefix != nil && r.Match.Path != nil:
				return nil, errAt(joinPath(rp, "match"), "set only one of prefix and path")
			case r.Match.Prefix != nil:
				c.Prefix = *r.Match.Prefix
			case r.Match.Path != nil:
				c.Path, c.IsPath = *r.Match.Path, true
			default:
				return nil, errAt(joinPath(rp, "match"), "one of prefix or path is required")
			}
			ra := r.Route
			if ra == nil {
				return nil, errAt(joinPath(rp, "route"), "required (direct_response and redirect are not emulated)")
			}
			ap := joinPath(rp, "route")
			switch {
			case ra.Cluster != "" && ra.ClusterHeader != "":
				return nil, errAt(ap, "set only one of cluster and cluster_header")
			case ra.Cluster != "":
				if _, ok := cfg.Clusters[ra.Cluster]; !ok {
					return nil, errAt(joinPath(ap, "cluster"), "unknown cluster %q", ra.Cluster)
				}
				c.Cluster = ra.Cluster
			case ra.ClusterHeader != "":
				c.ClusterHeader = strings.ToLower(ra.ClusterHeader)
			default:
				return nil, errAt(ap, "one of cluster or cluster_header is required")
			}
			if ra.Timeout != nil {
				c.Timeout = ra.Timeout.D
			}
			switch ra.ClusterNotFoundResponseCode {
			case "", "SERVICE_UNAVAILABLE":
				c.NotFoundCode = 503
			case "NOT_FOUND":
				c.NotFoundCode = 404
			case "INTERNAL_SERVER_ERROR":
				c.NotFoundCode = 500
			default:
				return nil, errAt(joinPath(ap, "cluster_not_found_response_code"), "unknown value %q", ra.ClusterNotFoundResponseCode)
			}
			vc.Routes = append(vc.Routes, c)
		}
		out = append(out, vc)
	}
	return out, nil
}

func validateHTTPFilters(path string, fs []yamlHTTPFilter, v EnvoyVersion, readFile func(string) ([]byte, error)) (*PluginSpec, error) {
	if len(fs) == 0 || fs[len(fs)-1].Name != filterRouter {
		return nil, errAt(path, "the last HTTP filter must be %s", filterRouter)
	}
	var plugin *PluginSpec
	for i, f := range fs {
		fp := fmt.Sprintf("%s[%d]", path, i)
		if f.TypedConfig == nil {
			return nil, errAt(joinPath(fp, "typed_config"), "required")
		}
		switch f.Name {
		case filterRouter:
			if i != len(fs)-1 {
				return nil, errAt(joinPath(fp, "name"), "%s must be the last HTTP filter", filterRouter)
			}
			if f.TypedConfig.Router == nil {
				return nil, errAt(joinPath(fp, "typed_config.@type"), "want %q", typeRouter)
			}
		case filterWasm:
			if plugin != nil {
				return nil, errAt(fp, "the emulator runs at most one wasm filter per listener")
			}
			if f.TypedConfig.Wasm == nil {
				return nil, errAt(joinPath(fp, "typed_config.@type"), "want %q", typeWasm)
			}
			p, err := validatePlugin(joinPath(fp, "typed_config.config"), f.TypedConfig.Wasm.Config, v, readFile)
			if err != nil {
				return nil, err
			}
			plugin = p
		default:
			return nil, errAt(joinPath(fp, "name"), "HTTP filter %q is not emulated (%s and %s are)", f.Name, filterWasm, filterRouter)
		}
	}
	return plugin, nil
}

func validatePlugin(path string, pc *yamlPluginConfig, v EnvoyVersion, readFile func(string) ([]byte, error)) (*PluginSpec, error) {
	if pc == nil {
		return nil, errAt(path, "required")
	}
	if pc.AllowOnHeadersStopIteration != nil && !v.AtLeast(35) {
		return nil, errAt(path, "unknown field \"allow_on_headers_stop_iteration\" (added in Envoy 1.35; emulating Envoy %s, see --envoy-version)", v)
	}
	vm := pc.VMConfig
	if vm == nil {
		return nil, errAt(joinPath(path, "vm_config"), "required")
	}
	vp := joinPath(path, "vm_config")
	switch vm.Runtime {
	case "envoy.wasm.runtime.v8", "envoy.wasm.runtime.wasmtime", "envoy.wasm.runtime.wamr", "envoy.wasm.runtime.wavm":
	default:
		return nil, errAt(joinPath(vp, "runtime"), "unknown wasm runtime %q", vm.Runtime)
	}
	if vm.Code == nil || vm.Code.Local == nil || vm.Code.Local.Filename == "" {
		return nil, errAt(joinPath(vp, "code.local.filename"), "required (remote code is not emulated)")
	}
	code, err := readFile(vm.Code.Local.Filename)
	if err != nil {
		return nil, errAt(joinPath(vp, "code.local.filename"), "%v", err)
	}
	spec := &PluginSpec{
		Name: pc.Name, RootID: pc.RootID, VMID: vm.VMID, Runtime: vm.Runtime,
		Filename: vm.Code.Local.Filename, Code: code, ReloadBackoff: time.Second,
	}
	if vm.Configuration != nil {
		spec.VMConfig = vm.Configuration.Bytes
	}
	if pc.Configuration != nil {
		spec.PluginConfig = pc.Configuration.Bytes
	}
	if ev := vm.EnvironmentVariables; ev != nil {
		keys := make([]string, 0, len(ev.KeyValues))
		for k := range ev.KeyValues {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			spec.Env = append(spec.Env, [2]string{k, ev.KeyValues[k]})
		}
		for _, k := range ev.HostEnvKeys {
			if val, ok := os.LookupEnv(k); ok {
				spec.Env = append(spec.Env, [2]string{k, val})
			}
		}
	}
	switch {
	case pc.FailOpen && pc.FailurePolicy != "" && pc.FailurePolicy != "UNSPECIFIED":
		return nil, errAt(path, "only one of fail_open or failure_policy can be set")
	case pc.FailOpen:
		spec.FailurePolicy = FailOpen
	default:
		switch pc.FailurePolicy {
		case "", "UNSPECIFIED", "FAIL_CLOSED":
			spec.FailurePolicy = FailClosed
		case "FAIL_OPEN":
			spec.FailurePolicy = FailOpen
		case "FAIL_RELOAD":
			spec.FailurePolicy = FailReload
		default:
			return nil, errAt(joinPath(path, "failure_policy"), "unknown failure policy %q", pc.FailurePolicy)
		}
	}
	if rc := pc.ReloadConfig; rc != nil && rc.Backoff != nil && rc.Backoff.BaseInterval != nil {
		if rc.Backoff.BaseInterval.D < time.Millisecond {
			return nil, errAt(joinPath(path, "reload_config.backoff.base_interval"), "must be at least 1ms")
		}
		spec.ReloadBackoff = rc.Backoff.BaseInterval.D
	}
	if pc.AllowOnHeadersStopIteration != nil {
		spec.AllowOnHeadersStopIteration = *pc.AllowOnHeadersStopIteration
	}
	return spec, nil
}
