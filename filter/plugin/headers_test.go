package plugin

import (
	"strconv"
	"testing"
)

// parseLength reads every content-length as strconv.Atoi does.
func TestParseLength(t *testing.T) {
	for _, v := range []string{"", "0", "7", "4096", "007", "+5", "-1", " 5", "5 ", "1e3", "x",
		"999999999999999999", "9999999999999999999", "99999999999999999999", "18446744073709551616"} {
		want, err := strconv.Atoi(v)
		if got, ok := parseLength(v); ok != (err == nil) || ok && got != want {
			t.Errorf("parseLength(%q) = %d %v, strconv.Atoi %d %v", v, got, ok, want, err)
		}
	}
}
