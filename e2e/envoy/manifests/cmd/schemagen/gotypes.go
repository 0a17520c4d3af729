package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/pdroute/pdroute/e2e/envoy/manifests"
)

// goTypes reads Kubernetes built-in kinds from their Go API types the way the API
// server's OpenAPI is generated from them: json tag names, `,inline` embedding,
// omitempty or +optional for optional fields, and string constants of +enum types.
type goTypes struct {
	repos  string
	fam    family
	ref    string
	pkgs   map[string]*goPkg // import path → package
	commit map[string]string // repository → commit of ref
	dirs   map[string][]string
}

type goPkg struct {
	types   map[string]*ast.TypeSpec
	docs    map[string]string // type name → its doc comment (markers included)
	enums   map[string][]string
	imports map[*ast.TypeSpec]map[string]string // the file's import name → path
}

func newGoTypes(repos string, fam family, ref string) (*goTypes, error) {
	if len(fam.GoTypes.Packages) == 0 || len(fam.GoTypes.APIPackages) == 0 {
		return nil, fmt.Errorf("go_types needs packages and api_packages")
	}
	return &goTypes{repos: repos, fam: fam, ref: ref, pkgs: map[string]*goPkg{},
		commit: map[string]string{}, dirs: map[string][]string{}}, nil
}

// locate maps an import path to (repository, directory in it).
func (g *goTypes) locate(importPath string) (repo, dir string, err error) {
	best := ""
	for prefix := range g.fam.GoTypes.Packages {
		if (importPath == prefix || strings.HasPrefix(importPath, prefix+"/")) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		return "", "", fmt.Errorf("no repository for package %s", importPath)
	}
	return g.fam.GoTypes.Packages[best], strings.TrimPrefix(strings.TrimPrefix(importPath, best), "/"), nil
}

func (g *goTypes) pkg(importPath string) (*goPkg, error) {
	if p := g.pkgs[importPath]; p != nil {
		return p, nil
	}
	repo, dir, err := g.locate(importPath)
	if err != nil {
		return nil, err
	}
	git := gitRepo{dir: filepath.Join(g.repos, repo)}
	if _, ok := g.commit[repo]; !ok {
		c, err := git.commit(g.ref)
		if err != nil {
			return nil, err
		}
		g.commit[repo] = c
	}
	out, err := git.run("ls-tree", "--name-only", g.ref, dir+"/")
	if err != nil {
		return nil, err
	}
	p := &goPkg{types: map[string]*ast.TypeSpec{}, docs: map[string]string{}, enums: map[string][]string{},
		imports: map[*ast.TypeSpec]map[string]string{}}
	fset := token.NewFileSet()
	for _, f := range strings.Fields(string(out)) {
		base := path.Base(f)
		if !strings.HasSuffix(base, ".go") || strings.HasSuffix(base, "_test.go") ||
			strings.HasPrefix(base, "zz_generated") || strings.HasPrefix(base, "generated") {
			continue
		}
		src, err := git.show(g.ref, f)
		if err != nil {
			return nil, err
		}
		file, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		p.addFile(file)
	}
	if len(p.types) == 0 {
		return nil, fmt.Errorf("package %s: no types in %s/%s at %s", importPath, repo, dir, g.ref)
	}
	g.pkgs[importPath] = p
	g.dirs[repo] = append(g.dirs[repo], dir)
	return p, nil
}

func (p *goPkg) addFile(file *ast.File) {
	imports := map[string]string{}
	for _, imp := range file.Imports {
		ip, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(ip)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = ip
	}
	for _, decl := range file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				p.types[s.Name.Name] = s
				p.docs[s.Name.Name] = gd.Doc.Text() + s.Doc.Text()
				p.imports[s] = imports
			case *ast.ValueSpec:
				t, ok := s.Type.(*ast.Ident)
				if gd.Tok != token.CONST || !ok {
					continue
				}
				for _, v := range s.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						val, _ := strconv.Unquote(lit.Value)
						p.enums[t.Name] = append(p.enums[t.Name], val)
					}
				}
			}
		}
	}
}

func (g *goTypes) sources() []manifests.Source {
	var out []manifests.Source
	for repo, dirs := range g.dirs {
		sort.Strings(dirs)
		out = append(out, manifests.Source{Repo: repo, Commit: g.commit[repo], Ref: g.ref, Path: strings.Join(dirs, ",")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Repo < out[j].Repo })
	return out
}

// kind builds the field list of one built-in kind.
func (g *goTypes) kind(apiVersion, kind string) (*manifests.Kind, []string, error) {
	ip, ok := g.fam.GoTypes.APIPackages[apiVersion]
	if !ok {
		return nil, nil, fmt.Errorf("no api_packages entry for %s", apiVersion)
	}
	w := &goWalk{g: g, k: manifests.NewKind(apiVersion, kind), stack: map[string]bool{}}
	if err := w.named(ip, kind, "", false); err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", apiVersion, kind, err)
	}
	for _, p := range []string{"apiVersion", "kind"} {
		w.k.Fields[p].Required = true // optional in Go (TypeMeta), required in a manifest
	}
	return w.k, w.order, nil
}

type goWalk struct {
	g     *goTypes
	k     *manifests.Kind
	order []string
	stack map[string]bool // named types being expanded, to stop on recursive types
}

func (w *goWalk) add(p string, f *manifests.Field) error {
	w.order = append(w.order, p)
	return w.k.AddField(p, f)
}

// named expands the named type ip.name at path p (p == "" is the document root).
func (w *goWalk) named(ip, name, p string, required bool) error {
	full := ip + "." + name
	if leaf, ok := w.g.fam.GoTypes.LeafTypes[full]; ok {
		return w.add(p, &manifests.Field{Type: manifests.Type(leaf), Required: required})
	}
	pkg, err := w.g.pkg(ip)
	if err != nil {
		return err
	}
	ts := pkg.types[name]
	if ts == nil {
		return fmt.Errorf("%s: type %s not found", p, full)
	}
	if w.stack[full] {
		return w.add(p, &manifests.Field{Type: manifests.Any, Required: required})
	}
	w.stack[full] = true
	defer delete(w.stack, full)
	switch t := ts.Type.(type) {
	case *ast.StructType:
		if p != "" {
			if err := w.add(p, &manifests.Field{Type: manifests.Object, Required: required}); err != nil {
				return err
			}
		}
		return w.fields(ip, pkg, ts, t, p)
	case *ast.Ident:
		f, err := w.scalar(t.Name, p, required)
		if err != nil {
			return err
		}
		if f.Type == manifests.String && hasMarker(pkg.docs[name], "+enum") {
			f.Enum = pkg.enums[name]
		}
		return w.add(p, f)
	default:
		return w.expr(ip, pkg, ts, ts.Type, p, required)
	}
}

// fields adds a struct's fields under p, flattening `json:",inline"` embedded structs.
func (w *goWalk) fields(ip string, pkg *goPkg, ts *ast.TypeSpec, st *ast.StructType, p string) error {
	for _, fld := range st.Fields.List {
		tag := ""
		if fld.Tag != nil {
			raw, _ := strconv.Unquote(fld.Tag.Value)
			tag = reflect.StructTag(raw).Get("json")
		}
		jname, opts, _ := strings.Cut(tag, ",")
		if jname == "-" {
			continue
		}
		if jname == "" && (len(fld.Names) == 0 || strings.Contains(opts, "inline")) {
			if err := w.inline(ip, pkg, ts, fld.Type, p); err != nil {
				return err
			}
			continue
		}
		if jname == "" {
			jname = fld.Names[0].Name
		}
		required := !strings.Contains(opts, "omitempty") && !hasMarker(fld.Doc.Text(), "+optional")
		cp := jname
		if p != "" {
			cp = p + "." + jname
		}
		if err := w.expr(ip, pkg, ts, fld.Type, cp, required); err != nil {
			return err
		}
	}
	return nil
}

// inline adds the fields of an embedded struct type at the embedding struct's path.
func (w *goWalk) inline(ip string, pkg *goPkg, ts *ast.TypeSpec, e ast.Expr, p string) error {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	tip, tname, err := w.resolve(ip, pkg, ts, e)
	if err != nil {
		return err
	}
	tpkg, err := w.g.pkg(tip)
	if err != nil {
		return err
	}
	its := tpkg.types[tname]
	if its == nil {
		return fmt.Errorf("%s: inline type %s.%s not found", p, tip, tname)
	}
	st, ok := its.Type.(*ast.StructType)
	if !ok {
		return fmt.Errorf("%s: inline type %s.%s is not a struct", p, tip, tname)
	}
	return w.fields(tip, tpkg, its, st, p)
}

// resolve names the type an identifier or selector refers to, from the file of ts.
func (w *goWalk) resolve(ip string, pkg *goPkg, ts *ast.TypeSpec, e ast.Expr) (string, string, error) {
	switch t := e.(type) {
	case *ast.Ident:
		return ip, t.Name, nil
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		if !ok {
			break
		}
		imp, ok := pkg.imports[ts][x.Name]
		if !ok {
			return "", "", fmt.Errorf("unknown import %s", x.Name)
		}
		return imp, t.Sel.Name, nil
	}
	return "", "", fmt.Errorf("unsupported type expression %T", e)
}

var basic = map[string]manifests.Type{
	"string": manifests.String, "bool": manifests.Boolean,
	"int": manifests.Integer, "int8": manifests.Integer, "int16": manifests.Integer,
	"int32": manifests.Integer, "int64": manifests.Integer, "uint": manifests.Integer,
	"uint8": manifests.Integer, "uint16": manifests.Integer, "uint32": manifests.Integer,
	"uint64": manifests.Integer, "float32": manifests.Number, "float64": manifests.Number,
}

func (w *goWalk) scalar(name, p string, required bool) (*manifests.Field, error) {
	t, ok := basic[name]
	if !ok {
		return nil, fmt.Errorf("%s: %s is not a basic type", p, name)
	}
	return &manifests.Field{Type: t, Required: required}, nil
}

// expr adds the field at p for a type expression appearing in ts's file.
func (w *goWalk) expr(ip string, pkg *goPkg, ts *ast.TypeSpec, e ast.Expr, p string, required bool) error {
	switch t := e.(type) {
	case *ast.StarExpr:
		return w.expr(ip, pkg, ts, t.X, p, required)
	case *ast.ArrayType:
		if id, ok := t.Elt.(*ast.Ident); ok && id.Name == "byte" {
			return w.add(p, &manifests.Field{Type: manifests.String, Required: required}) // base64
		}
		if err := w.add(p, &manifests.Field{Type: manifests.Array, Required: required}); err != nil {
			return err
		}
		return w.expr(ip, pkg, ts, t.Elt, p+"[]", false)
	case *ast.MapType:
		if err := w.add(p, &manifests.Field{Type: manifests.Map, Required: required}); err != nil {
			return err
		}
		return w.expr(ip, pkg, ts, t.Value, p+"{}", false)
	case *ast.InterfaceType:
		return w.add(p, &manifests.Field{Type: manifests.Any, Required: required})
	case *ast.Ident:
		if _, ok := basic[t.Name]; ok {
			f, err := w.scalar(t.Name, p, required)
			if err != nil {
				return err
			}
			return w.add(p, f)
		}
	}
	tip, tname, err := w.resolve(ip, pkg, ts, e)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return w.named(tip, tname, p, required)
}

// hasMarker reports whether a doc comment has a line that is exactly the marker, the way
// Kubernetes' generators read "+enum" and "+optional".
func hasMarker(doc, marker string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if strings.TrimSpace(line) == marker {
			return true
		}
	}
	return false
}
