package manifests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// The Envoy API check: every Envoy config pdroute ships or generates is decoded with Envoy's
// own Go types (go-control-plane) with strict protojson and checked with ValidateAll, on the
// message and every Any inside it, at the oldest Envoy API we document and the newest the
// module proxy serves. The checker is e2e/envoy/apicheck, a module of its own (one build
// cannot hold two versions of go-control-plane); this test hands it the documents.

// apiDoc is one document for apicheck (its input format).
type apiDoc struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value any    `json:"value"`
	Base  any    `json:"base,omitempty"`
}

// apiResult is apicheck's output.
type apiResult struct {
	Version string `json:"version"`
	Checked []struct {
		Name string   `json:"name"`
		Anys []string `json:"anys"`
	} `json:"checked"`
	Problems []string `json:"problems"`
}

// apiVersions are the go-control-plane/envoy versions checked, by the go.mod file of
// e2e/envoy/apicheck that pins each: the oldest Envoy pdroute documents (docs/OPERATIONS.md
// "Which Envoy") and the newest the module proxy serves.
var apiVersions = []struct{ modfile, version string }{
	{"envoy-1.35.mod", "v1.35.0"},
	{"go.mod", "v1.40.0"},
}

const apicheckDir = "../apicheck"

// runAPICheck runs apicheck built against modfile on docs. The toolchain is the one the
// modfile names (go-control-plane v1.40 needs Go 1.26; the go command fetches it).
func runAPICheck(t *testing.T, modfile string, docs []apiDoc) apiResult {
	t.Helper()
	in, err := json.Marshal(docs)
	if err != nil {
		t.Fatal(err)
	}
	toolchain, err := modToolchain(filepath.Join(apicheckDir, modfile))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run"}
	if modfile != "go.mod" {
		args = append(args, "-modfile="+modfile)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = apicheckDir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain, "GOWORK=off", "GOFLAGS=-mod=readonly")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("apicheck (%s, %s): %v\n%s", modfile, toolchain, err, stderr.String())
	}
	var res apiResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("apicheck (%s): output: %v\n%s", modfile, err, stdout.String())
	}
	return res
}

// modToolchain is the toolchain a go.mod file asks for: its toolchain line, else its go line.
func modToolchain(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var goLine string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "toolchain" {
			return f[1], nil
		}
		if len(f) == 2 && f[0] == "go" {
			goLine = "go" + f[1]
		}
	}
	if goLine == "" {
		return "", fmt.Errorf("%s: no go line", path)
	}
	return goLine, nil
}

// envoyAPIDocs collects every Envoy config pdroute ships or generates:
//   - every bootstrap in e2e/envoy (envoy.yaml, ...) and the one e2e/stack renders for
//     every mode;
//   - every Istio EnvoyFilter patch value, as the type its applyTo names; a MERGE patch is
//     merged into a representative resource of what istiod generates;
//   - every Envoy Gateway EnvoyPatchPolicy JSON patch: a whole resource as its type, a
//     jsonPath patch applied to a representative element of what Envoy Gateway generates
//     (all patches on one element applied in order, then the element checked whole);
//   - the Wasm filter config istiod generates from each Istio WasmPlugin.
func envoyAPIDocs(t *testing.T, docs []doc) []apiDoc {
	t.Helper()
	var out []apiDoc
	// Every static bootstrap in e2e/envoy (envoy.yaml and any per-version variant).
	files, err := filepath.Glob("../*.yaml")
	if err != nil || !slices.Contains(files, "../envoy.yaml") {
		t.Fatalf("e2e/envoy/*.yaml: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, apiDoc{Name: "envoy/" + filepath.Base(f), Type: "envoy.config.bootstrap.v3.Bootstrap", Value: yamlValue(t, b)})
	}
	for _, mode := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
		b, err := stack.ModeBootstrap(mode)
		if err != nil {
			t.Fatalf("stack bootstrap %s: %v", mode, err)
		}
		out = append(out, apiDoc{Name: "e2e/stack bootstrap (" + string(mode) + ")", Type: "envoy.config.bootstrap.v3.Bootstrap", Value: yamlValue(t, b)})
	}
	out = append(out, patchDocs(t, docs)...)
	return out
}

func patchDocs(t *testing.T, docs []doc) []apiDoc {
	t.Helper()
	var out []apiDoc
	for _, d := range docs {
		for i, cp := range items(get(d.node, "spec", "configPatches")) {
			v := get(cp, "patch", "value")
			if v == nil {
				continue // REMOVE
			}
			at := fmt.Sprintf("%s spec.configPatches[%d].patch.value", d, i)
			typeName, ok := envoyFilterTypes[str(cp, "applyTo")]
			if !ok {
				t.Errorf("%s: applyTo %q unknown to this test (add it to envoyFilterTypes)", at, str(cp, "applyTo"))
				continue
			}
			ad := apiDoc{Name: at, Type: typeName, Value: nodeValue(t, v)}
			if str(cp, "patch", "operation") == "MERGE" {
				base, ok := istioMergeBases[typeName]
				if !ok {
					t.Errorf("%s: MERGE into %s unknown to this test (add a base to istioMergeBases)", at, typeName)
					continue
				}
				ad.Base = jsonValue(t, base)
			}
			out = append(out, ad)
		}
		if d.kind == "WasmPlugin" {
			out = append(out, apiDoc{Name: d.String() + " (as istiod generates it)", Type: wasmType, Value: wasmPluginFilter(d)})
		}
		out = append(out, gatewayPatchDocs(t, d, docs)...)
	}
	return out
}

// istioMergeBases are representative resources istiod generates for a gateway, which
// route-patch.yaml's MERGE patches land in (protojson).
var istioMergeBases = map[string]string{
	routeType: `{"name": "pdroute", "match": {"prefix": "/v1/"},
	  "route": {"cluster": "outbound|8000||llm-decode.pdroute.svc.cluster.local", "timeout": "0s"}}`,
	"envoy.config.listener.v3.Listener": `{"name": "0.0.0.0_8080",
	  "address": {"socket_address": {"address": "0.0.0.0", "port_value": 8080}}}`,
	"envoy.config.listener.v3.Filter": `{"name": "envoy.filters.network.http_connection_manager",
	  "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
	    "stat_prefix": "outbound_0.0.0.0_8080",
	    "rds": {"route_config_name": "http.8080", "config_source": {"ads": {}, "resource_api_version": "V3"}},
	    "http_filters": [{"name": "envoy.filters.http.router",
	      "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}`,
}

// gatewayPatchDocs turns one EnvoyPatchPolicy's JSON patches into documents.
func gatewayPatchDocs(t *testing.T, d doc, docs []doc) []apiDoc {
	t.Helper()
	var out []apiDoc
	type element struct {
		at, typeName string
		value        map[string]any
	}
	var elems []*element
	bySel := map[string]*element{}
	for i, jp := range items(get(d.node, "spec", "jsonPatches")) {
		at := fmt.Sprintf("%s spec.jsonPatches[%d]", d, i)
		op, jsonPath, path := str(jp, "operation", "op"), str(jp, "operation", "jsonPath"), str(jp, "operation", "path")
		value := get(jp, "operation", "value")
		if jsonPath == "" && path == "" {
			if op != "add" || value == nil {
				t.Errorf("%s: op %q without jsonPath or path", at, op)
				continue
			}
			out = append(out, apiDoc{Name: at + ".operation.value", Type: strings.TrimPrefix(str(jp, "type"), typeURLPrefix), Value: nodeValue(t, value)})
			continue
		}
		e := bySel[jsonPath]
		if e == nil {
			m := jsonPathField.FindStringSubmatch(jsonPath)
			if m == nil || jsonPathElemTypes[m[1]] == "" {
				t.Errorf("%s: jsonPath %q: this test only knows \"..routes[?...]\" and \"..http_filters[?...]\" selectors", at, jsonPath)
				continue
			}
			base, err := gatewayElement(m[1], jsonPath, docs)
			if err != nil {
				t.Errorf("%s: %v", at, err)
				continue
			}
			e = &element{at: fmt.Sprintf("%s jsonPath %s (patched into what Envoy Gateway generates)", d, jsonPath), typeName: jsonPathElemTypes[m[1]], value: base}
			bySel[jsonPath] = e
			elems = append(elems, e)
		}
		var v any
		if value != nil {
			v = nodeValue(t, value)
		}
		if err := jsonPatch(e.value, op, strings.Split(path, "/"), v); err != nil {
			t.Errorf("%s: %v", at, err)
		}
	}
	for _, e := range elems {
		out = append(out, apiDoc{Name: e.at, Type: e.typeName, Value: e.value})
	}
	return out
}

var wasmSelName = regexp.MustCompile(`envoyextensionpolicy/([^/]+)/([^/]+)/wasm/(\d+)`)

// gatewayElement is a representative element of the repeated field a jsonPath selects, as
// Envoy Gateway generates it (protojson): an HTTPRoute rule's route, or the Wasm HTTP filter
// of an EnvoyExtensionPolicy (internal/xds/translator/wasm.go: the module served by Envoy
// Gateway's own HTTP cache with its sha256, the policy's config as a StringValue).
func gatewayElement(field, jsonPath string, docs []doc) (map[string]any, error) {
	switch field {
	case "routes":
		return map[string]any{
			"name":  "httproute/pdroute/llm/rule/0/match/0/*",
			"match": map[string]any{"prefix": "/v1/"},
			"route": map[string]any{"cluster": "httproute/pdroute/llm/rule/0", "timeout": "0s"},
		}, nil
	case "http_filters":
		m := wasmSelName.FindStringSubmatch(jsonPath)
		if m == nil {
			return nil, fmt.Errorf("jsonPath %q names no EnvoyExtensionPolicy wasm filter", jsonPath)
		}
		var policy *yaml.Node
		for _, d := range docs {
			if d.kind == "EnvoyExtensionPolicy" && namespaceOf(d) == m[1] && d.name == m[2] {
				policy = d.node
			}
		}
		var w *yaml.Node
		if ws, i := items(get(policy, "spec", "wasm")), atoi(m[3]); i < len(ws) {
			w = ws[i]
		}
		if w == nil {
			return nil, fmt.Errorf("no EnvoyExtensionPolicy %s/%s wasm[%s] in the manifests", m[1], m[2], m[3])
		}
		name := wasmFilterPrefix + m[0] // the filter Envoy Gateway names after the policy entry
		cfgJSON, _ := json.Marshal(yamlNodeAny(get(w, "config")))
		plugin := map[string]any{
			"name":    name,
			"root_id": str(w, "rootID"),
			"vm_config": map[string]any{
				"vm_id":   strings.TrimPrefix(name, wasmFilterPrefix),
				"runtime": "envoy.wasm.runtime.v8",
				"code": map[string]any{"remote": map[string]any{
					"http_uri": map[string]any{"uri": "https://envoy-gateway.envoy-gateway-system.svc.cluster.local:18002/0123abcd.wasm",
						"cluster": "wasm_cluster", "timeout": "10s"},
					"sha256": strings.Repeat("ab", 32),
				}},
			},
			"configuration": map[string]any{"@type": typeURLPrefix + "google.protobuf.StringValue", "value": string(cfgJSON)},
		}
		if str(w, "failOpen") == "true" {
			plugin["fail_open"] = true
		}
		return map[string]any{"name": name, "typed_config": map[string]any{"@type": typeURLPrefix + wasmType, "config": plugin}}, nil
	}
	return nil, fmt.Errorf("no representative %s element", field)
}

// jsonPatch applies one RFC 6902 add or remove at path (split at "/") to v.
func jsonPatch(v map[string]any, op string, path []string, value any) error {
	for i, seg := range path[:len(path)-1] {
		next, ok := v[seg].(map[string]any)
		if !ok {
			if op != "add" || v[seg] != nil {
				return fmt.Errorf("%s: path %s: no object at %s", op, strings.Join(path, "/"), strings.Join(path[:i+1], "/"))
			}
			return fmt.Errorf("add: path %s: parent %s missing (JSON patch add does not create parents)", strings.Join(path, "/"), strings.Join(path[:i+1], "/"))
		}
		v = next
	}
	last := path[len(path)-1]
	switch op {
	case "add":
		v[last] = value
	case "remove":
		if _, ok := v[last]; !ok {
			return fmt.Errorf("remove: path %s does not exist", strings.Join(path, "/"))
		}
		delete(v, last)
	default:
		return fmt.Errorf("op %q unknown to this test", op)
	}
	return nil
}

// wasmPluginFilter is the Wasm HTTP filter config istiod generates for a WasmPlugin
// (pilot/pkg/model/extensions.go: name "<namespace>.<name>", root_id the pluginName, the
// pluginConfig as a StringValue of JSON, remote code with timeout 30s, cluster "_" and the
// plugin's sha256, the failStrategy as failure_policy), before the Istio agent swaps the
// remote code for a local file.
func wasmPluginFilter(d doc) map[string]any {
	spec := get(d.node, "spec")
	env := map[string]any{"ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION": "1"}
	for _, e := range items(get(spec, "vmConfig", "env")) {
		if str(e, "valueFrom") == "" || str(e, "valueFrom") == "INLINE" {
			env[str(e, "name")] = str(e, "value")
		}
	}
	url := str(spec, "url")
	var code map[string]any
	if f, ok := strings.CutPrefix(url, "file://"); ok {
		code = map[string]any{"local": map[string]any{"filename": f}}
	} else {
		if !strings.Contains(url, "://") {
			url = "oci://" + url
		}
		remote := map[string]any{"http_uri": map[string]any{"uri": url, "cluster": "_", "timeout": "30s"}}
		if s := str(spec, "sha256"); s != "" {
			remote["sha256"] = s
		}
		code = map[string]any{"remote": remote}
	}
	plugin := map[string]any{
		"name":      namespaceOf(d) + "." + d.name,
		"root_id":   str(spec, "pluginName"),
		"vm_config": map[string]any{"runtime": "envoy.wasm.runtime.v8", "code": code, "environment_variables": map[string]any{"key_values": env}},
	}
	if pc := get(spec, "pluginConfig"); pc != nil {
		b, _ := json.Marshal(yamlNodeAny(pc))
		plugin["configuration"] = map[string]any{"@type": typeURLPrefix + "google.protobuf.StringValue", "value": string(b)}
	}
	switch str(spec, "failStrategy") {
	case "FAIL_OPEN":
		plugin["failure_policy"] = "FAIL_OPEN"
	case "FAIL_CLOSE":
		plugin["failure_policy"] = "FAIL_CLOSED"
	case "FAIL_RELOAD":
		plugin["failure_policy"] = "FAIL_RELOAD"
	}
	return map[string]any{"config": plugin}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func yamlNodeAny(n *yaml.Node) any {
	if n == nil {
		return nil
	}
	var v any
	_ = n.Decode(&v)
	return v
}

func nodeValue(t *testing.T, n *yaml.Node) any {
	t.Helper()
	var v any
	if err := n.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func yamlValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// apiCatchDocs are broken configs apicheck must reject, by the substring its problem
// contains: the mistakes a hand-kept field list could not see, and those it could.
var apiCatchDocs = []struct {
	doc  apiDoc
	want string
}{
	{apiDoc{Name: "catch/remote code without sha256", Type: wasmType, Value: map[string]any{"config": map[string]any{
		"vm_config": map[string]any{"runtime": "envoy.wasm.runtime.v8", "code": map[string]any{"remote": map[string]any{
			"http_uri": map[string]any{"uri": "oci://r/p:v1", "cluster": "_", "timeout": "30s"}}}}}}},
		"Sha256: value length must be at least 1"},
	{apiDoc{Name: "catch/misspelt field", Type: wasmType, Value: map[string]any{"config": map[string]any{"allow_on_header_stop_iteration": true}}},
		"unknown field"},
	{apiDoc{Name: "catch/bad enum", Type: wasmType, Value: map[string]any{"config": map[string]any{"failure_policy": "FAIL_CLOSE"}}},
		"invalid value for enum"},
	{apiDoc{Name: "catch/flag as a string", Type: wasmType, Value: map[string]any{"config": map[string]any{"allow_on_headers_stop_iteration": "true"}}},
		"invalid value for bool"},
	{apiDoc{Name: "catch/cluster without name, inside an Any", Type: "envoy.config.listener.v3.Listener", Value: map[string]any{
		"name": "l", "filter_chains": []any{map[string]any{"filters": []any{map[string]any{"name": "hcm", "typed_config": map[string]any{
			"@type":       typeURLPrefix + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix": "", "route_config": map[string]any{"name": "r"}}}}}}}},
		"StatPrefix: value length must be at least 1"},
}

// TestEnvoyAPI: every shipped Envoy config passes Envoy's own API validation at Envoy 1.35
// and at the newest go-control-plane, and the check rejects each broken sample.
func TestEnvoyAPI(t *testing.T) {
	docs := envoyAPIDocs(t, loadDocs(t))
	if len(docs) < 25 {
		t.Fatalf("only %d Envoy configs collected, want at least 25 (5 bootstraps, 13 Istio patches, 7 Envoy Gateway patches and elements)", len(docs))
	}
	catches := slices.Clone(apiCatchDocs)
	// istiod's filter config for a WasmPlugin pulled by tag with no sha256: what
	// filter-*.yaml had before they set remote.sha256.
	wp := parseDocs(t, "catch.yaml", "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\n"+
		"metadata: {name: pdroute, namespace: pdroute}\nspec: {url: oci://r/pdroute:v1, pluginName: pdroute, failStrategy: FAIL_RELOAD, pluginConfig: {mode: nixl}}\n")
	catches = append(catches, struct {
		doc  apiDoc
		want string
	}{apiDoc{Name: "catch/WasmPlugin without sha256", Type: wasmType, Value: wasmPluginFilter(wp[0])}, "Sha256: value length must be at least 1"})
	all := slices.Clone(docs)
	for _, c := range catches {
		all = append(all, c.doc)
	}
	var mu sync.Mutex
	for _, v := range apiVersions {
		t.Run(v.version, func(t *testing.T) {
			t.Parallel()
			res := runAPICheck(t, v.modfile, all)
			mu.Lock()
			defer mu.Unlock()
			if res.Version != v.version {
				t.Errorf("apicheck built with go-control-plane/envoy %s, want %s", res.Version, v.version)
			}
			if len(res.Checked) != len(all) {
				t.Errorf("apicheck checked %d documents, want %d", len(res.Checked), len(all))
			}
			anys := 0
			for _, c := range res.Checked {
				anys += len(c.Anys)
			}
			if anys < 20 {
				t.Errorf("only %d Any messages validated inside the configs, want at least 20", anys)
			}
			caught := map[string][]string{}
			for _, p := range res.Problems {
				if strings.HasPrefix(p, "catch/") {
					name, _, _ := strings.Cut(p, ": ")
					caught[name] = append(caught[name], p)
					continue
				}
				t.Errorf("Envoy %s: %s", v.version, p)
			}
			for _, c := range catches {
				got := caught[c.doc.Name]
				if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, c.want) }) {
					t.Errorf("%s: want a problem containing %q, got %q", c.doc.Name, c.want, got)
				}
			}
		})
	}
}

// TestGatewayPatchCatch: a JSON patch that could not apply to what Envoy Gateway generates
// fails before apicheck sees it.
func TestGatewayPatchCatch(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"name": "r", "route": map[string]any{"cluster": "c"}}
	}
	tests := []struct {
		name, op, path string
		want           string
	}{
		{"remove a missing field", "remove", "route/clusters", "remove: path route/clusters does not exist"},
		{"add under a missing parent", "add", "typed_config/config/x", "parent typed_config missing"},
		{"unknown op", "replace", "route/cluster", `op "replace" unknown`},
		{"add", "add", "route/cluster_header", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := jsonPatch(base(), tc.op, strings.Split(tc.path, "/"), "v")
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
