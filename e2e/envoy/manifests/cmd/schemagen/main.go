// Command schemagen writes the field lists (testdata/schemas/*.schema) that the manifest
// tests check pdroute's Istio, Envoy Gateway and Kubernetes YAML against.
//
// It reads the upstream definitions straight from git clones, at the tags listed in
// testdata/schemas/sources.yaml:
//   - CustomResourceDefinitions (OpenAPI v3): istio/api, envoyproxy/gateway (which bundles
//     the Gateway API CRDs it supports);
//   - Go API types (json tags, +enum constants, +optional markers): kubernetes/api and
//     kubernetes/apimachinery, for built-in kinds such as Deployment and Service.
//
// Usage:
//
//	schemagen -repos DIR [-config testdata/schemas/sources.yaml] [-out testdata/schemas]
//
// DIR holds one clone per repository, as DIR/<owner>/<name> (a bare clone is enough:
// `git clone --bare https://github.com/istio/api DIR/istio/api`). Each output file names
// the repository, commit, tag and path every kind came from.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pdroute/pdroute/e2e/envoy/manifests"
)

// family is one entry of sources.yaml: which kinds to read from which repository, per
// product version (label → git tag).
type family struct {
	Family   string            `yaml:"family"`
	Repo     string            `yaml:"repo"`
	Paths    []string          `yaml:"paths"`    // CRD files, glob patterns, in order of preference
	GoTypes  *goTypesSource    `yaml:"go_types"` // built-in kinds from Go types instead of CRDs
	Kinds    []string          `yaml:"kinds"`    // "<apiVersion> <Kind>"
	Versions map[string]string `yaml:"versions"` // version label → git ref
}

type goTypesSource struct {
	// Packages maps a Go import path prefix to the repository that holds it, e.g.
	// k8s.io/apimachinery → kubernetes/apimachinery.
	Packages map[string]string `yaml:"packages"`
	// APIPackages maps an apiVersion to the package of its types: apps/v1 → k8s.io/api/apps/v1.
	APIPackages map[string]string `yaml:"api_packages"`
	// LeafTypes gives the JSON type of types with custom marshalling (Quantity,
	// IntOrString, Time, RawExtension): import path + "." + name → schema type.
	LeafTypes map[string]string `yaml:"leaf_types"`
}

func main() {
	repos := flag.String("repos", "", "directory holding git clones as <owner>/<name> (required)")
	config := flag.String("config", "e2e/envoy/manifests/testdata/schemas/sources.yaml", "sources file")
	out := flag.String("out", "e2e/envoy/manifests/testdata/schemas", "output directory")
	flag.Parse()
	if *repos == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*repos, *config, *out); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(repos, config, out string) error {
	raw, err := os.ReadFile(config)
	if err != nil {
		return err
	}
	var fams []family
	if err := yaml.Unmarshal(raw, &fams); err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	for _, fam := range fams {
		for label, ref := range fam.Versions {
			s, order, err := build(repos, fam, label, ref)
			if err != nil {
				return fmt.Errorf("%s %s (%s): %w", fam.Family, label, ref, err)
			}
			var buf bytes.Buffer
			if err := manifests.WriteSchema(&buf, s, order); err != nil {
				return err
			}
			// Round-trip through the parser so a file that would not load is never written.
			if _, err := manifests.ParseSchema(bytes.NewReader(buf.Bytes())); err != nil {
				return fmt.Errorf("%s %s: generated schema does not parse: %w", fam.Family, label, err)
			}
			name := filepath.Join(out, fam.Family+"-"+label+".schema")
			if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Println("wrote", name)
		}
	}
	return nil
}

func build(repos string, fam family, label, ref string) (*manifests.Schema, map[string][]string, error) {
	s := &manifests.Schema{Family: fam.Family, Version: label, Kinds: map[string]*manifests.Kind{}}
	order := map[string][]string{}
	if fam.GoTypes != nil {
		g, err := newGoTypes(repos, fam, ref)
		if err != nil {
			return nil, nil, err
		}
		for _, kv := range fam.Kinds {
			apiVersion, kind, _ := strings.Cut(kv, " ")
			k, paths, err := g.kind(apiVersion, kind)
			if err != nil {
				return nil, nil, err
			}
			s.Kinds[manifests.KindKey(apiVersion, kind)], order[manifests.KindKey(apiVersion, kind)] = k, paths
		}
		s.Sources = g.sources()
		return s, order, nil
	}
	git := gitRepo{dir: filepath.Join(repos, fam.Repo)}
	commit, err := git.commit(ref)
	if err != nil {
		return nil, nil, err
	}
	files, err := git.files(ref)
	if err != nil {
		return nil, nil, err
	}
	want := map[string]bool{}
	for _, kv := range fam.Kinds {
		want[kv] = true
	}
	used := map[string]bool{}
	for _, pattern := range fam.Paths {
		for _, f := range files {
			if ok, _ := path.Match(pattern, f); !ok {
				continue
			}
			text, err := git.show(ref, f)
			if err != nil {
				return nil, nil, err
			}
			crds, err := readCRDs(text)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, crd := range crds {
				for _, v := range crd.Spec.Versions {
					key := crd.Spec.Group + "/" + v.Name + " " + crd.Spec.Names.Kind
					if !want[key] || s.Kinds[key] != nil {
						continue
					}
					k, paths, err := crdKind(crd.Spec.Group+"/"+v.Name, crd.Spec.Names.Kind, v.Schema.OpenAPIV3Schema)
					if err != nil {
						return nil, nil, fmt.Errorf("%s %s: %w", f, key, err)
					}
					s.Kinds[key], order[key] = k, paths
					if !used[f] {
						used[f] = true
						s.Sources = append(s.Sources, manifests.Source{Repo: fam.Repo, Commit: commit, Ref: ref, Path: f})
					}
				}
			}
		}
	}
	var missing []string
	for _, kv := range fam.Kinds {
		if s.Kinds[kv] == nil {
			missing = append(missing, kv)
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("kinds not found: %s", strings.Join(missing, "; "))
	}
	return s, order, nil
}

// gitRepo reads files of one clone at a ref without a work tree.
type gitRepo struct{ dir string }

func (g gitRepo) run(args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", g.dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (g gitRepo) commit(ref string) (string, error) {
	out, err := g.run("rev-parse", ref+"^{commit}")
	return strings.TrimSpace(string(out)), err
}

func (g gitRepo) files(ref string) ([]string, error) {
	out, err := g.run("ls-tree", "-r", "--name-only", ref)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

func (g gitRepo) show(ref, file string) ([]byte, error) { return g.run("show", ref+":"+file) }

// crd is the part of a CustomResourceDefinition schemagen reads.
type crd struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Group string `yaml:"group"`
		Names struct {
			Kind string `yaml:"kind"`
		} `yaml:"names"`
		Versions []struct {
			Name   string `yaml:"name"`
			Schema struct {
				OpenAPIV3Schema *openAPI `yaml:"openAPIV3Schema"`
			} `yaml:"schema"`
		} `yaml:"versions"`
	} `yaml:"spec"`
}

// openAPI is the structural-schema subset of OpenAPI v3 that CRDs use.
type openAPI struct {
	Type                 string    `yaml:"type"`
	Properties           yaml.Node `yaml:"properties"` // a node, to keep field order
	Items                *openAPI  `yaml:"items"`
	AdditionalProperties yaml.Node `yaml:"additionalProperties"` // a schema, or true
	Required             []string  `yaml:"required"`
	Enum                 []string  `yaml:"enum"`
	AllOf                []openAPI `yaml:"allOf"` // only their enums are used
	Pattern              string    `yaml:"pattern"`
	Nullable             bool      `yaml:"nullable"`
	PreserveUnknown      bool      `yaml:"x-kubernetes-preserve-unknown-fields"`
	IntOrString          bool      `yaml:"x-kubernetes-int-or-string"`
}

// readCRDs splits a multi-document YAML file and keeps the CustomResourceDefinitions.
// Helm template lines ({{ ... }}) that some charts wrap around CRDs are dropped first.
func readCRDs(text []byte) ([]crd, error) {
	var kept []string
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "{{") {
			kept = append(kept, line)
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(strings.Join(kept, "\n")))
	var out []crd
	for {
		var c crd
		err := dec.Decode(&c)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if c.Kind == "CustomResourceDefinition" {
			out = append(out, c)
		}
	}
}

// objectMeta is the part of metav1.ObjectMeta a manifest may set; CRD schemas leave
// metadata to the API server, so it is added here for every custom kind.
var objectMeta = []struct {
	path string
	f    manifests.Field
}{
	{"apiVersion", manifests.Field{Type: manifests.String, Required: true}},
	{"kind", manifests.Field{Type: manifests.String, Required: true}},
	{"metadata", manifests.Field{Type: manifests.Object, Required: true}},
	{"metadata.name", manifests.Field{Type: manifests.String}},
	{"metadata.generateName", manifests.Field{Type: manifests.String}},
	{"metadata.namespace", manifests.Field{Type: manifests.String}},
	{"metadata.labels", manifests.Field{Type: manifests.Map}},
	{"metadata.labels{}", manifests.Field{Type: manifests.String}},
	{"metadata.annotations", manifests.Field{Type: manifests.Map}},
	{"metadata.annotations{}", manifests.Field{Type: manifests.String}},
	{"metadata.finalizers", manifests.Field{Type: manifests.Array}},
	{"metadata.finalizers[]", manifests.Field{Type: manifests.String}},
}

func crdKind(apiVersion, kind string, root *openAPI) (*manifests.Kind, []string, error) {
	k := manifests.NewKind(apiVersion, kind)
	var order []string
	add := func(p string, f *manifests.Field) error {
		order = append(order, p)
		return k.AddField(p, f)
	}
	for _, m := range objectMeta {
		f := m.f
		if err := add(m.path, &f); err != nil {
			return nil, nil, err
		}
	}
	if root == nil {
		return nil, nil, fmt.Errorf("no openAPIV3Schema")
	}
	var walk func(p string, s *openAPI, required bool) error
	walk = func(p string, s *openAPI, required bool) error {
		f := &manifests.Field{Required: required, Nullable: s.Nullable}
		props := s.Properties.Content
		switch {
		case s.IntOrString:
			f.Type = manifests.IntOrString
		case (s.Type == "object" || s.Type == "") && len(props) > 0:
			f.Type, f.Open = manifests.Object, s.PreserveUnknown
		case s.Type == "object" && s.AdditionalProperties.Kind != 0:
			f.Type = manifests.Map
		case s.Type == "object" || s.Type == "" || s.PreserveUnknown:
			f.Type = manifests.Any
		case s.Type == "array":
			f.Type = manifests.Array
		case s.Type == "string", s.Type == "integer", s.Type == "number", s.Type == "boolean":
			f.Type = manifests.Type(s.Type)
		default:
			return fmt.Errorf("%s: unsupported type %q", p, s.Type)
		}
		enum, err := allowed(s)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if len(enum) > 0 {
			for _, e := range enum {
				if strings.ContainsAny(e, ",\t") {
					return fmt.Errorf("%s: enum value %q has a comma or tab", p, e)
				}
			}
			f.Enum = enum
		}
		if s.Pattern != "" && f.Type == manifests.String {
			re, err := regexp.Compile(s.Pattern)
			if err != nil {
				return fmt.Errorf("%s: pattern: %w", p, err)
			}
			f.Pattern = re
		}
		if p != "" {
			if err := add(p, f); err != nil {
				return err
			}
		}
		switch f.Type {
		case manifests.Object:
			req := map[string]bool{}
			for _, r := range s.Required {
				req[r] = true
			}
			for i := 0; i+1 < len(props); i += 2 {
				name := props[i].Value
				if p == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
					continue // standard fields, added above
				}
				var child openAPI
				if err := props[i+1].Decode(&child); err != nil {
					return fmt.Errorf("%s.%s: %w", p, name, err)
				}
				cp := name
				if p != "" {
					cp = p + "." + name
				}
				if err := walk(cp, &child, req[name]); err != nil {
					return err
				}
			}
		case manifests.Array:
			if s.Items == nil {
				return fmt.Errorf("%s: array without items", p)
			}
			return walk(p+"[]", s.Items, false)
		case manifests.Map:
			values := &openAPI{PreserveUnknown: true} // additionalProperties: true
			if s.AdditionalProperties.Kind == yaml.MappingNode {
				values = &openAPI{}
				if err := s.AdditionalProperties.Decode(values); err != nil {
					return fmt.Errorf("%s{}: %w", p, err)
				}
			}
			return walk(p+"{}", values, false)
		}
		return nil
	}
	if err := walk("", root, false); err != nil {
		return nil, nil, err
	}
	return k, order, nil
}

// allowed returns the enum of s intersected with the enums of its allOf branches
// (kubebuilder writes one allOf branch per +kubebuilder:validation:Enum marker when a
// field and its type both carry one); nil means any value.
func allowed(s *openAPI) ([]string, error) {
	enum := s.Enum
	for _, b := range s.AllOf {
		if len(b.Enum) == 0 {
			continue
		}
		if enum == nil {
			enum = b.Enum
			continue
		}
		var both []string
		for _, e := range enum {
			if slices.Contains(b.Enum, e) {
				both = append(both, e)
			}
		}
		if len(both) == 0 {
			return nil, fmt.Errorf("allOf enums have no value in common")
		}
		enum = both
	}
	return enum, nil
}
