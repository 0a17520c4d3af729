package manifests

import (
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// widgetCRD exercises what the validator must enforce: unknown fields (pruning), types,
// enums, bounds and required fields (OpenAPI), a CEL rule, and a CEL rule that reads a
// defaulted field.
const widgetCRD = `# a comment before the first document
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.example.com
  annotations:
    pdroute.dev/crd-source: example/repo 0123456789abcdef0123456789abcdef01234567 v1.0 crds.yaml
spec:
  group: demo.example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [mode]
            properties:
              mode: {type: string, enum: [FAST, SLOW]}
              port: {type: integer, minimum: 1, maximum: 65535}
              group: {type: string, default: demo}
              timeout:
                type: string
                x-kubernetes-validations:
                - rule: duration(self) >= duration('1ms')
                  message: must be a valid duration greater than 1ms
              free: {type: object, x-kubernetes-preserve-unknown-fields: true}
            x-kubernetes-validations:
            - rule: self.group == 'demo'
              message: group must be demo
`

func TestCRDValidate(t *testing.T) {
	kinds, err := LoadCRDs(strings.NewReader(widgetCRD))
	if err != nil {
		t.Fatal(err)
	}
	k := kinds[KindKey("demo.example.com/v1", "Widget")]
	if k == nil {
		t.Fatalf("Widget not loaded: %v", kinds)
	}
	if want := "example/repo 0123456789abcdef0123456789abcdef01234567 v1.0 crds.yaml"; k.Source != want {
		t.Errorf("Source = %q, want %q", k.Source, want)
	}
	const head = "apiVersion: demo.example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: demo}\n"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"YAML 1.1: n is false", "apiVersion: demo.example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: n}\nspec: {mode: FAST}\n",
			[]string{`metadata: Invalid value: map[string]interface {}{"name":"w", "namespace":false}: json: cannot unmarshal bool`,
				"metadata: json: cannot unmarshal bool into Go struct field ObjectMeta.namespace of type string"}},
		{"valid", head + "spec: {mode: FAST, port: 80, timeout: 5m, free: {any: [1, {x: y}]}}\n", nil},
		{"defaulted field read by a CEL rule", head + "spec: {mode: SLOW}\n", nil},
		{"misspelt field", head + "spec: {mdoe: FAST}\n",
			[]string{"spec.mdoe: unknown field", `spec.mode: Required value`}},
		{"unknown top-level field", head + "spec: {mode: FAST}\nstatus: {}\n", []string{"status: unknown field"}},
		{"unknown metadata field", "apiVersion: demo.example.com/v1\nkind: Widget\nmetadata: {name: w, lables: {a: b}}\nspec: {mode: FAST}\n",
			[]string{"metadata.lables: unknown field"}},
		{"bad name and label", "apiVersion: demo.example.com/v1\nkind: Widget\nmetadata: {name: My_Widget, labels: {app: \"a b\"}}\nspec: {mode: FAST}\n",
			[]string{`metadata.labels: Invalid value: "a b"`, `metadata.name: Invalid value: "My_Widget"`}},
		{"no apiVersion", "kind: Widget\nmetadata: {name: w}\nspec: {mode: FAST}\n",
			[]string{"apiVersion: Required value"}},
		{"wrong type", head + "spec: {mode: FAST, port: \"80\"}\n",
			[]string{`spec.port: Invalid value: "string": spec.port in body must be of type integer: "string"`}},
		{"bad enum", head + "spec: {mode: MEDIUM}\n",
			[]string{`spec.mode: Unsupported value: "MEDIUM": supported values: "FAST", "SLOW"`}},
		{"out of bounds", head + "spec: {mode: FAST, port: 0}\n",
			[]string{"spec.port: Invalid value: 0: spec.port in body should be greater than or equal to 1"}},
		{"CEL rule", head + "spec: {mode: FAST, timeout: 0s}\n",
			[]string{`spec.timeout: Invalid value: "string": must be a valid duration greater than 1ms`}},
		{"CEL rule on a written field", head + "spec: {mode: FAST, group: other}\n",
			[]string{`spec: Invalid value: "object": group must be demo`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, err := DecodeObject([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			got := k.Validate(obj)
			if len(got) != len(tt.want) {
				t.Fatalf("problems:\n got %q\nwant %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], tt.want[i])
				}
			}
			if _, ok := obj["spec"].(map[string]any)["group"]; ok && !strings.Contains(tt.doc, "group:") {
				t.Error("Validate changed its argument (defaults written into it)")
			}
		})
	}
}

func TestDecodeObjectRejectsDuplicateKeys(t *testing.T) {
	_, err := DecodeObject([]byte("spec: {mode: FAST, mode: SLOW}\n"))
	if err == nil || !strings.Contains(err.Error(), `key "mode" already set in map`) {
		t.Errorf("err = %v, want a duplicate key error", err)
	}
}

func TestLoadCRDsRejects(t *testing.T) {
	for _, tt := range []struct{ name, text, want string }{
		{"not structural", strings.Replace(widgetCRD, "              port: {type: integer, minimum: 1, maximum: 65535}\n",
			"              port: {minimum: 1}\n", 1), "not a structural schema"},
		{"unknown CRD field", strings.Replace(widgetCRD, "  scope: Namespaced\n", "  scope: Namespaced\n  scoop: x\n", 1), `unknown field "scoop"`},
		{"twice", widgetCRD + strings.TrimPrefix(widgetCRD, "# a comment before the first document\n"), "listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadCRDs(strings.NewReader(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateBuiltin(t *testing.T) {
	const head = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
	for _, tt := range []struct {
		name, doc string
		want      []string
	}{
		{"valid", head + "spec: {ports: [{name: http, port: 80, targetPort: http}]}\n", nil},
		{"misspelt field", head + "spec: {ports: [{prot: 80}]}\n", []string{`unknown field "spec.ports[0].prot"`}},
		{"misspelt metadata field", "apiVersion: v1\nkind: Service\nmetadata: {nmae: s}\n", []string{`unknown field "metadata.nmae"`}},
		{"wrong type", head + "spec: {ports: [{port: eighty}]}\n", []string{"cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32"}},
		{"bad name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: My_Config}\n", []string{`metadata.name: Invalid value: "My_Config"`}},
		{"duplicate field", head + "spec: {type: ClusterIP, type: NodePort}\n", []string{`key "type" already set in map`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ValidateBuiltin([]byte(tt.doc))
			if len(got) != len(tt.want) {
				t.Fatalf("problems:\n got %q\nwant %q", got, tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
	if !IsBuiltin("apps/v1", "Deployment") || !IsBuiltin("rbac.authorization.k8s.io/v1", "RoleBinding") {
		t.Error("IsBuiltin misses a k8s.io/api kind")
	}
	if IsBuiltin("networking.istio.io/v1", "VirtualService") || IsBuiltin("not a version//", "X") {
		t.Error("IsBuiltin claims a custom kind")
	}
}

// TestShippedKindsCatch changes shipped documents the way a typo would and checks that the
// published CRDs reject each change in every version that defines the kind: the tests above
// prove the validator, this proves the CRD data is wired to the documents.
func TestShippedKindsCatch(t *testing.T) {
	docs := loadDocs(t)
	find := func(file, kind string) doc {
		for _, d := range docs {
			if d.file == file && d.kind == kind {
				return d
			}
		}
		t.Fatalf("%s: no %s", file, kind)
		return doc{}
	}
	for _, tt := range []struct {
		name, file, kind string
		at               []string // mapping keys and sequence indexes to the mapping to change
		key, value       string   // set key to value there (YAML)
		want             string
	}{
		{"WasmPlugin bad enum", "istio/wasmplugin-nixl.yaml", "WasmPlugin", []string{"spec"}, "failStrategy", "FAIL_SOMETIMES",
			`spec.failStrategy: Unsupported value: "FAIL_SOMETIMES"`},
		{"VirtualService timeout 0s (CEL)", "istio/gateway.yaml", "VirtualService", []string{"spec", "http", "0"}, "timeout", "0s",
			"spec.http[0].timeout: Invalid value: \"string\": must be a valid duration greater than 1ms"},
		{"EnvoyExtensionPolicy misspelt field", "gateway/extension-policy-http.yaml", "EnvoyExtensionPolicy", []string{"spec", "wasm", "0"}, "failOpne", "true",
			"spec.wasm[0].failOpne: unknown field"},
		{"ServiceEntry wrong type", "istio/kvbridge-serviceentry.yaml", "ServiceEntry", []string{"spec", "ports", "0"}, "number", "seventy",
			"spec.ports[0].number: Invalid value: \"string\": spec.ports[0].number in body must be of type integer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := find(tt.file, tt.kind)
			if order, _ := problems(t, d); len(order) != 0 {
				t.Fatalf("problems before the change: %q", order)
			}
			d.raw = setYAML(t, d.raw, tt.at, tt.key, tt.value)
			// The message may differ between versions (an enum lists each version's values).
			order, by := problems(t, d)
			var versions []string
			for _, p := range order {
				if strings.Contains(p, tt.want) {
					versions = append(versions, by[p]...)
				}
			}
			if len(versions) == 0 {
				t.Fatalf("no problem contains %q: %q", tt.want, order)
			}
			defined := 0
			for _, s := range loadCRDs(t) {
				if s.kinds[KindKey(d.apiVersion, d.kind)] != nil {
					defined++
				}
			}
			if len(versions) != defined {
				t.Errorf("%q reported by %v, want all %d versions", tt.want, versions, defined)
			}
		})
	}
}

// setYAML returns doc with key set to value (YAML) in the mapping reached by at.
func setYAML(t *testing.T, doc []byte, at []string, key, value string) []byte {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	n := root.Content[0]
	for _, k := range at {
		if n.Kind == yaml.SequenceNode {
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(n.Content) {
				t.Fatalf("%v: no item %s", at, k)
			}
			n = n.Content[i]
		} else if n = get(n, k); n == nil {
			t.Fatalf("%v: no key %s", at, k)
		}
	}
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(value), &v); err != nil {
		t.Fatal(err)
	}
	if old := get(n, key); old != nil {
		*old = *v.Content[0]
	} else {
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v.Content[0])
	}
	out, err := yaml.Marshal(&root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
