package jsonraw

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

var validCases = []string{
	`{}`, `[]`, ` {"a" : [1, -2.5e+3, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"]} `, `"s"`, `0`, `-0.0`, `1E9`,
	`{"a":{"b":[[],{}]}}`, "{\"k\":\"\xff\xfe\"}", `[1,2,]`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `[01]`, `[1.]`, `[.5]`,
	`[-]`, `[1e]`, `[+1]`, `tru`, `nul`, `[true false]`, `{"a":"\u12"}`, `{"a":"\x"}`, "[\"a\x01\"]", `[`, `]`, `{"a":1}}`,
	`{"a":1} x`, ``, ` `, `"unterminated`, `"\`, `[1,[2,[3]]]`, `{"a":[}`, `[{]`, `{"a":"b\\"}`, `{"a":"b\\\"}`,
}

// TestValidMatchesGJSON is a differential test against gjson.Valid.
func TestValidMatchesGJSON(t *testing.T) {
	for _, s := range validCases {
		if got, want := Valid([]byte(s)), gjson.Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, gjson says %v", s, got, want)
		}
	}
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if !Valid([]byte(deep)) {
		t.Error("MaxDepth nesting rejected")
	}
	if Valid([]byte("[" + deep + "]")) {
		t.Error("nesting deeper than MaxDepth accepted")
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if strings.Count(string(b), "[")+strings.Count(string(b), "{") > MaxDepth {
			return
		}
		if got, want := Valid(b), gjson.ValidBytes(b); got != want {
			t.Fatalf("Valid(%q) = %v, gjson says %v", b, got, want)
		}
	})
}

func TestWalk(t *testing.T) {
	obj := []byte(` { "a" : 1 , "b\u0022c":"x,}]" , "n":{"d":[1,{"e":"]"}]}, "a": [2, 3] } `)
	v := Value(obj)
	if Kind(v) != Object {
		t.Fatalf("kind %c", Kind(v))
	}
	var keys []string
	for it := Members(v); ; {
		k, val, ok := it.Next()
		if !ok {
			break
		}
		keys = append(keys, string(k)+"="+string(val))
	}
	want := `a=1|b\u0022c="x,}]"|n={"d":[1,{"e":"]"}]}|a=[2, 3]`
	if got := strings.Join(keys, "|"); got != want {
		t.Errorf("members %s\nwant    %s", got, want)
	}
	if got := string(Field(v, "a")); got != "[2, 3]" {
		t.Errorf("Field(a) = %s, want the last a", got)
	}
	if got := string(Field(v, `b"c`)); got != `"x,}]"` {
		t.Errorf("Field(b\"c) = %s", got)
	}
	if Field(v, "zz") != nil || Field([]byte(`[1]`), "a") != nil {
		t.Error("Field of a missing key or a non-object")
	}
	if n := Len(Field(v, "a")); n != 2 {
		t.Errorf("Len = %d", n)
	}
	if Len([]byte(`[]`)) != 0 || Len([]byte(`"x"`)) != 0 {
		t.Error("Len of empty array or non-array")
	}
	if string(Str([]byte(`"ab\n"`))) != `ab\n` || Str([]byte(`5`)) != nil {
		t.Error("Str")
	}
}

func TestKeyIs(t *testing.T) {
	for _, tt := range []struct {
		raw, name string
		want      bool
	}{
		{"role", "role", true}, {"rol", "role", false}, {`r\u006fle`, "role", true}, {`r\u006fles`, "role", false},
		{`caf\u00e9`, "café", true}, {`\ud83d\ude00`, "😀", true}, {`a\"b`, `a"b`, true}, {`\u00e`, "x", false}, {"", "", true},
	} {
		if got := KeyIs([]byte(tt.raw), tt.name); got != tt.want {
			t.Errorf("KeyIs(%q, %q) = %v", tt.raw, tt.name, got)
		}
	}
}

func TestCodePoints(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want int
	}{
		{"", 0}, {"abc", 3}, {"日本語", 3}, {`\n\t\"`, 3}, {`\u00e9\ud83d\ude00`, 2}, {`\ud83d`, 1}, {"😀😀😀😀😀😀😀😀x", 9},
		{"\xff\xfe", 2}, {`\`, 1}, {"long ascii text past eight bytes é", 34},
	} {
		if got := CodePoints([]byte(tt.raw)); got != tt.want {
			t.Errorf("CodePoints(%q) = %d, want %d", tt.raw, got, tt.want)
		}
	}
}

// FuzzCodePoints checks CodePoints against utf8.RuneCount on valid UTF-8
// without escapes, and that it never panics.
func FuzzCodePoints(f *testing.F) {
	for _, s := range []string{"abc", "日本語 text", `a\u00e9\n`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := CodePoints(b)
		if n < 0 || n > len(b) {
			t.Fatalf("CodePoints = %d for %d bytes", n, len(b))
		}
		if utf8.Valid(b) && !strings.Contains(string(b), `\`) {
			if want := utf8.RuneCount(b); n != want {
				t.Fatalf("CodePoints(%q) = %d, want %d", b, n, want)
			}
		}
	})
}
