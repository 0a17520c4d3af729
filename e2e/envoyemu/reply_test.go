package envoyemu

import "testing"

// TestReplyHeadersKeepPluginContentType: a local reply's content-type is the
// plugin's when it gives one (Envoy adds text/plain only when none is set).
func TestReplyHeadersKeepPluginContentType(t *testing.T) {
	for _, tc := range []struct {
		extra [][2]string
		want  []string
	}{
		{[][2]string{{"content-type", "application/json"}}, []string{"application/json"}},
		{nil, []string{"text/plain"}},
	} {
		h := replyHeaders(400, []byte(`{}`), tc.extra)
		var got []string
		for _, p := range pairsOf(h) {
			if p[0] == "content-type" {
				got = append(got, p[1])
			}
		}
		if len(got) != len(tc.want) || got[0] != tc.want[0] {
			t.Errorf("extra %v: content-type %v, want %v", tc.extra, got, tc.want)
		}
	}
}
