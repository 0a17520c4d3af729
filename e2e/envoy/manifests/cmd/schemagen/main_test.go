package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.schema from the current output")

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
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_COMMITTER_DATE=2026-11-22T00:00:00Z", "GIT_AUTHOR_DATE=2026-11-22T00:00:00Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

const widgetCRD = `{{- if .Values.crds.enabled }}
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.example.com
spec:
  group: demo.example.com
  names:
    kind: Widget
  versions:
  - name: v1alpha1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [code]
            properties:
              code:
                type: object
                required: [type]
                properties:
                  type:
                    allOf:
                    - enum: [HTTP, Image]
                    - enum: [HTTP, Image, ConfigMap]
                    type: string
                  sha256:
                    type: string
                    pattern: ^[a-f0-9]{64}$
              config:
                x-kubernetes-preserve-unknown-fields: true
              labels:
                type: object
                additionalProperties:
                  type: string
              extra:
                type: object
                additionalProperties: true
              port:
                x-kubernetes-int-or-string: true
              priority:
                type: integer
                nullable: true
              rules:
                type: array
                items:
                  type: object
                  properties:
                    paths:
                      type: array
                      items:
                        type: string
              open:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties:
                  known:
                    type: boolean
          status:
            type: object
            properties:
              ok:
                type: boolean
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
{{- end }}
`

const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.demo.example.com
spec:
  group: demo.example.com
  names:
    kind: Gadget
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: number
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-a-crd
`

const appsTypes = `package v1

import (
	corev1 "example.com/api/core/v1"
	metav1 "example.com/machinery/pkg/meta/v1"
)

type Deployment struct {
	metav1.TypeMeta ` + "`json:\",inline\"`" + `
	// +optional
	metav1.ObjectMeta ` + "`json:\"metadata,omitempty\"`" + `
	Spec DeploymentSpec ` + "`json:\"spec\"`" + `
	Status string ` + "`json:\"-\"`" + `
}

type DeploymentSpec struct {
	// +optional
	Replicas *int32 ` + "`json:\"replicas,omitempty\"`" + `
	Template corev1.PodSpec ` + "`json:\"template\"`" + `
	// +optional
	Strategy StrategyType ` + "`json:\"strategy\"`" + `
}

// +enum
type StrategyType string

const (
	Recreate StrategyType = "Recreate"
	RollingUpdate StrategyType = "RollingUpdate"
)
`

const coreTypes = `package v1

import "example.com/machinery/pkg/quantity"

type PodSpec struct {
	Containers []Container ` + "`json:\"containers\"`" + `
	// +optional
	Labels map[string]string ` + "`json:\"labels,omitempty\"`" + `
	// +optional
	Data []byte ` + "`json:\"data,omitempty\"`" + `
	Next *PodSpec ` + "`json:\"next,omitempty\"`" + `
}

type Container struct {
	Name string ` + "`json:\"name\"`" + `
	Limits map[string]quantity.Quantity ` + "`json:\"limits,omitempty\"`" + `
	Weight float64 ` + "`json:\"weight,omitempty\"`" + `
	Policy PullPolicy ` + "`json:\"policy,omitempty\"`" + `
}

// Not marked +enum: its constants are not enforced.
type PullPolicy string

const PullAlways PullPolicy = "Always"
`

const metaTypes = `package v1

type TypeMeta struct {
	Kind string ` + "`json:\"kind,omitempty\"`" + `
	APIVersion string ` + "`json:\"apiVersion,omitempty\"`" + `
}

type ObjectMeta struct {
	Name string ` + "`json:\"name,omitempty\"`" + `
	Labels map[string]string ` + "`json:\"labels,omitempty\"`" + `
}
`

const sourcesYAML = `- family: demo
  repo: ex/crds
  paths: [charts/*/crds/*.yaml, missing/*.yaml]
  kinds: [demo.example.com/v1alpha1 Widget, demo.example.com/v1 Gadget]
  versions: {"1.0": v1.0}
- family: kube
  repo: ex/api
  go_types:
    packages: {example.com/api: ex/api, example.com/machinery: ex/machinery}
    api_packages: {apps/v1: example.com/api/apps/v1}
    leaf_types: {example.com/machinery/pkg/quantity.Quantity: int-or-string}
  kinds: [apps/v1 Deployment]
  versions: {"0.1": v0.1}
`

// TestRun generates schemas from small git repositories (a helm-wrapped CRD file, a
// multi-document file, Go types across three packages and two repositories) and compares
// them with golden files; run with -update after an intended change.
func TestRun(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repos := t.TempDir()
	makeRepo(t, filepath.Join(repos, "ex/crds"), "v1.0", map[string]string{
		"charts/a/crds/widgets.yaml": widgetCRD,
		"charts/b/crds/gadgets.yaml": gadgetCRD,
		"README.md":                  "not a CRD\n",
	})
	makeRepo(t, filepath.Join(repos, "ex/api"), "v0.1", map[string]string{
		"apps/v1/types.go":      appsTypes,
		"apps/v1/types_test.go": "package v1\n\ntype Ignored struct{}\n",
		"core/v1/types.go":      coreTypes,
	})
	makeRepo(t, filepath.Join(repos, "ex/machinery"), "v0.1", map[string]string{
		"pkg/meta/v1/types.go": metaTypes,
	})
	config := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(config, []byte(sourcesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := run(repos, config, out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"demo-1.0.schema", "kube-0.1.schema"} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		// Commits differ per run (temporary repositories): compare with them masked.
		got = []byte(maskCommits(string(got)))
		golden := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from %s:\n%s", name, golden, got)
		}
	}
}

func maskCommits(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "source" && len(f[2]) == 40 {
			f[2] = "<commit>"
			lines[i] = strings.Join(f, " ")
		}
	}
	return strings.Join(lines, "\n")
}

func TestRunErrors(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repos := t.TempDir()
	makeRepo(t, filepath.Join(repos, "ex/crds"), "v1.0", map[string]string{"crds/gadgets.yaml": gadgetCRD})
	tests := []struct{ name, sources, want string }{
		{"kind not found", `[{family: d, repo: ex/crds, paths: ["crds/*.yaml"], kinds: [demo.example.com/v2 Gadget], versions: {"1": v1.0}}]`,
			"kinds not found: demo.example.com/v2 Gadget"},
		{"unknown tag", `[{family: d, repo: ex/crds, paths: ["crds/*.yaml"], kinds: [demo.example.com/v1 Gadget], versions: {"1": v9}}]`,
			"git rev-parse v9^{commit}"},
		{"go types without packages", `[{family: d, repo: ex/crds, go_types: {}, kinds: [v1 Pod], versions: {"1": v1.0}}]`,
			"go_types needs packages and api_packages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "sources.yaml")
			if err := os.WriteFile(config, []byte(tt.sources), 0o644); err != nil {
				t.Fatal(err)
			}
			err := run(repos, config, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
