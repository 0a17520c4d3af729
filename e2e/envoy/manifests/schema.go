// Package manifests checks pdroute's deployment manifests (Istio, Envoy Gateway and plain
// Kubernetes YAML under e2e/envoy/{istio,gateway,kube}) against field lists taken from the
// real API definitions of the versions we document, so a manifest that names a field or an
// enum value a cluster would reject fails a Go test instead of a user's `kubectl apply`.
//
// The field lists live in testdata/schemas, one file per product version, written by
// cmd/schemagen from the upstream sources (each file records repository, commit and path).
// This package is native test tooling: it must not be imported by the wasm module.
package manifests

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Type is the JSON type a schema field accepts.
type Type string

// The field types of a schema line. Object, Array and Map have children (path + "." + name,
// path + "[]", path + "{}"); Any accepts every value and has no children.
const (
	Object      Type = "object"
	Array       Type = "array"
	Map         Type = "map"
	String      Type = "string"
	Integer     Type = "integer"
	Number      Type = "number"
	Boolean     Type = "boolean"
	IntOrString Type = "int-or-string"
	Any         Type = "any"
)

var knownTypes = map[Type]bool{Object: true, Array: true, Map: true, String: true, Integer: true,
	Number: true, Boolean: true, IntOrString: true, Any: true}

// Field is one line of a schema: the constraints on the value at one path.
type Field struct {
	Type     Type
	Enum     []string       // allowed values; empty = any value of Type
	Pattern  *regexp.Regexp // strings must match; nil = no pattern
	Required bool           // must be present whenever its parent object is
	Nullable bool           // an explicit null is accepted
	Open     bool           // object that also keeps fields not listed (preserve-unknown-fields)
}

// Kind is the field list of one API kind in one product version. Paths are relative to
// the document root: "spec.url", "spec.match[].ports[].number", "metadata.labels{}".
type Kind struct {
	APIVersion string
	Kind       string
	Fields     map[string]*Field
	children   map[string][]string // object path → its child field names, sorted
}

// Source names where a schema file's field lists were read from.
type Source struct {
	Repo, Commit, Ref, Path string
}

// Schema is one product version's kinds, e.g. Istio 1.27 or Envoy Gateway v1.6.
type Schema struct {
	Family  string // "istio", "envoy-gateway", "kubernetes"
	Version string // "1.27", "v1.6", "1.29"
	Sources []Source
	Kinds   map[string]*Kind // key: apiVersion + " " + kind
}

// KindKey is the key of Schema.Kinds for a document's apiVersion and kind.
func KindKey(apiVersion, kind string) string { return apiVersion + " " + kind }

// ParseSchema reads a schema file. The format is line based and tab separated:
//
//	family <name>
//	version <version>
//	source <repo> <commit> <ref> <path>        (one or more)
//	kind <apiVersion> <Kind>
//	<path>\t<type>[\t<attr>...]                 (fields of the last kind)
//
// where attr is "required", "nullable", "open", "enum=A,B" or "pattern=<Go regexp>".
// Lines starting with '#' and blank lines are ignored. Every field's parent must be listed
// before it, so a truncated or hand-edited file fails here rather than in a check.
func ParseSchema(r io.Reader) (*Schema, error) {
	s := &Schema{Kinds: map[string]*Kind{}}
	var cur *Kind
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if err := s.parseLine(line, &cur); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if s.Family == "" || s.Version == "" || len(s.Kinds) == 0 {
		return nil, fmt.Errorf("schema needs family, version and at least one kind")
	}
	for _, k := range s.Kinds {
		for _, names := range k.children {
			sort.Strings(names)
		}
	}
	return s, nil
}

func (s *Schema) parseLine(line string, cur **Kind) error {
	if !strings.Contains(line, "\t") {
		w := strings.Fields(line)
		switch {
		case len(w) == 2 && w[0] == "family":
			s.Family = w[1]
		case len(w) == 2 && w[0] == "version":
			s.Version = w[1]
		case len(w) == 5 && w[0] == "source":
			s.Sources = append(s.Sources, Source{Repo: w[1], Commit: w[2], Ref: w[3], Path: w[4]})
		case len(w) == 3 && w[0] == "kind":
			k := &Kind{APIVersion: w[1], Kind: w[2], Fields: map[string]*Field{"": {Type: Object}},
				children: map[string][]string{}}
			if _, dup := s.Kinds[KindKey(k.APIVersion, k.Kind)]; dup {
				return fmt.Errorf("kind %s %s listed twice", k.APIVersion, k.Kind)
			}
			s.Kinds[KindKey(k.APIVersion, k.Kind)] = k
			*cur = k
		default:
			return fmt.Errorf("unknown directive %q", line)
		}
		return nil
	}
	if *cur == nil {
		return fmt.Errorf("field before any kind: %q", line)
	}
	cols := strings.Split(line, "\t")
	path, f := cols[0], &Field{Type: Type(cols[1])}
	if !knownTypes[f.Type] {
		return fmt.Errorf("%s: unknown type %q", path, cols[1])
	}
	for _, a := range cols[2:] {
		switch {
		case a == "required":
			f.Required = true
		case a == "nullable":
			f.Nullable = true
		case a == "open":
			f.Open = true
		case strings.HasPrefix(a, "enum="):
			f.Enum = strings.Split(strings.TrimPrefix(a, "enum="), ",")
		case strings.HasPrefix(a, "pattern="):
			re, err := regexp.Compile(strings.TrimPrefix(a, "pattern="))
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			f.Pattern = re
		default:
			return fmt.Errorf("%s: unknown attribute %q", path, a)
		}
	}
	return (*cur).add(path, f)
}

// add records a field after checking that its parent exists and can have it as a child.
func (k *Kind) add(path string, f *Field) error {
	if _, dup := k.Fields[path]; dup {
		return fmt.Errorf("%s: listed twice", path)
	}
	parent, name := splitPath(path)
	pf, ok := k.Fields[parent]
	if !ok {
		return fmt.Errorf("%s: parent %q not listed before it", path, parent)
	}
	want := Object
	switch name {
	case "[]":
		want = Array
	case "{}":
		want = Map
	}
	if pf.Type != want {
		return fmt.Errorf("%s: parent %q is %s, not %s", path, parent, pf.Type, want)
	}
	k.Fields[path] = f
	if want == Object {
		k.children[parent] = append(k.children[parent], name)
	}
	return nil
}

// splitPath returns the parent path and last segment: "a.b[]" → ("a.b", "[]"),
// "a.b" → ("a", "b"), "a" → ("", "a").
func splitPath(p string) (parent, name string) {
	if strings.HasSuffix(p, "[]") || strings.HasSuffix(p, "{}") {
		return p[:len(p)-2], p[len(p)-2:]
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// joinPath appends an object field name to a schema path.
func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// WriteSchema writes s in the format ParseSchema reads, fields in the order given by
// order (a kind key → its field paths, parents first). Used by cmd/schemagen.
func WriteSchema(w io.Writer, s *Schema, order map[string][]string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Generated by e2e/envoy/manifests/cmd/schemagen; do not edit.\n")
	fmt.Fprintf(bw, "family %s\nversion %s\n", s.Family, s.Version)
	for _, src := range s.Sources {
		fmt.Fprintf(bw, "source %s %s %s %s\n", src.Repo, src.Commit, src.Ref, src.Path)
	}
	keys := make([]string, 0, len(s.Kinds))
	for k := range s.Kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		k := s.Kinds[key]
		fmt.Fprintf(bw, "kind %s %s\n", k.APIVersion, k.Kind)
		for _, p := range order[key] {
			if p == "" {
				continue
			}
			f := k.Fields[p]
			cols := []string{p, string(f.Type)}
			if f.Required {
				cols = append(cols, "required")
			}
			if f.Nullable {
				cols = append(cols, "nullable")
			}
			if f.Open {
				cols = append(cols, "open")
			}
			if len(f.Enum) > 0 {
				cols = append(cols, "enum="+strings.Join(f.Enum, ","))
			}
			if f.Pattern != nil {
				cols = append(cols, "pattern="+f.Pattern.String())
			}
			fmt.Fprintln(bw, strings.Join(cols, "\t"))
		}
	}
	return bw.Flush()
}

// NewKind returns an empty kind (root object only) for a generator to fill with AddField.
func NewKind(apiVersion, kind string) *Kind {
	return &Kind{APIVersion: apiVersion, Kind: kind, Fields: map[string]*Field{"": {Type: Object}},
		children: map[string][]string{}}
}

// AddField adds a field to a kind under construction; its parent must already be present.
func (k *Kind) AddField(path string, f *Field) error { return k.add(path, f) }
