package manifests

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one reason a document does not fit a kind's field list.
type Problem struct {
	Path    string // the document path, e.g. "spec.match[0].ports[1].number"
	Message string
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// Check walks every field of doc (a YAML document's root mapping) and reports each field
// the kind does not list, each value of the wrong type, each enum value or pattern
// mismatch and each missing required field. Problems come in document order.
func (k *Kind) Check(doc *yaml.Node) []Problem {
	c := checker{k: k}
	c.walk(doc, "", "")
	return c.problems
}

type checker struct {
	k        *Kind
	problems []Problem
}

func (c *checker) fail(path, format string, args ...any) {
	if path == "" {
		path = "(root)"
	}
	c.problems = append(c.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// walk checks node against the field at schema path sp; dp is the same place as a
// document path (array indexes filled in).
func (c *checker) walk(n *yaml.Node, sp, dp string) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	f := c.k.Fields[sp]
	if f.Type == Any {
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		if !f.Nullable {
			c.fail(dp, "null is not allowed (want %s)", f.Type)
		}
		return
	}
	switch f.Type {
	case Object:
		c.object(n, f, sp, dp)
	case Array:
		if n.Kind != yaml.SequenceNode {
			c.fail(dp, "want a list, got %s", describe(n))
			return
		}
		for i, item := range n.Content {
			c.walk(item, sp+"[]", dp+"["+strconv.Itoa(i)+"]")
		}
	case Map:
		if n.Kind != yaml.MappingNode {
			c.fail(dp, "want a map, got %s", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.walk(n.Content[i+1], sp+"{}", joinPath(dp, n.Content[i].Value))
		}
	default:
		c.scalar(n, f, dp)
	}
}

func (c *checker) object(n *yaml.Node, f *Field, sp, dp string) {
	if n.Kind != yaml.MappingNode {
		c.fail(dp, "want an object, got %s", describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := n.Content[i].Value
		if seen[name] {
			c.fail(joinPath(dp, name), "field given twice")
		}
		seen[name] = true
		child := joinPath(sp, name)
		if _, ok := c.k.Fields[child]; !ok {
			if !f.Open {
				c.fail(joinPath(dp, name), "unknown field (%s has %s)", orRoot(sp), list(c.k.children[sp]))
			}
			continue
		}
		c.walk(n.Content[i+1], child, joinPath(dp, name))
	}
	for _, name := range c.k.children[sp] {
		if c.k.Fields[joinPath(sp, name)].Required && !seen[name] {
			c.fail(joinPath(dp, name), "required field missing")
		}
	}
}

func (c *checker) scalar(n *yaml.Node, f *Field, dp string) {
	if n.Kind != yaml.ScalarNode {
		c.fail(dp, "want %s, got %s", f.Type, describe(n))
		return
	}
	ok := false
	switch f.Type {
	case String:
		ok = n.ShortTag() == "!!str"
	case Integer:
		ok = n.ShortTag() == "!!int"
	case Number:
		ok = n.ShortTag() == "!!int" || n.ShortTag() == "!!float"
	case Boolean:
		ok = n.ShortTag() == "!!bool"
	case IntOrString:
		ok = n.ShortTag() == "!!int" || n.ShortTag() == "!!str"
	}
	if !ok {
		c.fail(dp, "want %s, got %s", f.Type, describe(n))
		return
	}
	if len(f.Enum) > 0 && !slices.Contains(f.Enum, n.Value) {
		c.fail(dp, "value %q not allowed (allowed: %s)", n.Value, strings.Join(f.Enum, ", "))
	}
	if f.Pattern != nil && n.ShortTag() == "!!str" && !f.Pattern.MatchString(n.Value) {
		c.fail(dp, "value %q does not match pattern %s", n.Value, f.Pattern)
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strings.TrimPrefix(n.ShortTag(), "!!") + " " + strconv.Quote(n.Value)
	}
	return "an unsupported YAML node"
}

func orRoot(p string) string {
	if p == "" {
		return "the document"
	}
	return p
}

// list shortens a field-name list for an error message.
func list(names []string) string {
	if len(names) > 12 {
		return strings.Join(names[:12], ", ") + ", …"
	}
	return strings.Join(names, ", ")
}
