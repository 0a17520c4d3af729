package tokenest

import "testing"

// TestKeyAt checks keyAt's two ways of matching a name (16 bytes compared
// at once, or near the end of the body byte by byte) against its fallback
// (validate, then decode).
func TestKeyAt(t *testing.T) {
	keys := newKeys("role", "content", "instructions?")
	if keys.optional != 1<<2 || keys.names[2] != "instructions" {
		t.Fatalf("newKeys: optional %b, names %q", keys.optional, keys.names)
	}
	pad := `:"a long enough value to read 16 bytes"}`
	for _, c := range []struct {
		key       string
		k, endLen int // endLen: the length of the key, quotes included (-1: invalid)
	}{
		{`"role"`, 0, 6},
		{`"content"`, 1, 9},
		{`"instructions"`, 2, 14},
		{`"roles"`, -1, 7},
		{`"rol"`, -1, 5},
		{`"c\u006fntent"`, 1, 14},
		{`"\u0072ole"`, 0, 11},
		{`"rol\e"`, -1, -1},
		{`"ro` + "\x01" + `le"`, -1, -1},
		{`""`, -1, 2},
	} {
		for _, tail := range []string{pad, ":1}"} {
			b := []byte(c.key + tail)
			k, end := keyAt(b, 0, keys)
			want := c.endLen
			if want < 0 {
				k, want = -1, -1
			}
			if k != c.k || end != want {
				t.Errorf("keyAt(%s) = %d, %d; want %d, %d", b, k, end, c.k, want)
			}
		}
	}
	for _, bad := range [][]string{{"a\"b"}, {`a\b`}, {"sixteen-letters!"}, {"1", "2", "3", "4", "5", "6", "7", "8", "9"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("newKeys(%q) did not panic", bad)
				}
			}()
			newKeys(bad...)
		}()
	}
}
