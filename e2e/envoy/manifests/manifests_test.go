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
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/pdroute/pdroute/filter/config"
)

// manifestDirs are the folders whose every YAML document is checked.
var manifestDirs = []string{"../istio", "../gateway", "../kube"}

// wantVersions are the product versions the docs promise; a schema file missing or extra
// fails TestSchemasCoverDocumentedVersions.
var wantVersions = map[string][]string{
	"istio":         {"1.25", "1.26", "1.27", "1.28", "1.29", "1.30"},
	"envoy-gateway": {"v1.3", "v1.4", "v1.5", "v1.6", "v1.7", "v1.8", "v1.9"},
	"kubernetes":    {"1.29"},
}

func loadSchemas(t *testing.T) []*Schema {
	t.Helper()
	files, err := filepath.Glob("testdata/schemas/*.schema")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files: %v", err)
	}
	var out []*Schema
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSchema(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if want := s.Family + "-" + s.Version + ".schema"; filepath.Base(f) != want {
			t.Errorf("%s: holds %s %s, want file name %s", f, s.Family, s.Version, want)
		}
		out = append(out, s)
	}
	return out
}

// doc is one YAML document of a manifest file.
type doc struct {
	file                              string // e.g. "istio/gateway.yaml"
	index                             int    // 1-based position in the file
	node                              *yaml.Node
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
			dec := yaml.NewDecoder(fh)
			for i := 1; ; i++ {
				var n yaml.Node
				err := dec.Decode(&n)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return fmt.Errorf("%s doc %d: %w", rel, i, err)
				}
				if len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
					return fmt.Errorf("%s doc %d: not a mapping", rel, i)
				}
				root := n.Content[0]
				docs = append(docs, doc{file: rel, index: i, node: root,
					apiVersion: str(root, "apiVersion"), kind: str(root, "kind"),
					name: str(root, "metadata", "name"), namespace: str(root, "metadata", "namespace")})
			}
			return nil
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

func TestSchemasCoverDocumentedVersions(t *testing.T) {
	got := map[string][]string{}
	hex40 := regexp.MustCompile(`^[0-9a-f]{40}$`)
	for _, s := range loadSchemas(t) {
		got[s.Family] = append(got[s.Family], s.Version)
		if len(s.Sources) == 0 {
			t.Errorf("%s %s: no source recorded", s.Family, s.Version)
		}
		for _, src := range s.Sources {
			if !hex40.MatchString(src.Commit) || src.Repo == "" || src.Path == "" {
				t.Errorf("%s %s: incomplete source %+v", s.Family, s.Version, src)
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

// TestManifestsMatchSchemas is the check the docs promise: every field of every document
// under istio/, gateway/ and kube/ exists, with an allowed value, in every version of the
// product that defines its kind.
func TestManifestsMatchSchemas(t *testing.T) {
	schemas := loadSchemas(t)
	for _, d := range loadDocs(t) {
		t.Run(fmt.Sprintf("%s#%d", d.file, d.index), func(t *testing.T) {
			key := KindKey(d.apiVersion, d.kind)
			checked := 0
			failed := map[string][]string{} // problem → versions
			var order []string
			for _, s := range schemas {
				k := s.Kinds[key]
				if k == nil {
					continue
				}
				checked++
				for _, p := range k.Check(d.node) {
					if failed[p.String()] == nil {
						order = append(order, p.String())
					}
					failed[p.String()] = append(failed[p.String()], s.Family+" "+s.Version)
				}
			}
			if checked == 0 {
				t.Fatalf("%s: no schema defines %s", d, key)
			}
			for _, p := range order {
				t.Errorf("%s: %s [%s]", d, p, strings.Join(failed[p], ", "))
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

// toJSON converts a YAML value to the JSON the proxy hands the filter (Istio: Struct →
// JSON; Envoy Gateway: apiextensions JSON → string).
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
	if len(pcs) < 6 {
		t.Fatalf("found %d plugin configs, want at least 6 (4 Istio modes, file variant, 2 Envoy Gateway)", len(pcs))
	}
	modes := map[config.Mode]bool{}
	for _, pc := range pcs {
		if pc.cfg != nil && pc.d.kind == "WasmPlugin" {
			modes[pc.cfg.Mode] = true
		}
	}
	for _, m := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
		if !modes[m] {
			t.Errorf("no Istio WasmPlugin example for mode %s", m)
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
			cluster, _ := c.Route(e)
			out = append(out, cluster)
			if e.MetricsCluster != "" {
				out = append(out, e.MetricsCluster)
			}
		}
	}
	if c.Mode == config.ModeLMCache {
		out = append(out, c.LMCache.KVBridgeCluster)
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
			}
		}
	}
	for _, d := range docs {
		if d.kind != "WasmPlugin" {
			continue
		}
		// Istio classes gateway listeners as CLIENT: a SERVER-only plugin never attaches
		// to a gateway (istio/api extensions/v1alpha1/wasm.proto TrafficSelector.mode).
		for _, m := range items(get(d.node, "spec", "match")) {
			if mode := str(m, "mode"); mode != "CLIENT" && mode != "CLIENT_AND_SERVER" {
				t.Errorf("%s: match mode %q does not select gateway traffic", d, mode)
			}
		}
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
				}
			}
		}
	}
	pcs := pluginConfigs(t, docs)
	if len(pcs) != 2 {
		t.Fatalf("found %d Envoy Gateway plugin configs, want 2", len(pcs))
	}
	for _, pc := range pcs {
		if pc.cfg != nil {
			checkWiring(t, pc, clusters, routeHeaders(docs), routed)
		}
	}
}
