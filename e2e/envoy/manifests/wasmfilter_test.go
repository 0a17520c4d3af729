package manifests

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// wasmFilterProblems checks the settings every pdroute wasm filter in docs must carry:
//   - allow_on_headers_stop_iteration: true (Envoy >= 1.35) where the plugin configuration
//     pins route_at "body": without it Envoy turns the filter's header Pause into
//     StopAllIterationAndWatermark and withholds the body. With route_at auto (the
//     default) or headers the filter needs no flag (it takes the headers way);
//   - failure_policy set explicitly to FAIL_CLOSED or FAIL_RELOAD and fail_open unset: the
//     default differs between builds, and FAIL_OPEN would send requests to the
//     cluster_header route unrouted with client routing headers intact;
//   - a vm_id, so the VM and its shared data are the filter's own.
//
// Istio: a WasmPlugin (wasmPluginProblems) pins its module, fails closed, selects the
// pdroute gateway and never pins route_at "body" (it cannot set the flag); each EnvoyFilter
// EXTENSION_CONFIG carrying a Wasm filter needs, in the same resource, the HTTP_FILTER
// patch that inserts it before the router by ECDS (same name, RBAC among the type URLs for
// the Istio agent's fallback), and every such HTTP_FILTER needs its EXTENSION_CONFIG (or
// the listener never warms). Envoy Gateway: each EnvoyExtensionPolicy wasm entry needs
// failOpen false (Envoy Gateway then fails closed without any patch); EnvoyPatchPolicy JSON
// patches on the filter Envoy Gateway generates for it, on a listener of the Gateway it
// attaches to, may add the flag and a failure_policy, which are then checked as above;
// Envoy Gateway sets the vm_id itself (the filter's own name).
func wasmFilterProblems(docs []doc) []string {
	var out []string
	for _, d := range docs {
		switch d.kind {
		case "WasmPlugin":
			out = append(out, wasmPluginProblems(d)...)
		case "EnvoyFilter":
			out = append(out, istioFilterProblems(d)...)
		case "EnvoyExtensionPolicy":
			out = append(out, gatewayWasmProblems(d, docs)...)
		}
	}
	return out
}

// pluginSettingsProblems checks a PluginConfig (the "config" of a Wasm filter config);
// plugin is the pdroute configuration it carries (nil when elsewhere). requirePolicy: the
// failure policy must be set here (Envoy Gateway's failOpen false makes it optional).
func pluginSettingsProblems(cfg, plugin *yaml.Node, at string, requirePolicy bool) []string {
	var out []string
	flag := get(cfg, "allow_on_headers_stop_iteration")
	if flag != nil && (flag.ShortTag() != "!!bool" || flag.Value != "true") {
		out = append(out, at+": allow_on_headers_stop_iteration: set it true, or leave it out (Envoy < 1.35 rejects the field)")
	}
	if str(plugin, "route_at") == "body" && flag == nil {
		out = append(out, at+`: route_at "body" needs allow_on_headers_stop_iteration: true (use route_at "auto" or "headers" without it)`)
	}
	if fp := str(cfg, "failure_policy"); (requirePolicy || fp != "") && fp != "FAIL_CLOSED" && fp != "FAIL_RELOAD" {
		out = append(out, fmt.Sprintf("%s: failure_policy %q: set FAIL_RELOAD or FAIL_CLOSED explicitly", at, fp))
	}
	if v := get(cfg, "fail_open"); v != nil && v.Value != "false" {
		out = append(out, at+": fail_open must not be set (and Envoy rejects it next to failure_policy)")
	}
	if str(cfg, "vm_config", "vm_id") == "" {
		out = append(out, at+": vm_config.vm_id is empty")
	}
	return out
}

func istioFilterProblems(d doc) []string {
	var out []string
	eachAny(d.node, d.String(), func(a *yaml.Node, at string) {
		if str(a, "@type") == typeURLPrefix+wasmType {
			out = append(out, pluginSettingsProblems(get(a, "config"), get(a, "config", "configuration", "value"), at+".config", true)...)
		}
	})
	extensions, filters := map[string]bool{}, map[string]*yaml.Node{}
	for _, cp := range items(get(d.node, "spec", "configPatches")) {
		v := get(cp, "patch", "value")
		switch str(cp, "applyTo") {
		case "EXTENSION_CONFIG":
			if str(v, "typed_config", "@type") == typeURLPrefix+wasmType {
				extensions[str(v, "name")] = true
			}
		case "HTTP_FILTER":
			if get(v, "config_discovery") != nil {
				filters[str(v, "name")] = cp
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(extensions)) {
		cp := filters[name]
		if cp == nil {
			out = append(out, fmt.Sprintf("%s: no HTTP_FILTER patch inserts EXTENSION_CONFIG %q", d, name))
			continue
		}
		if op, sub := str(cp, "patch", "operation"), str(cp, "match", "listener", "filterChain", "filter", "subFilter", "name"); op != "INSERT_BEFORE" || sub != "envoy.filters.http.router" {
			out = append(out, fmt.Sprintf("%s: HTTP_FILTER %q is %s %q, want INSERT_BEFORE envoy.filters.http.router", d, name, op, sub))
		}
		var urls []string
		for _, u := range items(get(cp, "patch", "value", "config_discovery", "type_urls")) {
			urls = append(urls, u.Value)
		}
		for _, want := range []string{wasmType, rbacType} {
			if !slices.Contains(urls, typeURLPrefix+want) {
				out = append(out, fmt.Sprintf("%s: HTTP_FILTER %q: type_urls %v lack %s", d, name, urls, typeURLPrefix+want))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(filters)) {
		if !extensions[name] {
			out = append(out, fmt.Sprintf("%s: HTTP_FILTER %q names no EXTENSION_CONFIG of this EnvoyFilter: the listener would never warm", d, name))
		}
	}
	return out
}

func gatewayWasmProblems(d doc, docs []doc) []string {
	var out []string
	listeners := gatewayListeners(d, docs)
	if len(listeners) == 0 {
		out = append(out, fmt.Sprintf("%s: attaches to no Gateway listener defined in the manifests", d))
	}
	for i, w := range items(get(d.node, "spec", "wasm")) {
		at := fmt.Sprintf("%s spec.wasm[%d]", d, i)
		filter := fmt.Sprintf("%senvoyextensionpolicy/%s/%s/wasm/%d", wasmFilterPrefix, namespaceOf(d), d.name, i)
		if str(w, "failOpen") == "true" {
			out = append(out, at+": failOpen must be false")
		}
		// The filter's PluginConfig as the patches leave it; the vm_id is Envoy Gateway's.
		cfg := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		cfg.Content = append(cfg.Content, scalar("vm_config"), &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map",
			Content: []*yaml.Node{scalar("vm_id"), scalar(strings.TrimPrefix(filter, wasmFilterPrefix))}})
		for _, p := range docs {
			if p.kind != "EnvoyPatchPolicy" {
				continue
			}
			for _, jp := range items(get(p.node, "spec", "jsonPatches")) {
				sel := jsonPathName.FindStringSubmatch(str(jp, "operation", "jsonPath"))
				field, ok := strings.CutPrefix(str(jp, "operation", "path"), "typed_config/config/")
				if str(jp, "type") != typeURLPrefix+"envoy.config.listener.v3.Listener" || !slices.Contains(listeners, str(jp, "name")) ||
					str(jp, "operation", "op") != "add" || sel == nil || sel[1] != filter || !ok {
					continue
				}
				cfg.Content = append(cfg.Content, scalar(field), get(jp, "operation", "value"))
			}
		}
		out = append(out, pluginSettingsProblems(cfg, get(w, "config"), fmt.Sprintf("%s (filter %s on listener %v, as patched)", at, filter, listeners), false)...)
	}
	return out
}

// wasmPluginProblems checks an Istio WasmPlugin: the module pinned by digest (a changed
// tag would be served from the agent's cache, or an unexpected module run), FAIL_CLOSE
// explicitly (FAIL_OPEN sends requests to the cluster_header route unrouted), an HTTP
// plugin selecting a workload (without a selector or targetRefs it runs on every proxy
// of the namespace, or of the mesh in the root namespace), and no route_at "body", which
// needs the flag a WasmPlugin cannot set.
func wasmPluginProblems(d doc) []string {
	var out []string
	if url := str(d.node, "spec", "url"); url == "" {
		out = append(out, fmt.Sprintf("%s: spec.url is empty", d))
	} else if !strings.Contains(url, "@sha256:") && str(d.node, "spec", "sha256") == "" {
		out = append(out, fmt.Sprintf("%s: spec.url %q is not pinned: add spec.sha256 or an @sha256: digest", d, url))
	}
	if fs := str(d.node, "spec", "failStrategy"); fs != "FAIL_CLOSE" {
		out = append(out, fmt.Sprintf("%s: spec.failStrategy %q: set FAIL_CLOSE explicitly", d, fs))
	}
	if t := str(d.node, "spec", "type"); t != "HTTP" {
		out = append(out, fmt.Sprintf("%s: spec.type %q: set HTTP", d, t))
	}
	if get(d.node, "spec", "selector") == nil && get(d.node, "spec", "targetRef") == nil && get(d.node, "spec", "targetRefs") == nil {
		out = append(out, fmt.Sprintf("%s: no selector or targetRefs: it would run on every proxy in scope", d))
	}
	if get(d.node, "spec", "pluginConfig") == nil {
		out = append(out, fmt.Sprintf("%s: spec.pluginConfig is missing", d))
	} else if str(d.node, "spec", "pluginConfig", "route_at") == "body" {
		out = append(out, fmt.Sprintf(`%s: pluginConfig.route_at "body" needs allow_on_headers_stop_iteration, which a WasmPlugin cannot set`, d))
	}
	return out
}

// gatewayListeners lists the Envoy listener names (old xDS naming scheme,
// "<namespace>/<gateway>/<listener>") of the Gateways an EnvoyExtensionPolicy attaches
// to, directly or through an HTTPRoute's parentRefs.
func gatewayListeners(d doc, docs []doc) []string {
	find := func(kind, ns, name string) *doc {
		for i := range docs {
			if docs[i].kind == kind && namespaceOf(docs[i]) == ns && docs[i].name == name {
				return &docs[i]
			}
		}
		return nil
	}
	var gateways []*doc
	for _, ref := range items(get(d.node, "spec", "targetRefs")) {
		switch str(ref, "kind") {
		case "Gateway":
			gateways = append(gateways, find("Gateway", namespaceOf(d), str(ref, "name")))
		case "HTTPRoute":
			if r := find("HTTPRoute", namespaceOf(d), str(ref, "name")); r != nil {
				for _, p := range items(get(r.node, "spec", "parentRefs")) {
					ns := str(p, "namespace")
					if ns == "" {
						ns = namespaceOf(*r)
					}
					gateways = append(gateways, find("Gateway", ns, str(p, "name")))
				}
			}
		}
	}
	var out []string
	for _, g := range gateways {
		if g == nil {
			continue
		}
		for _, l := range items(get(g.node, "spec", "listeners")) {
			out = append(out, namespaceOf(*g)+"/"+g.name+"/"+str(l, "name"))
		}
	}
	return out
}

// TestWasmFilterSettings is the check on the real manifests: every pdroute wasm filter
// they configure, Istio and Envoy Gateway, has the settings pdroute needs.
func TestWasmFilterSettings(t *testing.T) {
	docs := loadDocs(t)
	filters := 0
	for _, d := range docs {
		eachAny(d.node, "", func(a *yaml.Node, _ string) {
			if str(a, "@type") == typeURLPrefix+wasmType {
				filters++
			}
		})
		switch d.kind {
		case "EnvoyExtensionPolicy":
			filters += len(items(get(d.node, "spec", "wasm")))
		case "WasmPlugin":
			filters++
		}
	}
	if filters != 13 {
		t.Errorf("found %d wasm filter configs, want 13 (6 Istio filter-*.yaml, 4 Istio wasmplugin-*.yaml, 3 Envoy Gateway)", filters)
	}
	for _, p := range wasmFilterProblems(docs) {
		t.Error(p)
	}
}

// TestWasmFilterSettingsCatch feeds wasmFilterProblems manifests with each mistake.
func TestWasmFilterSettingsCatch(t *testing.T) {
	const istio = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: pdroute, namespace: pdroute}
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
            {{settings}}
  - applyTo: HTTP_FILTER
    match:
      listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}
    patch:
      operation: {{operation}}
      value:
        name: {{filter}}
        config_discovery:
          config_source: {ads: {}}
          type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm, {{rbac}}]
`
	istioDoc := func(settings, operation, filter, rbac string) string {
		return strings.NewReplacer("{{settings}}", settings, "{{operation}}", operation, "{{filter}}", filter, "{{rbac}}", rbac).Replace(istio)
	}
	const good = "{allow_on_headers_stop_iteration: true, failure_policy: FAIL_RELOAD, vm_config: {vm_id: pdroute}}"
	const rbac = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	const eg = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns}
spec: {listeners: [{name: http}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm, namespace: ns}
spec: {parentRefs: [{name: gw}]}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyExtensionPolicy
metadata: {name: pd, namespace: ns}
spec:
  targetRefs: [{kind: HTTPRoute, name: llm}]
  wasm: [{name: pd, failOpen: {{failOpen}}}]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyPatchPolicy
metadata: {name: p, namespace: ns}
spec:
  jsonPatches:
  - type: type.googleapis.com/envoy.config.listener.v3.Listener
    name: {{listener}}
    operation: {op: add, path: typed_config/config/allow_on_headers_stop_iteration, value: true,
      jsonPath: "..http_filters[?(@.name=='envoy.filters.http.wasm/envoyextensionpolicy/ns/pd/wasm/{{index}}')]"}
  - type: type.googleapis.com/envoy.config.listener.v3.Listener
    name: {{listener}}
    operation: {op: add, path: typed_config/config/failure_policy, value: FAIL_CLOSED,
      jsonPath: "..http_filters[?(@.name=='envoy.filters.http.wasm/envoyextensionpolicy/ns/pd/wasm/{{index}}')]"}
`
	wasmPlugin := func(url, failStrategy, plugin string) string {
		return "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: w}\nspec:\n  " +
			strings.Trim(url, "{}") + "\n  failStrategy: " + failStrategy + "\n  type: HTTP\n  selector: {matchLabels: {istio: gw}}\n  pluginConfig: " + plugin + "\n"
	}
	egDoc := func(failOpen, listener, index string) string {
		return strings.NewReplacer("{{failOpen}}", failOpen, "{{listener}}", listener, "{{index}}", index).Replace(eg)
	}
	tests := []struct {
		name, text string
		want       []string // substrings, one per problem, in order
	}{
		{"istio valid", istioDoc(good, "INSERT_BEFORE", "pdroute", rbac), nil},
		{"istio flag left out", istioDoc("{failure_policy: FAIL_RELOAD, vm_config: {vm_id: pdroute}}", "INSERT_BEFORE", "pdroute", rbac), nil},
		{"istio route_at body without the flag", istioDoc("{failure_policy: FAIL_RELOAD, vm_config: {vm_id: pdroute}, configuration: {value: {route_at: body}}}", "INSERT_BEFORE", "pdroute", rbac),
			[]string{`typed_config.config: route_at "body" needs allow_on_headers_stop_iteration: true`}},
		{"istio flag false", istioDoc(strings.Replace(good, "iteration: true", "iteration: false", 1), "INSERT_BEFORE", "pdroute", rbac),
			[]string{"allow_on_headers_stop_iteration: set it true, or leave it out"}},
		{"istio failure_policy implicit", istioDoc("{allow_on_headers_stop_iteration: true, vm_config: {vm_id: pdroute}}", "INSERT_BEFORE", "pdroute", rbac),
			[]string{`failure_policy "": set FAIL_RELOAD or FAIL_CLOSED explicitly`}},
		{"istio fail open", istioDoc(strings.Replace(good, "FAIL_RELOAD", "FAIL_OPEN", 1), "INSERT_BEFORE", "pdroute", rbac),
			[]string{`failure_policy "FAIL_OPEN"`}},
		{"istio legacy fail_open", istioDoc(strings.Replace(good, "}}", "}, fail_open: true}", 1), "INSERT_BEFORE", "pdroute", rbac),
			[]string{"fail_open must not be set"}},
		{"istio no vm_id", istioDoc("{allow_on_headers_stop_iteration: true, failure_policy: FAIL_CLOSED}", "INSERT_BEFORE", "pdroute", rbac),
			[]string{"vm_config.vm_id is empty"}},
		{"istio filter after the router", istioDoc(good, "INSERT_AFTER", "pdroute", rbac),
			[]string{`HTTP_FILTER "pdroute" is INSERT_AFTER "envoy.filters.http.router"`}},
		{"istio no RBAC type", istioDoc(good, "INSERT_BEFORE", "pdroute", "x"),
			[]string{"lack type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"}},
		{"istio filter names another extension", istioDoc(good, "INSERT_BEFORE", "other", rbac),
			[]string{`no HTTP_FILTER patch inserts EXTENSION_CONFIG "pdroute"`, `HTTP_FILTER "other" names no EXTENSION_CONFIG`}},
		{"istio WasmPlugin", wasmPlugin("url: oci://x@sha256:ab", "FAIL_CLOSE", "{mode: nixl}"), nil},
		{"istio WasmPlugin sha256 field", wasmPlugin("url: oci://x\n  sha256: ab", "FAIL_CLOSE", "{mode: nixl}"), nil},
		{"istio WasmPlugin unpinned", wasmPlugin("url: oci://x:v1", "FAIL_CLOSE", "{mode: nixl}"),
			[]string{`spec.url "oci://x:v1" is not pinned`}},
		{"istio WasmPlugin fail open", wasmPlugin("url: oci://x@sha256:ab", "FAIL_OPEN", "{mode: nixl}"),
			[]string{`spec.failStrategy "FAIL_OPEN"`}},
		{"istio WasmPlugin route_at body", wasmPlugin("url: oci://x@sha256:ab", "FAIL_CLOSE", "{mode: nixl, route_at: body}"),
			[]string{`route_at "body" needs allow_on_headers_stop_iteration, which a WasmPlugin cannot set`}},
		{"istio WasmPlugin everywhere", "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: w}\nspec: {url: oci://x@sha256:ab, failStrategy: FAIL_CLOSE, type: HTTP, pluginConfig: {}}\n",
			[]string{"no selector or targetRefs"}},
		{"gateway valid", egDoc("false", "ns/gw/http", "0"), nil},
		{"gateway failOpen", egDoc("true", "ns/gw/http", "0"), []string{"failOpen must be false"}},
		{"gateway with no patch", egDoc("false", "ns/gw/http", "1"), nil},
		{"gateway patches fail open", strings.Replace(egDoc("false", "ns/gw/http", "0"), "value: FAIL_CLOSED", "value: FAIL_OPEN", 1),
			[]string{`failure_policy "FAIL_OPEN"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := wasmFilterProblems(parseDocs(t, "test.yaml", tc.text))
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
