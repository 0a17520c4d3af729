package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pdroute/pdroute/filter/config"
)

// manifestDirs are the folders whose every YAML document is checked.
var manifestDirs = []string{"../istio", "../gateway", "../kube"}

// wantVersions are the product versions the docs promise; a CRD file missing or extra
// fails TestCRDsCoverDocumentedVersions. Istio starts at 1.28 and Envoy Gateway at v1.5
// (whose newest patch release, the one checked, is past the minimum v1.5.5): older
// releases cannot set allow_on_headers_stop_iteration (docs/OPERATIONS.md "Which Envoy").
// Istio 1.26 is checked for the WasmPlugin way only.
var wantVersions = map[string][]string{
	"istio":         {"1.26", "1.28", "1.29", "1.30"},
	"envoy-gateway": {"v1.5", "v1.6", "v1.7", "v1.8", "v1.9"},
}

// crdSet is the CRDs of one product version, e.g. Istio 1.28 or Envoy Gateway v1.6.
type crdSet struct {
	name  string              // "istio-1.28", from the file name
	kinds map[string]*CRDKind // key: KindKey
}

var (
	crdOnce sync.Once
	crdSets []crdSet
	crdErr  error
)

// loadCRDs reads testdata/crds once per test binary: building the validators of ~50 CRDs
// takes about a second.
func loadCRDs(t *testing.T) []crdSet {
	t.Helper()
	crdOnce.Do(func() {
		files, err := filepath.Glob("testdata/crds/*.yaml")
		if err != nil {
			crdErr = err
			return
		}
		for _, f := range files {
			if filepath.Base(f) == "sources.yaml" {
				continue
			}
			fh, err := os.Open(f)
			if err != nil {
				crdErr = err
				return
			}
			kinds, err := LoadCRDs(fh)
			fh.Close()
			if err != nil {
				crdErr = fmt.Errorf("%s: %w", f, err)
				return
			}
			crdSets = append(crdSets, crdSet{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), kinds: kinds})
		}
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
	if len(crdSets) == 0 {
		t.Fatal("no CRD files in testdata/crds")
	}
	return crdSets
}

// doc is one YAML document of a manifest file.
type doc struct {
	file                              string // e.g. "istio/gateway.yaml"
	index                             int    // 1-based position in the file
	node                              *yaml.Node
	raw                               []byte // the document re-encoded, for the validators
	apiVersion, kind, name, namespace string
}

func (d doc) String() string {
	return fmt.Sprintf("%s doc %d (%s %s)", d.file, d.index, d.kind, d.name)
}

func loadDocs(t *testing.T) []doc {
	t.Helper()
	var docs []doc
	for _, dir := range manifestDirs {
		err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				return err
			}
			fh, err := os.Open(p)
			if err != nil {
				return err
			}
			defer fh.Close()
			rel, _ := filepath.Rel("..", p)
			d, err := decodeDocs(rel, fh)
			docs = append(docs, d...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(docs) == 0 {
		t.Fatal("no manifests found")
	}
	return docs
}

// decodeDocs reads every YAML document of one manifest file; rel names the file in
// messages ("istio/gateway.yaml").
func decodeDocs(rel string, r io.Reader) ([]doc, error) {
	var docs []doc
	dec := yaml.NewDecoder(r)
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, fmt.Errorf("%s doc %d: %w", rel, i, err)
		}
		if len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
			return docs, fmt.Errorf("%s doc %d: not a mapping", rel, i)
		}
		root := n.Content[0]
		raw, err := yaml.Marshal(&n)
		if err != nil {
			return docs, fmt.Errorf("%s doc %d: %w", rel, i, err)
		}
		docs = append(docs, doc{file: rel, index: i, node: root, raw: raw,
			apiVersion: str(root, "apiVersion"), kind: str(root, "kind"),
			name: str(root, "metadata", "name"), namespace: str(root, "metadata", "namespace")})
	}
}

// parseDocs is decodeDocs for YAML written inside a test.
func parseDocs(t *testing.T, rel, text string) []doc {
	t.Helper()
	docs, err := decodeDocs(rel, strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// get follows mapping keys from n; nil when a key is missing.
func get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func str(n *yaml.Node, keys ...string) string {
	if v := get(n, keys...); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func items(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func TestCRDsCoverDocumentedVersions(t *testing.T) {
	got := map[string][]string{}
	source := regexp.MustCompile(`^[a-z0-9-]+/[a-z0-9-]+ [0-9a-f]{40} \S+ \S+\.yaml$`)
	for _, s := range loadCRDs(t) {
		i := strings.LastIndexByte(s.name, '-')
		got[s.name[:i]] = append(got[s.name[:i]], s.name[i+1:])
		for key, k := range s.kinds {
			if !source.MatchString(k.Source) {
				t.Errorf("%s %s: source annotation %q is not \"<repo> <commit> <tag> <path>\"", s.name, key, k.Source)
			}
		}
	}
	for fam, want := range wantVersions {
		sort.Strings(got[fam])
		if !slices.Equal(got[fam], want) {
			t.Errorf("%s versions = %v, want %v", fam, got[fam], want)
		}
	}
}

// problems validates one document as the API server of every product version that
// defines its kind would: the problems in order, and for each the versions that report
// it. A Kubernetes built-in kind is checked once, by strict decoding into k8s.io/api.
func problems(t *testing.T, d doc) (order []string, by map[string][]string) {
	t.Helper()
	by = map[string][]string{}
	add := func(p, version string) {
		if by[p] == nil {
			order = append(order, p)
		}
		by[p] = append(by[p], version)
	}
	if IsBuiltin(d.apiVersion, d.kind) {
		for _, p := range ValidateBuiltin(d.raw) {
			add(p, "k8s.io/api")
		}
		return order, by
	}
	obj, err := DecodeObject(d.raw)
	if err != nil {
		add(err.Error(), "YAML")
		return order, by
	}
	checked := 0
	for _, s := range loadCRDs(t) {
		k := s.kinds[KindKey(d.apiVersion, d.kind)]
		if k == nil {
			continue
		}
		checked++
		for _, p := range k.Validate(obj) {
			add(p, s.name)
		}
	}
	if checked == 0 {
		add("no CRD and no built-in type defines "+KindKey(d.apiVersion, d.kind), "all")
	}
	return order, by
}

// TestManifestsValidate is the check the docs promise: every document under istio/,
// gateway/ and kube/ is accepted by the API server of every product version that defines
// its kind (published CRD schemas, CEL rules included) or, for built-in kinds, decodes
// strictly into its k8s.io/api type.
func TestManifestsValidate(t *testing.T) {
	for _, d := range loadDocs(t) {
		t.Run(fmt.Sprintf("%s#%d", d.file, d.index), func(t *testing.T) {
			order, by := problems(t, d)
			for _, p := range order {
				t.Errorf("%s: %s [%s]", d, p, strings.Join(by[p], ", "))
			}
		})
	}
}

// pluginConfig is one pdroute configuration embedded in a manifest.
type pluginConfig struct {
	d    doc
	path string // where in the document
	json []byte // as the filter receives it
	cfg  *config.Config
}

// toJSON converts a YAML value to the JSON the proxy hands the filter (Istio EnvoyFilter:
// a google.protobuf.Struct, which Envoy serializes to JSON; Envoy Gateway: apiextensions
// JSON → string).
func toJSON(t *testing.T, n *yaml.Node) []byte {
	t.Helper()
	var v any
	if err := n.Decode(&v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pluginConfigs(t *testing.T, docs []doc) []pluginConfig {
	t.Helper()
	var out []pluginConfig
	for _, d := range docs {
		switch d.kind {
		case "EnvoyFilter":
			for i, cp := range items(get(d.node, "spec", "configPatches")) {
				tc := get(cp, "patch", "value", "typed_config")
				if str(cp, "applyTo") != "EXTENSION_CONFIG" || str(tc, "@type") != typeURLPrefix+wasmType {
					continue
				}
				at := fmt.Sprintf("spec.configPatches[%d].patch.value.typed_config.config.configuration", i)
				conf := get(tc, "config", "configuration")
				if str(conf, "@type") != typeURLPrefix+structType || get(conf, "value") == nil {
					t.Errorf("%s %s: want a google.protobuf.Struct with a value (the plugin configuration as YAML)", d, at)
					continue
				}
				out = append(out, pluginConfig{d: d, path: at + ".value", json: toJSON(t, get(conf, "value"))})
			}
		case "WasmPlugin":
			if n := get(d.node, "spec", "pluginConfig"); n != nil {
				out = append(out, pluginConfig{d: d, path: "spec.pluginConfig", json: toJSON(t, n)})
			}
		case "EnvoyExtensionPolicy":
			for i, w := range items(get(d.node, "spec", "wasm")) {
				if n := get(w, "config"); n != nil {
					out = append(out, pluginConfig{d: d, path: fmt.Sprintf("spec.wasm[%d].config", i), json: toJSON(t, n)})
				}
			}
		}
	}
	for i := range out {
		cfg, err := config.Parse(out[i].json)
		if err != nil {
			t.Errorf("%s %s: not a valid pdroute config: %v", out[i].d, out[i].path, err)
			continue
		}
		out[i].cfg = cfg
	}
	return out
}

// TestPluginConfigsParse checks every embedded configuration with the filter's own parser
// and that the Istio examples cover every mode.
func TestPluginConfigsParse(t *testing.T) {
	pcs := pluginConfigs(t, loadDocs(t))
	if len(pcs) != 13 {
		t.Fatalf("found %d plugin configs, want 13 (4 Istio modes as EnvoyFilter and as WasmPlugin, Istio file and discovery variants, 3 Envoy Gateway)", len(pcs))
	}
	modes := map[string]bool{}
	for _, pc := range pcs {
		if pc.cfg != nil {
			modes[pc.d.kind+" "+string(pc.cfg.Mode)] = true
		}
	}
	for _, kind := range []string{"EnvoyFilter", "WasmPlugin"} {
		for _, m := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
			if !modes[kind+" "+string(m)] {
				t.Errorf("no Istio %s example for mode %s", kind, m)
			}
		}
	}
}

// clustersNamed returns every cluster a config makes the filter use: endpoint and metrics
// clusters, the ORIGINAL_DST cluster when an endpoint has an address, and kvbridge's.
func clustersNamed(c *config.Config) []string {
	var out []string
	for _, pool := range []config.Pool{c.Prefill, c.Decode} {
		for i := range pool.Endpoints {
			e := &pool.Endpoints[i]
			cluster, _ := c.Upstream(e)
			out = append(out, cluster)
			if e.MetricsCluster != "" {
				out = append(out, e.MetricsCluster)
			}
		}
	}
	if c.Mode == config.ModeLMCache {
		out = append(out, c.LMCache.KVBridgeCluster)
	}
	if c.Discovery != nil {
		// Discovered endpoints are reached by address.
		out = append(out, c.Discovery.Cluster, c.OriginalDstCluster)
	}
	return out
}

// istioClusterName is the name Istio gives the outbound cluster of a service port, or of
// one of its DestinationRule subsets (pilot/pkg/model/service.go BuildSubsetKey).
func istioClusterName(port int, subset, host string) string {
	return "outbound|" + strconv.Itoa(port) + "|" + subset + "|" + host
}

func namespaceOf(d doc) string {
	if d.namespace == "" {
		return "default"
	}
	return d.namespace
}

// istioClusters lists the clusters an Istio gateway gets from the documents: one per
// Service and ServiceEntry port, one per DestinationRule subset and port, and those
// EnvoyFilters add.
func istioClusters(docs []doc) map[string]bool {
	ports := map[string][]int{} // host FQDN → ports
	out := map[string]bool{}
	for _, d := range docs {
		switch {
		case d.kind == "Service" && d.apiVersion == "v1":
			host := d.name + "." + namespaceOf(d) + ".svc.cluster.local"
			for _, p := range items(get(d.node, "spec", "ports")) {
				n, _ := strconv.Atoi(str(p, "port"))
				ports[host] = append(ports[host], n)
			}
		case d.kind == "ServiceEntry":
			for _, h := range items(get(d.node, "spec", "hosts")) {
				for _, p := range items(get(d.node, "spec", "ports")) {
					n, _ := strconv.Atoi(str(p, "number"))
					ports[h.Value] = append(ports[h.Value], n)
				}
			}
		case d.kind == "EnvoyFilter":
			for _, cp := range items(get(d.node, "spec", "configPatches")) {
				if str(cp, "applyTo") == "CLUSTER" && str(cp, "patch", "operation") == "ADD" {
					out[str(cp, "patch", "value", "name")] = true
				}
			}
		}
	}
	for host, ps := range ports {
		for _, p := range ps {
			out[istioClusterName(p, "", host)] = true
		}
	}
	for _, d := range docs {
		if d.kind != "DestinationRule" {
			continue
		}
		host := str(d.node, "spec", "host")
		if !strings.Contains(host, ".") {
			host += "." + namespaceOf(d) + ".svc.cluster.local"
		}
		for _, s := range items(get(d.node, "spec", "subsets")) {
			for _, p := range ports[host] {
				out[istioClusterName(p, str(s, "name"), host)] = true
			}
		}
	}
	return out
}

// routeHeaders lists the cluster_header values of route patches (Istio EnvoyFilter
// HTTP_ROUTE merges, Envoy Gateway JSON patches).
func routeHeaders(docs []doc) map[string]bool {
	out := map[string]bool{}
	for _, d := range docs {
		for _, cp := range items(get(d.node, "spec", "configPatches")) {
			if str(cp, "applyTo") == "HTTP_ROUTE" {
				if h := str(cp, "patch", "value", "route", "cluster_header"); h != "" {
					out[h] = true
				}
			}
		}
		for _, jp := range items(get(d.node, "spec", "jsonPatches")) {
			if str(jp, "operation", "op") == "add" && strings.HasSuffix(str(jp, "operation", "path"), "route/cluster_header") {
				out[str(jp, "operation", "value")] = true
			}
		}
	}
	return out
}

// checkWiring asserts that a config names only clusters that exist, reads the header the
// route patch uses, and handles exactly the paths routed by header.
func checkWiring(t *testing.T, pc pluginConfig, clusters, headers map[string]bool, routed []string) {
	t.Helper()
	for _, c := range clustersNamed(pc.cfg) {
		if !clusters[c] {
			t.Errorf("%s %s: cluster %q is not defined by any manifest", pc.d, pc.path, c)
		}
	}
	if !headers[pc.cfg.RouteHeader] {
		t.Errorf("%s %s: route_header %q is not the cluster_header of any route patch (have %v)",
			pc.d, pc.path, pc.cfg.RouteHeader, headers)
	}
	got := slices.Sorted(slices.Values(pc.cfg.Paths))
	if want := slices.Sorted(slices.Values(routed)); !slices.Equal(got, want) {
		t.Errorf("%s %s: paths %v, but the cluster_header route matches %v", pc.d, pc.path, got, want)
	}
}

func inDir(docs []doc, dirs ...string) []doc {
	var out []doc
	for _, d := range docs {
		for _, dir := range dirs {
			if strings.HasPrefix(d.file, dir+"/") {
				out = append(out, d)
			}
		}
	}
	return out
}

func TestIstioWiring(t *testing.T) {
	docs := inDir(loadDocs(t), "istio", "kube")
	clusters := istioClusters(docs)
	for _, want := range []string{
		"outbound|7501||kvbridge.pdroute.svc.cluster.local",
		"outbound|8000|llm-decode-1|llm-decode.pdroute.svc.cluster.local",
		"outbound|30000||sglang-decode-0.engines.pdroute.internal",
		"pdroute_original_dst",
	} {
		if !clusters[want] {
			t.Errorf("cluster %q missing from the derived cluster list", want)
		}
	}
	var routed []string
	for _, d := range docs {
		if d.kind != "VirtualService" {
			continue
		}
		for _, r := range items(get(d.node, "spec", "http")) {
			if str(r, "name") == "pdroute" {
				for _, m := range items(get(r, "match")) {
					routed = append(routed, str(m, "uri", "exact"))
				}
				// Istio's route timeout defaults to none and its CRD refuses "0s":
				// absent is the way to say none, so only a written one is checked.
				if to := str(r, "timeout"); to != "" {
					if msg := longRouteTimeout(to); msg != "" {
						t.Errorf("%s: route pdroute: %s", d, msg)
					}
				}
			}
		}
	}
	if len(routed) == 0 {
		t.Fatal("no VirtualService route named pdroute")
	}
	pcs := pluginConfigs(t, docs)
	if len(pcs) == 0 {
		t.Fatal("no Istio plugin configs")
	}
	for _, pc := range pcs {
		if pc.cfg != nil {
			checkWiring(t, pc, clusters, routeHeaders(docs), routed)
		}
	}
}

func TestGatewayWiring(t *testing.T) {
	docs := inDir(loadDocs(t), "gateway", "kube")
	clusters := map[string]bool{}
	var routed []string
	for _, d := range docs {
		for _, jp := range items(get(d.node, "spec", "jsonPatches")) {
			if strings.HasSuffix(str(jp, "type"), ".Cluster") && str(jp, "operation", "op") == "add" {
				clusters[str(jp, "operation", "value", "name")] = true
			}
		}
		if d.kind == "HTTPRoute" {
			for i, r := range items(get(d.node, "spec", "rules")) {
				clusters[fmt.Sprintf("httproute/%s/%s/rule/%d", namespaceOf(d), d.name, i)] = true
				if d.name == "llm" && i == 0 {
					for _, m := range items(get(r, "matches")) {
						routed = append(routed, str(m, "path", "value"))
					}
					if msg := longRouteTimeout(str(r, "timeouts", "request")); msg != "" {
						t.Errorf("%s: rule 0: %s", d, msg)
					}
				}
			}
		}
	}
	pcs := pluginConfigs(t, docs)
	if len(pcs) != 3 {
		t.Fatalf("found %d Envoy Gateway plugin configs, want 3", len(pcs))
	}
	for _, pc := range pcs {
		if pc.cfg != nil {
			checkWiring(t, pc, clusters, routeHeaders(docs), routed)
		}
	}
}

// longRouteTimeout explains what is wrong with the timeout of a route that carries
// streamed generations, or returns "". Envoy's route timeout defaults to 15 s and counts
// from the end of the request to the end of the response, so it would cut long answers:
// the route must disable it ("0s") or allow minutes.
func longRouteTimeout(s string) string {
	if s == "" {
		return "no timeout written: set 0s or minutes (Envoy's route default, 15 s, cuts long generations)"
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Sprintf("timeout %q: %v", s, err)
	}
	if d != 0 && d < 5*time.Minute {
		return fmt.Sprintf("timeout %s cuts long generations (set 0s or at least 5m)", s)
	}
	return ""
}

func TestLongRouteTimeout(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: a substring of the message, "" = accepted
	}{
		{"0s", ""},
		{"600s", ""},
		{"5m", ""},
		{"", "no timeout written"},
		{"15s", "timeout 15s cuts long generations"},
		{"4m59s", "timeout 4m59s cuts long generations"},
		{"ten", `timeout "ten": time: invalid duration`},
	} {
		got := longRouteTimeout(tc.in)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("longRouteTimeout(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
