package jsonraw

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
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
	// integer runs (skipIntegers): block id lists and their near misses
	`[1,2,30,455]`, `[0,1,2,0,3]`, `[12,01,3]`, `[1,2,3.5,4]`, `[1,2,3e2]`, `[1,2,]`, `[1,2,-3]`, `[1,,2]`, `[1 ,2, 3]`,
	`{"a":1,2}`, `{"a":[1,2],"b":3}`, `[[1,2],[3,4]]`, `[1,2`, `[1,2}`, `1,2`, `[9,9,9a]`,
	`[1234,1235,1236,1237,1238,1239,1240,1241,1242,1243]`, `[1234,1235,1236,01237,1238,1239,1240,1241]`,
	`[1234,1235,1236,1237,,1238,1239,1240,1241]`, `[1234,1235,1236,1237,0,1238,1239,1240,1241]`,
	`[12345678,12345678901234567,1,1,1,1,1,1,1,1,1]`, `[1,1,1,1,1,1,1,1,1,1,1.5,1,1,1,1,1,1,1]`,
	`[1,1,1,1,1,1,1,1,1,1,1e5,1,1,1,1,1,1,1]`, `[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1`, `[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,]`,
	`[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,-1]`, `[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 1]`, `{"a":1,1,1,1,1,1,1,1,1,1,1}`,
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

// TestValidMutations compares Valid with gjson.Valid on integer runs and
// short strings with one byte replaced at every offset, so that each word
// boundary of the eight-byte readers (integerWords, Skip's short strings)
// meets every kind of byte.
func TestValidMutations(t *testing.T) {
	bases := []string{
		`[1,22,333,4444,55555,1,22,333,4444,55555,1,22,333,4444,55555,7]`,
		`{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"b":[100,200,300,400,500,600]}`,
		`{"abcdefghijklmno":"abcdefghijklmnop","":"","k":"abcdefg","kk":[12,"xyz",true]}`,
	}
	for _, base := range bases {
		for at := range len(base) {
			for _, c := range []byte("0 ,-.eE]}x\\\"\x01:5") {
				b := []byte(base)
				b[at] = c
				if got, want := Valid(b), gjson.ValidBytes(b); got != want {
					t.Errorf("Valid(%q) = %v, gjson says %v", b, got, want)
				}
			}
		}
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
		{`caf\u00e9`, "café", true}, {`\ud83d\ude00`, "😀", true}, {`a\"b`, `a"b`, true}, {`\u00e`, "x", false}, {"", "", true}, {`r\xle`, "rxle", false},
	} {
		if got := KeyIs([]byte(tt.raw), tt.name); got != tt.want {
			t.Errorf("KeyIs(%q, %q) = %v", tt.raw, tt.name, got)
		}
	}
}

func TestCountString(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want int // -1: not a valid JSON string
	}{
		{"", 0}, {"abc", 3}, {"日本語", 3}, {`\n\t\"`, 3}, {`\u00e9\ud83d\ude00`, 2}, {`\ud83d`, 1}, {`\ud83d\u0041`, 2},
		{"😀😀😀😀😀😀😀😀x", 9}, {"\xff\xfe", 2}, {"long ascii text past eight bytes é", 34}, {`eight by\\tes \/ more`, 19},
		{`\`, -1}, {"tab\tinside", -1}, {`\x41`, -1}, {`\u12`, -1}, {`\u12g4 long enough`, -1}, {"ctl \x01 later in a long string", -1},
		{"日本", 2}, {"é", 1}, {"a\x01", -1}, {`a\"`, 2}, {"seven!!", 7}, {"eight!!!", 8},
	} {
		// alone, and followed by more of a body (short strings take a
		// shortcut when eight bytes follow the opening quote; an invalid
		// string could become valid with more, so those go alone)
		rests := []string{"", `, "next": [1, 2, 3]}`}
		if tt.want < 0 {
			rests = rests[:1]
		}
		for _, rest := range rests {
			quoted := []byte(`"` + tt.raw + `"` + rest)
			end, n := CountString(quoted, 0)
			if tt.want < 0 {
				if end != -1 {
					t.Errorf("CountString(%q) = %d, %d; want -1 (invalid)", quoted, end, n)
				}
				continue
			}
			if end != len(quoted)-len(rest) || n != tt.want {
				t.Errorf("CountString(%q) = %d, %d; want %d, %d", quoted, end, n, len(quoted)-len(rest), tt.want)
			}
		}
	}
}

func TestSkipDepth(t *testing.T) {
	v := []byte(`[[1],{"a":[]}]`) // three levels
	if got := Skip(v, 0, MaxDepth-3); got != len(v) {
		t.Errorf("Skip at depth %d = %d, want %d", MaxDepth-3, got, len(v))
	}
	if got := Skip(v, 0, MaxDepth-2); got != -1 {
		t.Errorf("Skip at depth %d = %d, want -1 (too deep)", MaxDepth-2, got)
	}
	if got := Skip([]byte(`12, 3`), 0, 0); got != 2 {
		t.Errorf("Skip of a number = %d, want 2", got)
	}
}

// FuzzCountString checks CountString and SkipString against encoding/json
// (which strings are valid) and utf8.RuneCount (the count, for valid UTF-8:
// Python's len() of the decoded string).
func FuzzCountString(f *testing.F) {
	for _, s := range []string{"abc", "日本語 text", `a\u00e9\n`, "\xff", `\ud83d\ude00 and \ud83d alone`, `\"quoted\" \\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		quoted := append(append([]byte{'"'}, b...), '"')
		end, n := CountString(quoted, 0)
		if skip := SkipString(quoted, 0); skip != end {
			t.Fatalf("SkipString(%q) = %d, CountString %d", quoted, skip, end)
		}
		var s string
		valid := json.Unmarshal(quoted, &s) == nil
		if valid != (end == len(quoted)) {
			t.Fatalf("CountString(%q) ends at %d of %d; encoding/json valid: %v", quoted, end, len(quoted), valid)
		}
		if _, extra := SkipStringExtra(quoted, 0); valid && len(b)-extra != decodedLength(b) {
			t.Fatalf("SkipStringExtra(%q): %d extra bytes, want %d", quoted, extra, len(b)-decodedLength(b))
		}
		if valid && utf8.Valid(b) {
			if want := utf8.RuneCountInString(s); n != want {
				t.Fatalf("CountString(%q) = %d characters, want %d", quoted, n, want)
			}
		}
		// A valid string followed by more of a body: the same end and
		// count (an invalid one may become valid, or end elsewhere).
		if e, c := CountString(append(quoted[:len(quoted):len(quoted)], `,"k":1}`...), 0); end >= 0 && (e != end || c != n) {
			t.Fatalf("CountString(%q) = %d, %d, followed by more: %d, %d", quoted, end, n, e, c)
		}
		// The input after a stretch of plain text and repeated.
		long := append(bytes.Repeat([]byte("x"), 61), bytes.Repeat(b, 3)...)
		quoted = append(append([]byte{'"'}, long...), '"')
		end, n = CountString(quoted, 0)
		if skip := SkipString(quoted, 0); skip != end {
			t.Fatalf("SkipString(%q) = %d, CountString %d", quoted, skip, end)
		}
		if valid := json.Unmarshal(quoted, &s) == nil; valid != (end == len(quoted)) {
			t.Fatalf("CountString(%q) ends at %d of %d; encoding/json valid: %v", quoted, end, len(quoted), valid)
		}
	})
}

// decodedLength is the length of a valid JSON string's raw bytes b with
// each \u escape (a surrogate pair as one) written as the UTF-8 bytes of
// its character, byte by byte: what SkipStringExtra's extra takes off.
func decodedLength(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		if b[i] != '\\' {
			n, i = n+1, i+1
			continue
		}
		if Escape(b[i+1]) != 0 {
			n, i = n+2, i+2
			continue
		}
		r, w := DecodeEscape(b[i:])
		n, i = n+utf8.RuneLen(r), i+w
	}
	return n
}

// TestWordMasks checks the eight-byte helpers of CountString on every byte
// value and every mask of high bits.
func TestWordMasks(t *testing.T) {
	for m := range 256 {
		var x uint64
		for k := range 8 {
			if m>>k&1 != 0 {
				x |= 0x80 << (8 * k)
			}
		}
		if got := bitsOf(x); got != uint64(m) {
			t.Fatalf("bitsOf(%#x) = %#x, want %#x", x, got, m)
		}
	}
	for c := range 256 {
		x := ones * uint64(c)
		if got, want := equal(x, '"') != 0, c == '"'; got != want {
			t.Errorf("equal(%#x, quote) marks %v", c, got)
		}
		if got, want := below(x, 0x20) == highs, c < 0x20; got != want {
			t.Errorf("below(%#x, 0x20) marks %v", c, got)
		}
		// one byte c among others that must not be marked
		y := (ones*uint64('a'))&^(0xFF<<16) | uint64(c)<<16
		if got := bitsOf(equal(y, '\\') | below(y, 0x20)); got != 0 && got != 1<<2 {
			t.Errorf("byte %#x marks other bytes: %08b", c, got)
		}
	}
	// \\ \" x: the first backslash escapes the second, the third escapes the quote.
	if got := escapeTable[0b0000_0111]; got != 0b0_0000_1010 {
		t.Errorf("escapeTable[\\\\\\\"] = %09b", got)
	}
	if got := escapeTable[1<<7|1<<8]; got != 1|1<<8 {
		t.Errorf("escaped first byte and a trailing backslash: %09b", got)
	}
}

// TestCountStringAlignments puts every kind of escape, and a closing quote,
// at every offset of the eight-byte words and 64-byte blocks CountString
// reads, after runs of backslashes of both parities.
func TestCountStringAlignments(t *testing.T) {
	pieces := []string{`\\`, `\"`, `\n`, `\/`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\\\"`, `\\\\`, "é", "日", `\x`, "\x01", `\u12x4`,
		`\ud83d\ud83d\ude00`, `\ude00`, `\uD83D\uDE00`, `\ud83d\u0041`, `\ud83dx`, `\ud83d\`, `\u4f60\u597d\u4e16\u754c\u4f60\u597d\u4e16\u754c\u4f60\u597d\u4e16\u754c`}
	for pad := range 140 {
		for _, p := range pieces {
			for _, tail := range []string{"", "z", "0123456789abcdef", strings.Repeat(`ab\n`, 40)} {
				checkCount(t, strings.Repeat("a", pad)+p+tail)
			}
		}
	}
}

// checkCount checks CountString on the JSON string of raw against
// encoding/json: which strings are valid, and the count of characters.
func checkCount(t *testing.T, raw string) {
	t.Helper()
	quoted := []byte(`"` + raw + `"`)
	end, n := CountString(quoted, 0)
	if e := SkipString(quoted, 0); e != end {
		t.Fatalf("SkipString(%q) = %d, CountString's end %d", quoted, e, end)
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		if end != -1 {
			t.Fatalf("CountString(%q) = %d, want -1 (%v)", quoted, end, err)
		}
		return
	}
	if end != len(quoted) || n != utf8.RuneCountInString(s) {
		t.Fatalf("CountString(%q) = %d, %d; want %d, %d", quoted, end, n, len(quoted), utf8.RuneCountInString(s))
	}
}

// TestEscapedBytes checks EscapedBytes against a byte-by-byte reading of
// every arrangement of backslashes in 16 bits, at the start, middle and
// end of a window.
func TestEscapedBytes(t *testing.T) {
	for pattern := range uint64(1 << 16) {
		for _, shift := range []int{0, 1, 23, 48} {
			bs := pattern << shift
			var want uint64
			escaping := false
			for k := range 64 {
				switch {
				case escaping:
					want |= 1 << k
					escaping = false
				case bs>>k&1 != 0:
					escaping = true
				}
			}
			if got, carry := EscapedBytes(bs); got != want || carry != escaping {
				t.Fatalf("EscapedBytes(%#x) = %#x, %v; want %#x, %v", bs, got, carry, want, escaping)
			}
		}
	}
}

func TestHasPrefix(t *testing.T) {
	s := []byte("0123456789abcdefghij")
	for n := range len(s) + 1 {
		for _, p := range [][]byte{s[:n], append(bytes.Clone(s[:n]), 'x')} {
			for _, in := range [][]byte{s, s[:n], nil} {
				want := bytes.HasPrefix(in, p)
				if got := HasPrefix(in, p); got != want {
					t.Errorf("HasPrefix(%q, %q) = %v", in, p, got)
				}
				if got := hasPrefixWords(in, p); got != want {
					t.Errorf("hasPrefixWords(%q, %q) = %v", in, p, got)
				}
			}
		}
		if n > 0 {
			q := bytes.Clone(s[:n])
			q[n-1] ^= 1
			if HasPrefix(s, q) || hasPrefixWords(s, q) {
				t.Errorf("HasPrefix(%q, %q) = true", s, q)
			}
		}
	}
}

// TestStops checks stops' lowest mark, the only one its callers use,
// against a byte-by-byte reading: on every byte value at every position of
// words of plain bytes, and on random words.
func TestStops(t *testing.T) {
	lowest := func(x uint64) int { // the first byte that stops a scan, or 8
		for k := range 8 {
			if c := byte(x >> (8 * k)); c == '"' || c == '\\' || c < 0x20 {
				return k
			}
		}
		return 8
	}
	check := func(x uint64) {
		t.Helper()
		got := 8
		if m := stops(x); m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if want := lowest(x); got != want {
			t.Fatalf("stops(%#016x): first stop at byte %d, want %d", x, got, want)
		}
	}
	for _, fill := range []byte{'a', ' ', '!', '#', 0x7F, 0x80, 0xFF, 0x21, 0x23} {
		for k := range 8 {
			for c := range 256 {
				x := ones*uint64(fill)&^(0xFF<<(8*k)) | uint64(c)<<(8*k)
				check(x)
				check(x &^ (0xFF << (8 * ((k + 3) & 7))))
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		x := r.Uint64()
		check(x)
		check(x | highs&r.Uint64()) // more bytes ≥ 0x80
	}
}
