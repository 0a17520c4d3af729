package manifests

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Envoy type names the checks below refer to ("<proto package>.<message>").
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

// envoyKinds are the hand-maintained Envoy field lists (testdata/envoy), by type name.
type envoyKinds map[string]*Kind

func loadEnvoyKinds(t *testing.T) envoyKinds {
	t.Helper()
	fh, err := os.Open("testdata/envoy/envoy-1.35.schema")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	s, err := ParseSchema(fh)
	if err != nil {
		t.Fatalf("testdata/envoy/envoy-1.35.schema: %v", err)
	}
	out := envoyKinds{}
	for _, k := range s.Kinds {
		out[k.APIVersion+"."+k.Kind] = k
	}
	return out
}

// check checks n as the Envoy message typeName and, recursively, every
// google.protobuf.Any inside it (a mapping with "@type") as the type it names. at is n's
// place in the manifest, prefixed to every problem.
func (ks envoyKinds) check(typeName string, n *yaml.Node, at string) []string {
	k := ks[typeName]
	if k == nil {
		return []string{fmt.Sprintf("%s: no Envoy field list for %s (add its fields to testdata/envoy)", at, typeName)}
	}
	var out []string
	for _, p := range k.Check(n) {
		out = append(out, at+"."+p.String())
	}
	eachAny(n, at, func(a *yaml.Node, aAt string) {
		url := str(a, "@type")
		if !strings.HasPrefix(url, typeURLPrefix) {
			out = append(out, fmt.Sprintf("%s.@type: %q does not start with %s", aAt, url, typeURLPrefix))
			return
		}
		out = append(out, ks.check(strings.TrimPrefix(url, typeURLPrefix), a, aAt)...)
	})
	return out
}

// eachAny calls fn for every mapping below n (not n itself) that has an "@type" key, without
// looking inside those: check recurses into them itself.
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

// envoyPatchProblems checks the Envoy side of every EnvoyFilter patch value and every
// EnvoyPatchPolicy JSON patch in docs against the Envoy field lists: field names, value
// types and enum values, which the CRDs leave free-form and which istiod (unknown fields
// dropped) and Envoy Gateway (patch skipped) would otherwise only report at run time.
func envoyPatchProblems(ks envoyKinds, docs []doc) []string {
	var out []string
	for _, d := range docs {
		for i, cp := range items(get(d.node, "spec", "configPatches")) {
			at := fmt.Sprintf("%s spec.configPatches[%d].patch.value", d, i)
			v := get(cp, "patch", "value")
			if v == nil {
				continue // REMOVE
			}
			typeName, ok := envoyFilterTypes[str(cp, "applyTo")]
			if !ok {
				out = append(out, fmt.Sprintf("%s: applyTo %q unknown to this test (add it to envoyFilterTypes)", at, str(cp, "applyTo")))
				continue
			}
			out = append(out, ks.check(typeName, v, at)...)
		}
		for i, jp := range items(get(d.node, "spec", "jsonPatches")) {
			out = append(out, ks.jsonPatchProblems(jp, fmt.Sprintf("%s spec.jsonPatches[%d]", d, i))...)
		}
	}
	return out
}

// jsonPatchProblems checks one EnvoyPatchPolicy JSON patch. A whole-resource add is checked
// as the patch's type. An add or remove at jsonPath + path is checked by rebuilding the
// patched part as a document: the jsonPath must select elements of a repeated field listed in
// jsonPathElemTypes, and path names fields from there ("typed_config" of a wasm filter
// selected by name is read as the Wasm filter config).
func (ks envoyKinds) jsonPatchProblems(jp *yaml.Node, at string) []string {
	op, jsonPath, path := str(jp, "operation", "op"), str(jp, "operation", "jsonPath"), str(jp, "operation", "path")
	value := get(jp, "operation", "value")
	if jsonPath == "" && path == "" {
		if op != "add" || value == nil {
			return []string{fmt.Sprintf("%s: op %q without jsonPath or path", at, op)}
		}
		return ks.check(strings.TrimPrefix(str(jp, "type"), typeURLPrefix), value, at+".operation.value")
	}
	m := jsonPathField.FindStringSubmatch(jsonPath)
	if jsonPath == "" || m == nil || jsonPathElemTypes[m[1]] == "" {
		return []string{fmt.Sprintf("%s: jsonPath %q: this test only knows \"..<%s>[?...]\" selectors",
			at, jsonPath, strings.Join(slices.Sorted(maps.Keys(jsonPathElemTypes)), "|"))}
	}
	elemType := jsonPathElemTypes[m[1]]
	segs := strings.Split(path, "/")
	switch op {
	case "remove":
		if ks[elemType].Fields[strings.Join(segs, ".")] == nil {
			return []string{fmt.Sprintf("%s.operation.path: %s has no field %s", at, elemType, strings.Join(segs, "."))}
		}
		return nil
	case "add":
		if value == nil {
			return []string{at + ".operation.value: add without a value"}
		}
		anyType := ""
		if n := jsonPathName.FindStringSubmatch(jsonPath); n != nil && strings.HasPrefix(n[1], wasmFilterPrefix) {
			anyType = wasmType
		}
		return ks.check(elemType, nestAt(segs, value, anyType), at+" (at "+m[1]+"[])")
	}
	return []string{fmt.Sprintf("%s: op %q unknown to this test", at, op)}
}

// nestAt builds {segs[0]: {segs[1]: ... value}}; the mapping under a "typed_config" segment
// gets "@type" anyType when anyType is set.
func nestAt(segs []string, value *yaml.Node, anyType string) *yaml.Node {
	n := value
	for i := len(segs) - 1; i >= 0; i-- {
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		m.Content = append(m.Content, scalar(segs[i]), n)
		if i > 0 && segs[i-1] == "typed_config" && anyType != "" {
			m.Content = append(m.Content, scalar("@type"), scalar(typeURLPrefix+anyType))
		}
		n = m
	}
	return n
}

func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// TestEnvoyPatchFields: every Envoy field in the Istio and Envoy Gateway patches exists in
// Envoy 1.35 with a value of the right type.
func TestEnvoyPatchFields(t *testing.T) {
	ks := loadEnvoyKinds(t)
	docs := loadDocs(t)
	checked := 0
	for _, d := range docs {
		checked += len(items(get(d.node, "spec", "configPatches"))) + len(items(get(d.node, "spec", "jsonPatches")))
	}
	if checked < 20 {
		t.Fatalf("only %d patches found, want at least 20 (5 filter-*.yaml × 2, route and original-dst patches, 9 Envoy Gateway)", checked)
	}
	for _, p := range envoyPatchProblems(ks, docs) {
		t.Error(p)
	}
}

// TestEnvoyPatchFieldsCatch shows that the check reports the mistakes that would make a
// patch silently lose a setting or be skipped.
func TestEnvoyPatchFieldsCatch(t *testing.T) {
	ks := loadEnvoyKinds(t)
	const ef = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: f}
spec:
  configPatches:
  - applyTo: EXTENSION_CONFIG
    patch:
      operation: ADD
      value:
        name: pdroute
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
          config:
            %s
            vm_config: {vm_id: pdroute, runtime: envoy.wasm.runtime.v8}
            configuration:
              "@type": type.googleapis.com/google.protobuf.Struct
              value: {mode: nixl}
`
	const epp = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyPatchPolicy
metadata: {name: p}
spec:
  jsonPatches:
  - type: type.googleapis.com/envoy.config.listener.v3.Listener
    name: l
    operation:
      op: %s
      jsonPath: "%s"
      path: %s
      value: %s
`
	wasmSel := "..http_filters[?(@.name=='envoy.filters.http.wasm/envoyextensionpolicy/ns/p/wasm/0')]"
	tests := []struct {
		name, text string
		want       []string // substrings, one per problem, in order
	}{
		{"valid wasm config", fmt.Sprintf(ef, "allow_on_headers_stop_iteration: true"), nil},
		{"misspelt flag", fmt.Sprintf(ef, "allow_on_header_stop_iteration: true"),
			[]string{"typed_config.config.allow_on_header_stop_iteration: unknown field"}},
		{"flag as a string", fmt.Sprintf(ef, `allow_on_headers_stop_iteration: "true"`),
			[]string{`typed_config.config.allow_on_headers_stop_iteration: want boolean, got str "true"`}},
		{"camelCase name", fmt.Sprintf(ef, "failurePolicy: FAIL_RELOAD"),
			[]string{"typed_config.config.failurePolicy: unknown field"}},
		{"bad enum", fmt.Sprintf(ef, "failure_policy: FAIL_CLOSE"),
			[]string{`typed_config.config.failure_policy: value "FAIL_CLOSE" not allowed`}},
		{"unknown Any type", strings.Replace(fmt.Sprintf(ef, ""), "google.protobuf.Struct", "google.protobuf.StringValue", 1),
			[]string{"configuration: no Envoy field list for google.protobuf.StringValue"}},
		{"Any without type prefix", strings.Replace(fmt.Sprintf(ef, ""), "type.googleapis.com/google.protobuf.Struct", "google.protobuf.Struct", 1),
			[]string{`configuration.@type: "google.protobuf.Struct" does not start with type.googleapis.com/`}},
		{"valid wasm json patch", fmt.Sprintf(epp, "add", wasmSel, "typed_config/config/allow_on_headers_stop_iteration", "true"), nil},
		{"json patch misspelt field", fmt.Sprintf(epp, "add", wasmSel, "typed_config/config/allow_on_headers_stop", "true"),
			[]string{"(at http_filters[]).typed_config.config.allow_on_headers_stop: unknown field"}},
		{"json patch wrong type", fmt.Sprintf(epp, "add", wasmSel, "typed_config/config/failure_policy", "true"),
			[]string{`typed_config.config.failure_policy: want string, got bool "true"`}},
		{"json patch unknown selector", fmt.Sprintf(epp, "add", "$.filter_chains[0]", "name", "x"),
			[]string{`jsonPath "$.filter_chains[0]": this test only knows`}},
		{"route remove of a missing field", fmt.Sprintf(epp, "remove", "..routes[?match(@.name, 'x')]", "route/clusters", "null"),
			[]string{"operation.path: envoy.config.route.v3.Route has no field route.clusters"}},
		{"route add", fmt.Sprintf(epp, "add", "..routes[?match(@.name, 'x')]", "route/cluster_header", "x-pdroute-cluster"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := envoyPatchProblems(ks, parseDocs(t, "test.yaml", tc.text))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems %q, want %d %q", len(got), got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
