package tokenest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
)

// sampledBody is a body of TestSampledAccuracy: its group names the kind
// of document it stands for.
type sampledBody struct {
	group, name, path string
	b                 []byte
}

// classText is about tokens cl100k tokens of a class's sample text.
func classText(tb testing.TB, class string, tokens int) string {
	tb.Helper()
	b, err := benchdata.Prompt("testdata/samples", class, tokens)
	if err != nil {
		tb.Fatal(err)
	}
	var p struct{ Prompt string }
	if err := json.Unmarshal(b, &p); err != nil {
		tb.Fatal(err)
	}
	return p.Prompt
}

func chatText(text string) []byte {
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": text}}})
	return b
}

// sampledBodies are the long documents TestSampledAccuracy reads in part
// and whole: prompts of every class from the smallest size read in part
// to 128k tokens (also \u-escaped), documents that change language every
// few hundred to few thousand tokens (also \u-escaped), prose and code in
// turns, documents whose second half is another script, and long chats.
func sampledBodies(tb testing.TB) []sampledBody {
	var bodies []sampledBody
	add := func(group, name, path string, b []byte) {
		bodies = append(bodies, sampledBody{group, name, path, b})
		if group == "mixed" || group == "halves" {
			bodies = append(bodies, sampledBody{group + "/ascii", name, path, benchdata.ASCIIOnly(b)})
		}
	}
	for _, class := range textClasses {
		for _, tokens := range []int{4 << 10, 6 << 10, 8 << 10, 10 << 10, 13 << 10, 32 << 10, 55 << 10, 128 << 10} {
			b, err := benchdata.Prompt("testdata/samples", class, tokens)
			if err != nil {
				tb.Fatal(err)
			}
			name := class + "/" + strconv.Itoa(tokens>>10) + "k"
			add("class", name, "/v1/completions", b)
			if tokens == 8<<10 || tokens == 55<<10 {
				add("class/ascii", name, "/v1/completions", benchdata.ASCIIOnly(b))
			}
		}
	}
	for _, section := range []int{150, 300, 500, 1000, 2000, 8000} {
		var text strings.Builder
		for _, class := range textClasses {
			text.WriteString(classText(tb, class, section))
		}
		add("mixed", "mixed/"+strconv.Itoa(section), "/v1/chat/completions", chatText(text.String()))
	}
	for _, section := range []int{200, 1000, 3000} {
		var text strings.Builder
		for text.Len() < 100<<10 {
			text.WriteString(classText(tb, "english", section))
			text.WriteString(classText(tb, "code", section))
		}
		add("mixed", "prose+code/"+strconv.Itoa(section), "/v1/chat/completions", chatText(text.String()))
	}
	for _, pair := range [][2]string{{"english", "chinese"}, {"chinese", "english"}, {"english", "hindi"}, {"code", "russian"},
		{"german", "thai"}, {"json", "japanese"}, {"korean", "code"}, {"arabic", "english"}} {
		for _, tokens := range []int{3 << 10, 5 << 10, 8 << 10, 32 << 10} {
			text := classText(tb, pair[0], tokens) + classText(tb, pair[1], tokens)
			add("halves", pair[0]+"+"+pair[1]+"/"+strconv.Itoa(tokens>>10)+"k", "/v1/chat/completions", chatText(text))
		}
	}
	for _, tokens := range []int{8 << 10, 32 << 10, 55 << 10, 128 << 10} {
		b, err := benchdata.Chat("testdata/samples", tokens)
		if err != nil {
			tb.Fatal(err)
		}
		add("chat", "chat/"+strconv.Itoa(tokens>>10)+"k", "/v1/chat/completions", b)
	}
	return bodies
}
