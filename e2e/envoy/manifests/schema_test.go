package manifests

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// testSchema exercises every type and attribute.
const testSchema = `# comment
family demo
version 1.0
source example/repo 0123456789abcdef0123456789abcdef01234567 v1.0 crds.yaml
kind demo.example.com/v1 Widget
apiVersion	string	required
kind	string	required
metadata	object
metadata.name	string
metadata.labels	map
metadata.labels{}	string
spec	object	required
spec.mode	string	enum=FAST,SLOW
spec.sha	string	pattern=^[a-f0-9]{4}$
spec.port	integer
spec.ratio	number
spec.on	boolean
spec.target	int-or-string
spec.priority	integer	nullable
spec.free	any
spec.open	object	open
spec.open.known	string
spec.items	array
spec.items[]	object
spec.items[].name	string	required
spec.items[].ports	array
spec.items[].ports[]	integer
`

func parse(t *testing.T, text string) *Schema {
	t.Helper()
	s, err := ParseSchema(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheck(t *testing.T) {
	k := parse(t, testSchema).Kinds[KindKey("demo.example.com/v1", "Widget")]
	const head = "apiVersion: demo.example.com/v1\nkind: Widget\n"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"valid, every type", head + `metadata: {name: w, labels: {a: b}}
spec:
  mode: FAST
  sha: "ab12"
  port: 80
  ratio: 0.5
  on: true
  target: http
  priority: null
  free: {anything: [1, {x: y}]}
  open: {known: k, unknown: 1}
  items: [{name: a, ports: [1, 2]}]
`, nil},
		{"int-or-string takes an int", head + "spec: {target: 8080}\n", nil},
		{"number takes an int", head + "spec: {ratio: 1}\n", nil},
		{"unknown field names its path and the known ones", head + "spec: {mdoe: FAST}\n",
			[]string{"spec.mdoe: unknown field (spec has free, items, mode, on, open, port, priority, ratio, sha, target)"}},
		{"unknown top-level field", head + "spec: {}\nstatus: {}\n",
			[]string{"status: unknown field (the document has apiVersion, kind, metadata, spec)"}},
		{"enum", head + "spec: {mode: MEDIUM}\n",
			[]string{`spec.mode: value "MEDIUM" not allowed (allowed: FAST, SLOW)`}},
		{"pattern", head + "spec: {sha: zz}\n",
			[]string{`spec.sha: value "zz" does not match pattern ^[a-f0-9]{4}$`}},
		{"quoted number is a string", head + "spec: {port: \"80\"}\n",
			[]string{`spec.port: want integer, got str "80"`}},
		{"unquoted digits are not a string", head + "spec: {sha: 1234}\n",
			[]string{`spec.sha: want string, got int "1234"`}},
		{"bool", head + "spec: {on: yes}\n",
			[]string{`spec.on: want boolean, got str "yes"`}},
		{"null only where nullable", head + "spec: {port: null}\n",
			[]string{"spec.port: null is not allowed (want integer)"}},
		{"array element paths carry indexes", head + "spec: {items: [{name: a}, {ports: [1, x]}]}\n",
			[]string{`spec.items[1].ports[1]: want integer, got str "x"`, "spec.items[1].name: required field missing"}},
		{"map values are checked", head + "metadata: {labels: {a: 1}}\nspec: {}\n",
			[]string{`metadata.labels.a: want string, got int "1"`}},
		{"object given a list", head + "spec: [1]\n", []string{"spec: want an object, got a list"}},
		{"list given an object", head + "spec: {items: {name: a}}\n", []string{"spec.items: want a list, got an object"}},
		{"missing required", "kind: Widget\nspec: {}\n", []string{"apiVersion: required field missing"}},
		{"duplicate key (kept by yaml.v3 in a Node)", head + "spec: {port: 1, port: 2}\n", []string{"spec.port: field given twice"}},
		{"anchors are followed", head + "x: &p {port: one}\nspec: *p\n",
			[]string{"x: unknown field (the document has apiVersion, kind, metadata, spec)", `spec.port: want integer, got str "one"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(tt.doc), &n); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range k.Check(&n) {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestParseSchemaErrors(t *testing.T) {
	const head = "family f\nversion 1\nkind v1 K\n"
	tests := []struct{ name, text, want string }{
		{"field before kind", "family f\nversion 1\nspec\tobject\n", "line 3: field before any kind"},
		{"parent missing", head + "spec.x\tstring\n", `line 4: spec.x: parent "spec" not listed before it`},
		{"parent not an array", head + "spec\tobject\nspec[]\tstring\n", `line 5: spec[]: parent "spec" is object, not array`},
		{"parent not a map", head + "spec\tarray\nspec{}\tstring\n", `line 5: spec{}: parent "spec" is array, not map`},
		{"unknown type", head + "spec\tthing\n", `line 4: spec: unknown type "thing"`},
		{"unknown attribute", head + "spec\tstring\toptional\n", `line 4: spec: unknown attribute "optional"`},
		{"bad pattern", head + "spec\tstring\tpattern=(\n", "line 4: spec: error parsing regexp"},
		{"duplicate field", head + "spec\tstring\nspec\tstring\n", "line 5: spec: listed twice"},
		{"duplicate kind", head + "kind v1 K\n", "line 4: kind v1 K listed twice"},
		{"unknown directive", "famly f\n", `line 1: unknown directive "famly f"`},
		{"no kinds", "family f\nversion 1\n", "schema needs family, version and at least one kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSchema(strings.NewReader(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestWriteSchemaRoundTrip checks that WriteSchema writes what ParseSchema reads back, in
// the order given, so regenerated files are stable.
func TestWriteSchemaRoundTrip(t *testing.T) {
	s := parse(t, testSchema)
	k := s.Kinds[KindKey("demo.example.com/v1", "Widget")]
	var order []string
	for _, line := range strings.Split(testSchema, "\n") {
		if p, _, ok := strings.Cut(line, "\t"); ok {
			order = append(order, p)
		}
	}
	var buf bytes.Buffer
	if err := WriteSchema(&buf, s, map[string][]string{KindKey(k.APIVersion, k.Kind): order}); err != nil {
		t.Fatal(err)
	}
	want := "# Generated by e2e/envoy/manifests/cmd/schemagen; do not edit.\n" +
		testSchema[strings.Index(testSchema, "family"):]
	if buf.String() != want {
		t.Errorf("round trip differs:\n%s\nwant:\n%s", buf.String(), want)
	}
}
