// Command schemagen copies the published CustomResourceDefinitions that the manifest tests
// validate pdroute's Istio and Envoy Gateway YAML against into testdata/crds, one file per
// product version.
//
// It reads the CRDs straight from git clones, at the tags listed in testdata/crds/sources.yaml
// (istio/api; envoyproxy/gateway, which bundles the Gateway API CRDs it supports), keeps only
// the kinds and API versions our manifests use, drops the human descriptions (the bulk of
// every CRD, never used by validation) and records in an annotation of each CRD the
// repository, commit, tag and path it came from. Everything else of the schema is kept as
// published: types, enums, patterns, required fields, x-kubernetes-* extensions and CEL rules.
//
// Usage:
//
//	schemagen -repos DIR [-config testdata/crds/sources.yaml] [-out testdata/crds]
//
// DIR holds one clone per repository, as DIR/<owner>/<name> (a bare clone is enough:
// `git clone --bare https://github.com/istio/api DIR/istio/api`).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	yaml3 "gopkg.in/yaml.v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// SourceAnnotation is the annotation of a copied CRD that names where it came from:
// "<repo> <commit> <tag> <path>".
const SourceAnnotation = "pdroute.dev/crd-source"

// family is one entry of sources.yaml: which kinds to read from which repository, per
// product version (label → git tag).
type family struct {
	Family   string            `yaml:"family"`
	Repo     string            `yaml:"repo"`
	Paths    []string          `yaml:"paths"`    // CRD files, glob patterns, in order of preference
	Kinds    []string          `yaml:"kinds"`    // "<apiVersion> <Kind>"
	Versions map[string]string `yaml:"versions"` // version label → git ref
}

func main() {
	repos := flag.String("repos", "", "directory holding git clones as <owner>/<name> (required)")
	config := flag.String("config", "e2e/envoy/manifests/testdata/crds/sources.yaml", "sources file")
	out := flag.String("out", "e2e/envoy/manifests/testdata/crds", "output directory")
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
	if err := yaml3.Unmarshal(raw, &fams); err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	for _, fam := range fams {
		labels := make([]string, 0, len(fam.Versions))
		for label := range fam.Versions {
			labels = append(labels, label)
		}
		sort.Strings(labels)
		for _, label := range labels {
			text, err := build(repos, fam, label, fam.Versions[label])
			if err != nil {
				return fmt.Errorf("%s %s (%s): %w", fam.Family, label, fam.Versions[label], err)
			}
			name := filepath.Join(out, fam.Family+"-"+label+".yaml")
			if err := os.WriteFile(name, text, 0o644); err != nil {
				return err
			}
			fmt.Println("wrote", name)
		}
	}
	return nil
}

// build returns the trimmed CRDs of one family version as a multi-document YAML file, in
// the order of fam.Kinds.
func build(repos string, fam family, label, ref string) ([]byte, error) {
	git := gitRepo{dir: filepath.Join(repos, fam.Repo)}
	commit, err := git.commit(ref)
	if err != nil {
		return nil, err
	}
	files, err := git.files(ref)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, kv := range fam.Kinds {
		want[kv] = true
	}
	found := map[string]*apiextensionsv1.CustomResourceDefinition{} // kind key → trimmed CRD
	for _, pattern := range fam.Paths {
		for _, f := range files {
			if ok, _ := path.Match(pattern, f); !ok {
				continue
			}
			text, err := git.show(ref, f)
			if err != nil {
				return nil, err
			}
			crds, err := readCRDs(text)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, crd := range crds {
				for _, v := range crd.Spec.Versions {
					key := crd.Spec.Group + "/" + v.Name + " " + crd.Spec.Names.Kind
					if !want[key] || found[key] != nil {
						continue
					}
					if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
						return nil, fmt.Errorf("%s %s: no openAPIV3Schema", f, key)
					}
					found[key] = trim(crd, v, fmt.Sprintf("%s %s %s %s", fam.Repo, commit, ref, f))
				}
			}
		}
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Copied by e2e/envoy/manifests/cmd/schemagen from %s %s (%s %s); do not edit.\n",
		fam.Repo, ref, fam.Family, label)
	fmt.Fprintf(&buf, "# Descriptions removed; each CRD keeps only the API version pdroute's manifests use.\n")
	var missing []string
	for _, kv := range fam.Kinds {
		crd := found[kv]
		if crd == nil {
			missing = append(missing, kv)
			continue
		}
		b, err := marshal(crd)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kinds not found: %s", strings.Join(missing, "; "))
	}
	return buf.Bytes(), nil
}

// marshal writes crd as YAML without the empty status and creationTimestamp that its Go
// type always carries.
func marshal(crd *apiextensionsv1.CustomResourceDefinition) ([]byte, error) {
	j, err := json.Marshal(crd)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	delete(m, "status")
	delete(m["metadata"].(map[string]any), "creationTimestamp")
	return yaml.Marshal(m)
}

// trim returns crd with only version v, no descriptions and no status, annotated with its
// source.
func trim(crd apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion, source string) *apiextensionsv1.CustomResourceDefinition {
	out := &apiextensionsv1.CustomResourceDefinition{}
	out.APIVersion, out.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	out.Name = crd.Name
	out.Annotations = map[string]string{SourceAnnotation: source}
	out.Spec = apiextensionsv1.CustomResourceDefinitionSpec{
		Group: crd.Spec.Group, Names: crd.Spec.Names, Scope: crd.Spec.Scope,
		PreserveUnknownFields: crd.Spec.PreserveUnknownFields,
	}
	v.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: v.Schema.OpenAPIV3Schema.DeepCopy()}
	stripDescriptions(v.Schema.OpenAPIV3Schema)
	v.AdditionalPrinterColumns = nil
	out.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{v}
	return out
}

func stripDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.Description = ""
	for k, p := range s.Properties {
		stripDescriptions(&p)
		s.Properties[k] = p
	}
	for k, p := range s.PatternProperties {
		stripDescriptions(&p)
		s.PatternProperties[k] = p
	}
	for k, p := range s.Definitions {
		stripDescriptions(&p)
		s.Definitions[k] = p
	}
	if s.Items != nil {
		stripDescriptions(s.Items.Schema)
		for i := range s.Items.JSONSchemas {
			stripDescriptions(&s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil {
		stripDescriptions(s.AdditionalProperties.Schema)
	}
	if s.AdditionalItems != nil {
		stripDescriptions(s.AdditionalItems.Schema)
	}
	if s.Not != nil {
		stripDescriptions(s.Not)
	}
	for _, l := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range l {
			stripDescriptions(&l[i])
		}
	}
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

// readCRDs splits a multi-document YAML file and keeps the CustomResourceDefinitions.
// Helm template lines ({{ ... }}) that some charts wrap around CRDs are dropped first.
func readCRDs(text []byte) ([]apiextensionsv1.CustomResourceDefinition, error) {
	var kept []string
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "{{") {
			kept = append(kept, line)
		}
	}
	dec := yaml3.NewDecoder(strings.NewReader(strings.Join(kept, "\n")))
	var out []apiextensionsv1.CustomResourceDefinition
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		m, ok := v.(map[string]any)
		if !ok || m["kind"] != "CustomResourceDefinition" {
			continue
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			return nil, err
		}
		var c apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}
