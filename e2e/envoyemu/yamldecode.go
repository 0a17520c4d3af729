package envoyemu

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file is a strict YAML → Go decoder that reports errors with the full
// protobuf field path, the way the emulator promises to reject configs
// ("static_resources.clusters[2].load_assignment: unknown field \"foo\"").
// yaml.v3's KnownFields names the Go type, not the path, so the walk is ours.
//
// Struct fields name their proto field in a `yaml:"snake_name"` tag; like
// Envoy's proto3 JSON parser, the lowerCamelCase spelling is accepted too.

// yamlUnmarshaler is implemented by config types that need a custom shape
// (durations, enums, typed_config Any messages, wrapped values).
type yamlUnmarshaler interface {
	unmarshalYAML(budget *int, path string, n *yaml.Node) error
}

// fieldError is a config error anchored at a field path.
type fieldError struct {
	path string
	msg  string
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return e.msg
	}
	return e.path + ": " + e.msg
}

func errAt(path, format string, args ...any) error {
	return &fieldError{path: path, msg: fmt.Sprintf(format, args...)}
}

// joinPath appends a field name to a path.
func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// resolve follows YAML aliases and document wrappers.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch n.Kind {
		case yaml.AliasNode:
			n = n.Alias
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		default:
			return n
		}
	}
	return nil
}

// isNull reports a YAML null (absent value): "~", "null" or empty.
func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// maxNodes bounds the nodes one decode visits: following aliases, a small
// document can expand exponentially ("billion laughs").
const maxNodes = 100000

// errTooLarge is returned once a decode has visited maxNodes nodes.
var errTooLarge = errAt("", "config too large (more than %d YAML nodes after alias expansion)", maxNodes)

// decodeYAML decodes n into the value pointed to by out.
func decodeYAML(path string, n *yaml.Node, out any) error {
	budget := maxNodes
	return decodeValue(&budget, path, resolve(n), reflect.ValueOf(out).Elem())
}

var unmarshalerType = reflect.TypeOf((*yamlUnmarshaler)(nil)).Elem()

func decodeValue(budget *int, path string, n *yaml.Node, v reflect.Value) error {
	if *budget--; *budget < 0 {
		return errTooLarge
	}
	n = resolve(n)
	if v.Kind() == reflect.Pointer {
		if isNull(n) {
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return decodeValue(budget, path, n, v.Elem())
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if isNull(n) {
			return nil
		}
		return v.Addr().Interface().(yamlUnmarshaler).unmarshalYAML(budget, path, n)
	}
	if isNull(n) {
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		return decodeStruct(budget, path, n, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return errAt(path, "want a list, got %s", describe(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decodeValue(budget, fmt.Sprintf("%s[%d]", path, i), item, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return errAt(path, "want a map, got %s", describe(n))
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				return errAt(path, "map keys must be strings")
			}
			ev := reflect.New(v.Type().Elem()).Elem()
			if err := decodeValue(budget, joinPath(path, k.Value), n.Content[i+1], ev); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k.Value), ev)
		}
		v.Set(m)
		return nil
	case reflect.String:
		s, err := scalarString(path, n)
		if err != nil {
			return err
		}
		v.SetString(s)
		return nil
	case reflect.Bool:
		b, err := scalarBool(path, n)
		if err != nil {
			return err
		}
		v.SetBool(b)
		return nil
	case reflect.Uint32, reflect.Uint64:
		u, err := scalarUint(path, n, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetUint(u)
		return nil
	}
	return errAt(path, "unsupported config type %s", v.Type())
}

func decodeStruct(budget *int, path string, n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return errAt(path, "want an object, got %s", describe(n))
	}
	seen := map[int]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			return errAt(path, "object keys must be strings")
		}
		idx := fieldIndex(v.Type(), k.Value)
		if idx < 0 {
			return errAt(path, "unknown field %q", k.Value)
		}
		name := yamlName(v.Type().Field(idx))
		if prev, dup := seen[idx]; dup {
			return errAt(path, "field %q set twice (as %q and %q)", name, prev, k.Value)
		}
		seen[idx] = k.Value
		if err := decodeValue(budget, joinPath(path, name), n.Content[i+1], v.Field(idx)); err != nil {
			return err
		}
	}
	return nil
}

// fieldIndex finds the struct field for a key in snake_case or lowerCamelCase.
func fieldIndex(t reflect.Type, key string) int {
	for i := 0; i < t.NumField(); i++ {
		name := yamlName(t.Field(i))
		if name == "" {
			continue
		}
		if key == name || key == lowerCamel(name) {
			return i
		}
	}
	return -1
}

func yamlName(f reflect.StructField) string {
	tag := f.Tag.Get("yaml")
	if tag == "-" {
		return ""
	}
	return strings.Split(tag, ",")[0]
}

// lowerCamel converts a proto field name to its JSON name: port_value → portValue.
func lowerCamel(s string) string {
	var b strings.Builder
	up := false
	for _, r := range s {
		if r == '_' {
			up = true
			continue
		}
		if up && r >= 'a' && r <= 'z' {
			r -= 'a' - 'A'
		}
		up = false
		b.WriteRune(r)
	}
	return b.String()
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported YAML node"
}

func scalarString(path string, n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", errAt(path, "want a string, got %s", describe(n))
	}
	return n.Value, nil
}

func scalarBool(path string, n *yaml.Node) (bool, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, errAt(path, "want true or false, got %s", describe(n))
}

// scalarUint accepts a YAML integer or, as proto3 JSON does, a decimal string.
func scalarUint(path string, n *yaml.Node, bits int) (uint64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, errAt(path, "want an unsigned integer, got %s", describe(n))
	}
	u, err := strconv.ParseUint(n.Value, 10, bits)
	if err != nil {
		return 0, errAt(path, "want an unsigned %d-bit integer, got %q", bits, n.Value)
	}
	return u, nil
}

// yamlToJSON renders an arbitrary YAML value as compact JSON (used for
// google.protobuf.Struct values, which Envoy hands to plugins as JSON).
func yamlToJSON(path string, n *yaml.Node) ([]byte, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, errAt(path, "%v", err)
	}
	b, err := json.Marshal(jsonSafe(v))
	if err != nil {
		return nil, errAt(path, "%v", err)
	}
	return b, nil
}

// jsonSafe converts yaml.v3's map[string]any/float forms into JSON-encodable values.
func jsonSafe(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonSafe(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = jsonSafe(e)
		}
		return t
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil
		}
	}
	return v
}
