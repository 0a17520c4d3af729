package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/envoy/manifests"
)

// makeRepo creates a git repository at dir with files committed and tagged.
func makeRepo(t *testing.T, dir, tag string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "."},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "x"},
		{"tag", tag},
	} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// widgetCRD is a Helm-wrapped CRD with two versions, descriptions everywhere and a
// property that is itself named "description".
const widgetCRD = `{{- if .Values.crds.enabled }}
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.example.com
  labels: {chart: x}
spec:
  group: demo.example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema:
      openAPIV3Schema: {type: object, description: old}
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Mode, type: string, jsonPath: .spec.mode, description: the mode}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget.
        properties:
          spec:
            type: object
            description: The spec.
            properties:
              description: {type: string, description: a field named description}
              mode: {type: string, enum: [FAST], description: how fast}
              items:
                type: array
                items: {type: object, description: an item, properties: {n: {type: integer, description: n}}}
              labels:
                type: object
                additionalProperties: {type: string, description: a label}
            x-kubernetes-validations:
            - {rule: "self.mode == 'FAST'", message: fast only}
{{- end }}
`

func TestBuild(t *testing.T) {
	repos := t.TempDir()
	makeRepo(t, filepath.Join(repos, "demo", "api"), "v1.0.0", map[string]string{
		"crds/widgets.yaml": widgetCRD,
		"crds/other.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
	})
	fam := family{Family: "demo", Repo: "demo/api", Paths: []string{"crds/*.yaml"},
		Kinds: []string{"demo.example.com/v1 Widget"}}
	text, err := build(repos, fam, "1.0", "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	out := string(text)
	for _, gone := range []string{"old", "A widget.", "The spec.", "how fast", "an item", "a label", "the mode", "v1alpha1", "chart", "creationTimestamp", "status:", "storedVersions"} {
		if strings.Contains(out, gone) {
			t.Errorf("output still has %q:\n%s", gone, out)
		}
	}
	for _, kept := range []string{"description:\n                type: string", "fast only", "- FAST"} {
		if !strings.Contains(out, kept) {
			t.Errorf("output lost %q:\n%s", kept, out)
		}
	}
	kinds, err := manifests.LoadCRDs(strings.NewReader(out))
	if err != nil {
		t.Fatalf("output does not load: %v\n%s", err, out)
	}
	k := kinds[manifests.KindKey("demo.example.com/v1", "Widget")]
	if k == nil || len(kinds) != 1 {
		t.Fatalf("loaded %v, want only demo.example.com/v1 Widget", kinds)
	}
	if !regexp.MustCompile(`^demo/api [0-9a-f]{40} v1.0.0 crds/widgets.yaml$`).MatchString(k.Source) {
		t.Errorf("source = %q", k.Source)
	}
	obj, err := manifests.DecodeObject([]byte("apiVersion: demo.example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {mode: SLOW}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := k.Validate(obj)
	if len(got) != 2 || !strings.Contains(got[0], `Unsupported value: "SLOW"`) || !strings.Contains(got[1], `fast only`) {
		t.Errorf("copied schema lost its CEL rule or enum: %q", got)
	}

	fam.Kinds = append(fam.Kinds, "demo.example.com/v2 Widget")
	if _, err := build(repos, fam, "1.0", "v1.0.0"); err == nil || !strings.Contains(err.Error(), "kinds not found: demo.example.com/v2 Widget") {
		t.Errorf("missing kind: err = %v", err)
	}
}
