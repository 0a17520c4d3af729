package jsonraw

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func renderPython(raw string) string { return string(AppendPython(nil, []byte(raw))) }

// TestRenderPython checks the rendering against what Python's
// json.dumps(json.loads(raw), ensure_ascii=False) prints.
func TestRenderPython(t *testing.T) {
	for _, tt := range []struct{ raw, want string }{
		{`{"a":1,"b":[true,null,-2.5e3]}`, `{"a": 1, "b": [true, null, -2.5e3]}`},
		{"{ \"a\" :\t[ 1 ,\n 2 ] }", `{"a": [1, 2]}`},
		{`{"d":"x\u003cy\u0026z\/w>"}`, `{"d": "x<y&z/w>"}`},
		{`"\u4f60\u597d, \u4E16\u754C"`, `"你好, 世界"`},
		{`"\ud83d\ude00!"`, `"😀!"`},
		{`"\u0022\u005c\u000a\u0009\u0001\u001F"`, `"\"\\\n\t\u0001\u001f"`},
		{`"\"\\\n\r\t\b\f"`, `"\"\\\n\r\t\b\f"`},
		{`"\ud83d lone, \udc00 too"`, `"\ud83d lone, \udc00 too"`},
		{`"a, b: c"`, `"a, b: c"`},
		{`[]`, `[]`}, {`""`, `""`}, {`{"k\u00e9y":"v"}`, `{"kéy": "v"}`}, {`"\ufffd"`, `"�"`},
	} {
		if got := renderPython(tt.raw); got != tt.want {
			t.Errorf("RenderPython(%s) = %s, want %s", tt.raw, got, tt.want)
		}
	}
}

// FuzzRenderPython checks that the rendering of any valid JSON value is
// valid JSON of the same value, holds no \u escape but those of control
// characters and lone surrogates, and renders to itself.
func FuzzRenderPython(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x\u003c\/y",{"b":null}]}`, `"\ud83d\ude00\ud83d \u0001\u00e9"`, " [ 1 , \"a\\\"b\" ] "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want any
		if json.Unmarshal(b, &want) != nil {
			return
		}
		got := renderPython(string(b))
		var back any
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Fatalf("RenderPython(%q) = %q: %v", b, got, err)
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("RenderPython(%q) = %q, which decodes to %v, not %v", b, got, back, want)
		}
		for i := strings.Index(got, `\u`); i >= 0; i = strings.Index(got, `\u`) {
			if bs := len(got[:i]) - len(strings.TrimRight(got[:i], `\`)); bs%2 == 0 {
				if r, n := DecodeEscape([]byte(got[i:])); n != 0 && r >= 0x20 && r != 0xFFFD || strings.HasPrefix(strings.ToLower(got[i:]), `\ufffd`) {
					t.Fatalf("RenderPython(%q) = %q keeps the escape of %q", b, got, r)
				}
			}
			got = got[i+2:]
		}
		if again := renderPython(renderPython(string(b))); again != renderPython(string(b)) {
			t.Fatalf("RenderPython is not idempotent on %q: %q then %q", b, renderPython(string(b)), again)
		}
	})
}

// TestRendererParts checks that Fill's parts, whatever the buffer's
// length, add up to the rendering and split no character: decoded part by
// part, they give the characters (and the stray bytes) the whole rendering
// gives.
func TestRendererParts(t *testing.T) {
	pad := strings.Repeat("a", 40)
	for _, raw := range []string{
		`{"a":1,"b":[true,null,-2.5e3]}`,
		`{"k": "` + pad + `\u00e9\u4e2d\ud83d\ude00 x", "l": "é中😀` + pad + `é中😀"}`,
		`["` + pad + `", "\u00e9", 1, "` + "\xe4\xb8" + `\u00ad` + "\xad" + `", "\/\n\u0001"]`,
		"[\"" + strings.Repeat("\xe4\xb8\xad\x80\x80\x80\x80\xf0\x9f\x98", 20) + "\"]",
		`"` + strings.Repeat(`ß\"\\ \u0041`, 30) + `"`,
	} {
		if !Valid([]byte(raw)) {
			t.Fatalf("%q is not valid JSON", raw)
		}
		checkRendererParts(t, []byte(raw))
	}
}

func FuzzRendererParts(f *testing.F) {
	f.Add([]byte(`{"k": "` + strings.Repeat("é中😀 ", 20) + `\u00e9"}`))
	f.Add([]byte("[\"\xe4\xb8\xad\x80\x80\x80\x80\xf0\x9f\x98\", 1]"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !Valid(raw) {
			AppendPython(nil, raw) // meaningless, but neither a panic nor a loop
			return
		}
		checkRendererParts(t, raw)
	})
}

func checkRendererParts(t *testing.T, raw []byte) {
	t.Helper()
	whole := AppendPython(nil, raw)
	want := decodeAll(whole)
	for size := MinFill; size <= 80; size++ {
		var got []rune
		var all []byte
		buf := make([]byte, size)
		r := NewRenderer(raw)
		for n := r.Fill(buf); n > 0; n = r.Fill(buf) {
			got = append(got, decodeAll(buf[:n])...)
			all = append(all, buf[:n]...)
		}
		if string(all) != string(whole) {
			t.Fatalf("%q in parts of %d: %q, want %q", raw, size, all, whole)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q in parts of %d splits a character", raw, size)
		}
	}
}

// decodeAll decodes b as UTF-8, a stray byte as -1 (not as U+FFFD, which
// may also be there as a character).
func decodeAll(b []byte) []rune {
	var out []rune
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			r = -1
		}
		out = append(out, r)
		b = b[n:]
	}
	return out
}
