// Command apicheck validates Envoy configuration documents with Envoy's own API types
// (github.com/envoyproxy/go-control-plane/envoy): each document is decoded with strict
// protojson (an unknown field, a wrong value type or an unknown enum value fails), then
// ValidateAll() runs on the message and, recursively, on every google.protobuf.Any inside
// it once unpacked, which is what Envoy does when it loads a config (the protoc-gen-validate
// rules: required fields, string lengths, ranges).
//
// It is its own module so the API version is a choice of go.mod: go.mod pins the newest
// go-control-plane/envoy the module proxy serves, envoy-1.35.mod the oldest Envoy pdroute
// documents (run with -modfile=envoy-1.35.mod). The pdroute module's test
// e2e/envoy/manifests (TestEnvoyAPI) collects the shipped configs and runs both.
//
// Input on stdin: a JSON array of {"name", "type", "value", "base"}, type a fully-qualified
// message name ("envoy.config.bootstrap.v3.Bootstrap"), value its protojson form. When base
// is set (same type), value is merged into it with proto.Merge, as Istio applies an
// EnvoyFilter MERGE patch to the resource it generated, and the result is validated. Output on stdout:
// one JSON object {"version", "checked": [{"name","anys"}], "problems": ["name: ..."]}.
// The exit status is 0 whenever the input could be read, problems or not.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	// The messages pdroute's configs use, directly or inside an Any. A type missing here
	// is reported ("not linked"), never skipped: add its package.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"
)

type input struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
	Base  json.RawMessage `json:"base,omitempty"`
}

type checked struct {
	Name string   `json:"name"`
	Anys []string `json:"anys"` // the type URLs of the Any messages validated inside it
}

type output struct {
	Version  string    `json:"version"` // go-control-plane/envoy's module version
	Checked  []checked `json:"checked"`
	Problems []string  `json:"problems"`
}

func main() {
	var in []input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck: reading stdin:", err)
		os.Exit(2)
	}
	out := output{Version: moduleVersion(), Checked: []checked{}, Problems: []string{}}
	for _, d := range in {
		anys, problems := check(d.Type, d.Value, d.Base)
		for _, p := range problems {
			out.Problems = append(out.Problems, d.Name+": "+p)
		}
		out.Checked = append(out.Checked, checked{Name: d.Name, Anys: anys})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
}

// check decodes value as the message typeName (merged into base when base is set) and
// validates it; it returns the type URLs of the Anys it validated inside it, and the
// problems found.
func check(typeName string, value, base []byte) (anys, problems []string) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typeName))
	if err != nil {
		return nil, []string{fmt.Sprintf("type %s is not linked into apicheck (add its package to main.go): %v", typeName, err)}
	}
	m := mt.New().Interface()
	// Strict: DiscardUnknown false. Any values resolve through the global registry, so an
	// Any of a type not linked in fails here too.
	if err := (protojson.UnmarshalOptions{}).Unmarshal(value, m); err != nil {
		return nil, []string{"protojson: " + err.Error()}
	}
	if len(base) > 0 {
		b := mt.New().Interface()
		if err := (protojson.UnmarshalOptions{}).Unmarshal(base, b); err != nil {
			return nil, []string{"protojson (base): " + err.Error()}
		}
		if err := mergeTypedConfig(b, m); err != nil {
			return nil, []string{err.Error()}
		}
		proto.Merge(b, m)
		m = b
	}
	v := &validator{}
	v.validate(m, typeName)
	return v.anys, v.problems
}

type validator struct {
	anys, problems []string
}

// validate runs m's ValidateAll (when its type has rules) and then recurses into every Any
// below m: protoc-gen-validate's ValidateAll does not look inside an Any.
func (v *validator) validate(m proto.Message, at string) {
	if va, ok := m.(interface{ ValidateAll() error }); ok {
		if err := va.ValidateAll(); err != nil {
			v.problems = append(v.problems, at+": "+err.Error())
		}
	}
	v.walk(m.ProtoReflect(), at)
}

func (v *validator) walk(m protoreflect.Message, at string) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			v.problems = append(v.problems, fmt.Sprintf("%s: Any %s: %v", at, a.GetTypeUrl(), err))
			return
		}
		v.anys = append(v.anys, a.GetTypeUrl())
		v.validate(inner, at+"("+strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/")+")")
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		fat := at + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := val.List()
			for i := 0; i < l.Len(); i++ {
				v.walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", fat, i))
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				v.walk(mv.Message(), fmt.Sprintf("%s[%v]", fat, k.Interface()))
				return true
			})
		default:
			v.walk(val.Message(), fat)
		}
		return true
	})
}

// moduleVersion is the go-control-plane/envoy version this binary was built with.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/envoyproxy/go-control-plane/envoy" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// mergeTypedConfig merges value's typed_config into base's when both hold the same type,
// as Istio does for a NETWORK_FILTER or HTTP_FILTER MERGE (util.MergeAnyWithAny): a plain
// proto.Merge would replace the Any's bytes. value's typed_config is then cleared so the
// proto.Merge that follows keeps the merged one.
func mergeTypedConfig(base, value proto.Message) error {
	bf := base.ProtoReflect().Descriptor().Fields().ByName("typed_config")
	if bf == nil || bf.Message() == nil || bf.Message().FullName() != "google.protobuf.Any" {
		return nil
	}
	bm, vm := base.ProtoReflect(), value.ProtoReflect()
	if !bm.Has(bf) || !vm.Has(bf) {
		return nil
	}
	ba, va := bm.Get(bf).Message().Interface().(*anypb.Any), vm.Get(bf).Message().Interface().(*anypb.Any)
	if ba.GetTypeUrl() != va.GetTypeUrl() {
		return nil
	}
	bi, err := ba.UnmarshalNew()
	if err != nil {
		return err
	}
	vi, err := va.UnmarshalNew()
	if err != nil {
		return err
	}
	proto.Merge(bi, vi)
	merged, err := anypb.New(bi)
	if err != nil {
		return err
	}
	bm.Set(bf, protoreflect.ValueOfMessage(merged.ProtoReflect()))
	vm.Clear(bf)
	return nil
}
