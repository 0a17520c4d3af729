package connector

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/tokenest"
)

func TestParseObjectErrors(t *testing.T) {
	deep := func(n int) string {
		return `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
	}
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", ``, ErrNotJSON},
		{"spaces", " \n\t", ErrNotJSON},
		{"array", `[1,2]`, ErrNotObject},
		{"string", `"x"`, ErrNotObject},
		{"garbage", `hello`, ErrNotJSON},
		{"unterminated", `{"a":1`, ErrNotJSON},
		{"unterminated string", `{"a":"x}`, ErrNotJSON},
		{"trailing garbage", `{"a":1} x`, ErrNotJSON},
		{"two objects", `{}{}`, ErrNotJSON},
		{"missing colon", `{"a" 1}`, ErrNotJSON},
		{"bad literal", `{"a":tru}`, ErrNotJSON},
		{"bad number", `{"a":01}`, ErrNotJSON},
		{"trailing comma", `{"a":1,}`, ErrNotJSON},
		{"bad escape", `{"a":"\q"}`, ErrNotJSON},
		{"control char in string", "{\"a\":\"\x01\"}", ErrNotJSON},
		{"unbalanced", `{"a":[1}`, ErrNotJSON},
		{"too deep", deep(maxDepth), ErrTooDeep},
		{"deep but allowed", deep(maxDepth - 1), nil},
		{"empty object", ` {} `, nil},
		{"escaped quotes", `{"a":"x\\\"y\\\\","b\"":"\\\\"}`, nil},
		{"bom is not JSON", "\xef\xbb\xbf{}", ErrNotJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseObject([]byte(tt.in))
			if !errors.Is(err, tt.want) {
				t.Errorf("ParseObject(%.40q) = %v, want %v", tt.in, err, tt.want)
			}
		})
	}
}

func TestObjectReads(t *testing.T) {
	in := []byte(` { "a" : 1 , "s":"x\"y" ,"a":[1, 2] ,"k\u0065y":true, "n":null, "o":{"a":3}}`)
	o, err := ParseObject(in)
	if err != nil {
		t.Fatal(err)
	}
	if o.Len() != 6 {
		t.Errorf("Len = %d, want 6", o.Len())
	}
	tests := []struct{ key, raw string }{
		{"a", `[1, 2]`}, // the last duplicate, as Python keeps
		{"s", `"x\"y"`},
		{"key", `true`}, // escaped key decoded
		{"n", `null`},
		{"o", `{"a":3}`},
		{"missing", ``},
	}
	for _, tt := range tests {
		if got := o.Raw(tt.key); string(got) != tt.raw {
			t.Errorf("Raw(%q) = %q, want %q", tt.key, got, tt.raw)
		}
	}
	if raw := o.Raw("s"); &raw[0] != &in[bytes.Index(in, []byte(`"x\"y"`))] {
		t.Error("Raw copied instead of aliasing the input")
	}
	if o.Get("s").Str != `x"y` || o.Get("a").Get("#").Int() != 2 || o.Get("missing").Exists() {
		t.Error("Get")
	}
	w, removed := o.Without("a", "nothing")
	if !removed || w.Raw("a") != nil || w.Len() != 4 || o.Raw("a") == nil {
		t.Errorf("Without: removed=%v len=%d; the original must be unchanged", removed, w.Len())
	}
	if _, removed := o.Without("nothing"); removed {
		t.Error("Without reported a removal of an absent key")
	}
	only := o.Only("s", "o")
	if string(only.Build()) != `{"s":"x\"y","o":{"a":3}}` {
		t.Errorf("Only+Build = %s", only.Build())
	}
}

func TestBuildAndRewrite(t *testing.T) {
	const in = `{"model":"m", "prompt":"long prompt", "stream":true,"max_tokens":9}` + "\n"
	tests := []struct {
		name       string
		in         string
		without    []string
		edits      []Edit
		build      string
		edit       string
		drainShort bool // the edit leaves some of the body in Envoy's buffer
	}{
		{
			name:  "no edits",
			in:    in,
			build: `{"model":"m","prompt":"long prompt","stream":true,"max_tokens":9}`,
			edit:  in,
		},
		{
			name:       "insert only: a prefix in front of an untouched body",
			in:         in,
			edits:      []Edit{Set("kv", []byte(`{"x":1}`))},
			build:      `{"model":"m","prompt":"long prompt","stream":true,"max_tokens":9,"kv":{"x":1}}`,
			edit:       `{"kv":{"x":1},"model":"m", "prompt":"long prompt", "stream":true,"max_tokens":9}` + "\n",
			drainShort: true,
		},
		{
			name:       "replace the first member",
			in:         in,
			edits:      []Edit{SetString("model", `q"`)},
			build:      `{"model":"q\"","prompt":"long prompt","stream":true,"max_tokens":9}`,
			edit:       `{"model":"q\"","prompt":"long prompt", "stream":true,"max_tokens":9}` + "\n",
			drainShort: true,
		},
		{
			name:  "replace, delete and add",
			in:    in,
			edits: []Edit{Set("stream", jsonFalse), Delete("max_tokens"), SetInt("n", -3), Delete("absent")},
			build: `{"model":"m","prompt":"long prompt","stream":false,"n":-3}`,
			edit:  `{"model":"m","prompt":"long prompt","stream":false,"n":-3}` + "\n",
		},
		{
			name:       "removed first member",
			in:         `{"kv_transfer_params":{"remote_host":"6.6.6.6"},"model":"m","prompt":"p"}`,
			without:    []string{"kv_transfer_params"},
			build:      `{"model":"m","prompt":"p"}`,
			edit:       `{"model":"m","prompt":"p"}`,
			drainShort: true,
		},
		{
			name:    "removed only member",
			in:      `{"bootstrap_room":1}`,
			without: []string{"bootstrap_room"},
			edits:   []Edit{SetInt("bootstrap_room", 5)},
			build:   `{"bootstrap_room":5}`,
			edit:    `{"bootstrap_room":5}`,
		},
		{
			name:  "empty object",
			in:    ` {  } `,
			edits: []Edit{Set("a", []byte("true"))},
			build: `{"a":true}`,
			edit:  `{"a":true} `,
		},
		{
			name:       "duplicate keys: first written, later dropped",
			in:         `{"stream":true,"x":1,"stream":false,"x":2}`,
			edits:      []Edit{Set("stream", jsonNull)},
			build:      `{"stream":null,"x":1,"x":2}`,
			edit:       `{"stream":null,"x":1,"x":2}`,
			drainShort: true,
		},
		{
			name:  "repeated edit key: the first edit wins",
			in:    `{}`,
			edits: []Edit{SetInt("a", 1), SetInt("a", 2)},
			build: `{"a":1}`,
			edit:  `{"a":1}`,
		},
		{
			name:       "escaped key matches its decoded name",
			in:         `{"kv_transfer_param\u0073":{"remote_host":"6.6.6.6"},"model":"m"}`,
			without:    []string{"kv_transfer_params"},
			build:      `{"model":"m"}`,
			edit:       `{"model":"m"}`,
			drainShort: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseObject([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if tt.without != nil {
				o, _ = o.Without(tt.without...)
			}
			if got := o.Build(tt.edits...); string(got) != tt.build {
				t.Errorf("Build = %s\n want %s", got, tt.build)
			}
			e := o.Rewrite(tt.edits...)
			got := e.Apply([]byte(tt.in))
			if string(got) != tt.edit {
				t.Errorf("Rewrite.Apply = %q\n           want %q", got, tt.edit)
			}
			if e.Len(len(tt.in)) != len(got) {
				t.Errorf("Len = %d, want %d", e.Len(len(tt.in)), len(got))
			}
			if tt.drainShort != (e.Drain > 0 && e.Drain < len(tt.in)-2) {
				t.Errorf("Drain = %d of %d (prefix %q)", e.Drain, len(tt.in), e.Prefix)
			}
			if !gjson.Valid(string(got)) {
				t.Errorf("edited body is not valid JSON: %s", got)
			}
		})
	}
}

func TestDirectIsNoopUnlessSanitised(t *testing.T) {
	clean, err := NewRequest(0, []byte(`{"model":"m","prompt":"p"}`))
	if err != nil {
		t.Fatal(err)
	}
	if e := clean.Direct(); e.Drain != 0 || e.Prefix != nil || clean.Removed {
		t.Errorf("clean request: %+v removed=%v", e, clean.Removed)
	}
	in := []byte(`{"model":"m","prompt":"p","bootstrap_host":"6.6.6.6"}`)
	dirty, _ := NewRequest(0, in)
	if !dirty.Removed || string(dirty.Direct().Apply(in)) != `{"model":"m","prompt":"p"}` {
		t.Errorf("dirty request: removed=%v body=%s", dirty.Removed, dirty.Direct().Apply(in))
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct {
		in      string
		out     string
		removed bool
	}{
		{`{"model":"m"}`, `{"model":"m"}`, false},
		{`{"kv_transfer_params":null,"model":"m"}`, `{"model":"m"}`, true},
		{`{"disagg_spec":{},"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":2,"bootstrap_pair_key":"k","disagg_prefill_resp":{}}`, `{}`, true},
		{`{"kv_transfer_params":1,"kv_transfer_params":2}`, `{}`, true},
		{`{"Kv_Transfer_Params":1}`, `{"Kv_Transfer_Params":1}`, false}, // engines match keys exactly
		{`{"messages":[{"kv_transfer_params":1}]}`, `{"messages":[{"kv_transfer_params":1}]}`, false},
		{`{"bootstrap_\u0072oom":5}`, `{}`, true},
	}
	for _, tt := range tests {
		r, err := NewRequest(0, []byte(tt.in))
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if got := r.Body.Build(); string(got) != tt.out || r.Removed != tt.removed {
			t.Errorf("sanitise %s = %s (removed %v), want %s (%v)", tt.in, got, r.Removed, tt.out, tt.removed)
		}
	}
	if _, err := NewRequest(0, []byte(`[]`)); !errors.Is(err, ErrNotObject) {
		t.Errorf("array body: %v", err)
	}
}

func TestWithElem(t *testing.T) {
	tests := map[string]string{
		`[1,2,3]`:   `[1,2,3,9]`,
		`[ 1 , 2 ]`: `[ 1 , 2,9]`,
		"[1,\n2\n]": "[1,\n2,9]",
		`[]`:        `[9]`,
		`[ ]`:       `[9]`,
	}
	for in, want := range tests {
		head, tail := withElem([]byte(in), 9)
		if got := string(head) + string(tail); got != want {
			t.Errorf("withElem(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzObject checks, for any body, that parsing never panics, and that for
// an accepted one Build and Rewrite agree on the members and always produce a
// valid object without the control fields.
func FuzzObject(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"kv_transfer_params":{"a":1},"prompt":[1,2,3],"kv_transfer_params":2}`,
		`{"a":"\"}\\","b":[{"c":"]"}]}`, `{}`, ` {"x" : 1 } `, `[1]`, `{"a":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewRequest(0, b)
		if err != nil {
			if gjson.ValidBytes(b) && gjson.ParseBytes(b).IsObject() && !errors.Is(err, ErrTooDeep) {
				t.Fatalf("valid object rejected: %v", err)
			}
			return
		}
		built := r.Body.Build(Set("stream", jsonFalse), Delete("n"))
		edited := r.Body.Rewrite(Set("stream", jsonFalse), Delete("n")).Apply(b)
		for _, out := range [][]byte{built, edited} {
			o, err := ParseObject(out)
			if err != nil {
				t.Fatalf("output %q of %q: %v", out, b, err)
			}
			for _, k := range controlFields {
				if o.Raw(k) != nil {
					t.Fatalf("control field %s survived in %q", k, out)
				}
			}
			if string(o.Raw("stream")) != "false" || o.Raw("n") != nil {
				t.Fatalf("edits not applied: %q", out)
			}
		}
		// Both forms hold the same members in the same order, apart from
		// where the added member goes.
		ob, _ := ParseObject(built)
		oe, _ := ParseObject(edited)
		if ob.Len() != oe.Len() {
			t.Fatalf("Build has %d members, Rewrite %d:\n%s\n%s", ob.Len(), oe.Len(), built, edited)
		}
	})
}

// FuzzParseObjectReaders checks that ParseObject's one pass (tokenest's
// reader) accepts exactly the bodies scanObject and gjson accept, with the
// same members.
func FuzzParseObjectReaders(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"kv_transfer_params":{"a":1},"prompt":[1,2,3],"kv_transfer_params":2}`,
		`{"a":"\"}\\","b":[{"c":"]"}]}`, `{}`, ` {"x" : 1 } `, `[1]`, `{"a":`, `{"a":01}`, `{"a":1.}`,
		`{"a":"\u00e9\ud83d"}`, `{"a":tru}`, `{"a":[1,]}`, `{"a":1}x`, "{\"a\":\"\x01\"}", `{"a\"b":-0.5e+3}`,
		`{"a":` + strings.Repeat("[", 511) + strings.Repeat("]", 511) + `}`,
		`{"a":` + strings.Repeat("[", 512) + strings.Repeat("]", 512) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var x tokenest.Index
		read := x.Read(b)
		o, err := scanParse(b)
		if read != (err == nil) {
			t.Fatalf("%q: tokenest's reader says %v, scanObject and gjson %v", b, read, err)
		}
		if !read {
			return
		}
		if fast := indexedObject(b, &x); fast.close != o.close || !slices.Equal(fast.members, o.members) {
			t.Fatalf("%q: members %+v (close %d), want %+v (close %d)", b, fast.members, fast.close, o.members, o.close)
		}
	})
}

// appendKey writes every key as gjson.AppendJSONString does.
func TestAppendKey(t *testing.T) {
	keys := []string{"", "kv_transfer_params", "a b", "é", "\u2028", "a<b", `q"`, `\`, "\x7f", "\xff"}
	for c := range 256 {
		keys = append(keys, string([]byte{byte(c)}), "k"+string([]byte{byte(c)}))
	}
	for _, k := range keys {
		if got, want := appendKey([]byte("x"), k), gjson.AppendJSONString([]byte("x"), k); string(got) != string(want) {
			t.Errorf("appendKey(%q) = %q, want %q", k, got, want)
		}
	}
}
