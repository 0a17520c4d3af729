// Package manifests validates pdroute's deployment manifests (Istio, Envoy Gateway and plain
// Kubernetes YAML under e2e/envoy/{istio,gateway,kube}) the way a cluster would, so a
// manifest that names a field or a value the API server would reject fails a Go test instead
// of a user's `kubectl apply`:
//
//   - custom kinds against the published CustomResourceDefinitions of every product version
//     we document (testdata/crds, copied by cmd/schemagen), with the API server's own code
//     from k8s.io/apiextensions-apiserver: pruning finds unknown fields, the OpenAPI
//     validator checks types, enums, patterns and required fields, and the CEL validator runs
//     the CRDs' x-kubernetes-validations rules;
//   - built-in kinds (Deployment, Service, ...) by strict decoding into k8s.io/api types,
//     which rejects unknown and duplicate fields and values of the wrong type.
//
// This package is native test tooling: it must not be imported by the wasm module.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// SourceAnnotation is the annotation of a copied CRD that names where it came from:
// "<repo> <commit> <tag> <path>" (written by cmd/schemagen).
const SourceAnnotation = "pdroute.dev/crd-source"

// CRDKind validates objects of one custom kind at one API version against its CRD schema.
type CRDKind struct {
	APIVersion, Kind string
	Source           string // the CRD's SourceAnnotation
	namespaced       bool
	structural       *structuralschema.Structural
	validator        validation.SchemaValidator
	cel              *cel.Validator // nil when the schema has no x-kubernetes-validations
}

// KindKey is the key of the maps LoadCRDs returns, for a document's apiVersion and kind.
func KindKey(apiVersion, kind string) string { return apiVersion + " " + kind }

// LoadCRDs reads a multi-document YAML file of CustomResourceDefinitions and returns a
// validator per version, keyed by KindKey. A CRD that the API server would refuse
// as non-structural is an error here too.
func LoadCRDs(r io.Reader) (map[string]*CRDKind, error) {
	out := map[string]*CRDKind{}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		b, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(b))) == 0 {
			continue
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			return nil, err
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: not a CustomResourceDefinition", crd.Name)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return nil, fmt.Errorf("%s %s: no openAPIV3Schema", crd.Name, v.Name)
			}
			k, err := newCRDKind(crd.Spec.Group+"/"+v.Name, crd.Spec.Names.Kind, v.Schema.OpenAPIV3Schema)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
			}
			k.Source = crd.Annotations[SourceAnnotation]
			k.namespaced = crd.Spec.Scope == apiextensionsv1.NamespaceScoped
			key := KindKey(k.APIVersion, k.Kind)
			if out[key] != nil {
				return nil, fmt.Errorf("%s listed twice", key)
			}
			out[key] = k
		}
	}
}

func newCRDKind(apiVersion, kind string, v1 *apiextensionsv1.JSONSchemaProps) (*CRDKind, error) {
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, &internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return nil, fmt.Errorf("not a structural schema: %w", err)
	}
	if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
		return nil, fmt.Errorf("not a structural schema: %w", errs.ToAggregate())
	}
	validator, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, err
	}
	return &CRDKind{APIVersion: apiVersion, Kind: kind, structural: s, validator: validator,
		cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
}

// Validate returns what the API server would reject obj (a document decoded by
// DecodeObject) for on create with field validation Strict, sorted: unknown fields
// (including in metadata), schema violations and failed CEL rules, checked after the
// schema's defaults are applied. obj is not changed.
func (k *CRDKind) Validate(obj map[string]any) []string {
	obj = runtime.DeepCopyJSON(obj)
	var problems []string
	meta, _, unknownMeta, err := objectmeta.GetObjectMetaWithOptions(obj, objectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		problems = append(problems, "metadata: "+err.Error())
	}
	if meta != nil {
		// The generic metadata rules (name a DNS subdomain, label syntax); a namespaced
		// object without a namespace gets kubectl's default one.
		if k.namespaced && meta.Namespace == "" {
			meta.Namespace = "default"
		}
		for _, e := range apivalidation.ValidateObjectMeta(meta, k.namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")) {
			problems = append(problems, e.Error())
		}
	}
	for _, p := range unknownMeta {
		problems = append(problems, p+": unknown field")
	}
	for _, p := range pruning.PruneWithOptions(obj, k.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		problems = append(problems, p+": unknown field")
	}
	// Default and validate what is left, in the API server's order: CEL rules read
	// defaulted fields (Gateway API's parentRefs rules read group, which has a default).
	defaulting.Default(obj, k.structural)
	for _, e := range objectmeta.Validate(nil, obj, k.structural, true) {
		problems = append(problems, e.Error())
	}
	for _, e := range validation.ValidateCustomResource(nil, obj, k.validator) {
		problems = append(problems, e.Error())
	}
	if k.cel != nil {
		errs, _ := k.cel.Validate(context.Background(), nil, k.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range errs {
			problems = append(problems, e.Error())
		}
	}
	// The root's metadata is checked by two of the API server's passes; say each once.
	sort.Strings(problems)
	return slices.Compact(problems)
}

// DecodeObject turns one YAML document into the JSON object an API server would receive
// from kubectl: duplicate keys are an error, integers stay int64.
func DecodeObject(doc []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("not an object")
	}
	return obj, nil
}

// strictBuiltin decodes built-in kinds into their k8s.io/api types, failing on unknown
// or duplicate fields (kubectl's --validate=strict, done client side).
var strictBuiltin = serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory,
	scheme.Scheme, scheme.Scheme, serializerjson.SerializerOptions{Yaml: true, Strict: true})

// IsBuiltin reports whether k8s.io/api (client-go's scheme) defines the kind.
func IsBuiltin(apiVersion, kind string) bool {
	gv, err := k8sschema.ParseGroupVersion(apiVersion)
	if err != nil {
		return false
	}
	return scheme.Scheme.Recognizes(gv.WithKind(kind))
}

// ValidateBuiltin decodes doc strictly into its k8s.io/api type and returns the problems:
// unknown fields, duplicate fields, values of the wrong type, and metadata that breaks the
// generic rules (name a DNS subdomain, label and annotation syntax). Kind-specific rules
// (enums, a Service name being a DNS label) live in k8s.io/kubernetes and are not checked.
func ValidateBuiltin(doc []byte) []string {
	obj, _, err := strictBuiltin.Decode(doc, nil, nil)
	if err != nil {
		strict, ok := runtime.AsStrictDecodingError(err)
		if !ok {
			return []string{err.Error()}
		}
		var out []string
		for _, e := range strict.Errors() {
			out = append(out, e.Error())
		}
		sort.Strings(out)
		return out
	}
	m, err := apimeta.Accessor(obj)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range apivalidation.ValidateObjectMetaAccessor(m, m.GetNamespace() != "", apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")) {
		out = append(out, e.Error())
	}
	sort.Strings(out)
	return out
}

func stripComments(b []byte) []byte {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}
