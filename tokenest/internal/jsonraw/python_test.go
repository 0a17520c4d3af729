package jsonraw

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func renderPython(raw string) string {
	var b strings.Builder
	RenderPython([]byte(raw), func(p []byte) { b.Write(p) }, func(r rune) { b.WriteRune(r) })
	return b.String()
}

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
