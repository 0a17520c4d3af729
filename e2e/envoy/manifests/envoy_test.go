package manifests

import (
	"fmt"
	"regexp"

	"gopkg.in/yaml.v3"
)

// Envoy type names the manifest checks refer to ("<proto package>.<message>").
const (
	typeURLPrefix    = "type.googleapis.com/"
	wasmType         = "envoy.extensions.filters.http.wasm.v3.Wasm"
	rbacType         = "envoy.extensions.filters.http.rbac.v3.RBAC"
	structType       = "google.protobuf.Struct"
	httpFilterType   = "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"
	routeType        = "envoy.config.route.v3.Route"
	wasmFilterPrefix = "envoy.filters.http.wasm/" // Envoy Gateway's generated wasm filter names
)

// envoyFilterTypes is the Envoy message an Istio EnvoyFilter patch value is read as, per
// applyTo (istio/istio pkg/config/xds/xds.go BuildXDSObjectFromStruct). Only the applyTo
// values our manifests use are listed: a new one fails the test until it is added here.
var envoyFilterTypes = map[string]string{
	"CLUSTER":          "envoy.config.cluster.v3.Cluster",
	"LISTENER":         "envoy.config.listener.v3.Listener",
	"NETWORK_FILTER":   "envoy.config.listener.v3.Filter",
	"HTTP_ROUTE":       routeType,
	"HTTP_FILTER":      httpFilterType,
	"EXTENSION_CONFIG": "envoy.config.core.v3.TypedExtensionConfig",
}

// jsonPathElemTypes is the Envoy message of the elements an Envoy Gateway jsonPath selects,
// keyed by the repeated field it filters ("..routes[?(...)]" → Route). As above, only what
// our manifests use.
var jsonPathElemTypes = map[string]string{
	"routes":       routeType,
	"http_filters": httpFilterType,
}

var (
	jsonPathField = regexp.MustCompile(`^\.\.([a-z_]+)\[\?`)
	jsonPathName  = regexp.MustCompile(`\[\?\(@\.name\s*==\s*'([^']+)'\)\]$`)
)

// eachAny calls fn for every mapping below n (not n itself) that has an "@type" key, without
// looking inside those.
func eachAny(n *yaml.Node, at string, fn func(a *yaml.Node, at string)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, vAt := n.Content[i+1], at+"."+n.Content[i].Value
			if v.Kind == yaml.MappingNode && get(v, "@type") != nil {
				fn(v, vAt)
				continue
			}
			eachAny(v, vAt, fn)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			eachAny(v, fmt.Sprintf("%s[%d]", at, i), fn)
		}
	}
}

func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}
