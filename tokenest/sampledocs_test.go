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
// turns, documents whose second half is another script, long chats,
// conversations of 3 to 120 turns, and conversations beside an image sent
// as a data URL.
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
	// conversations: a document split into messages of uneven lengths,
	// and turns that change class from message to message
	for _, class := range textClasses {
		for _, tokens := range []int{8 << 10, 32 << 10, 128 << 10} {
			text := classText(tb, class, tokens)
			for _, n := range []int{3, 10, 40, 120} {
				add("turns", class+"/"+strconv.Itoa(tokens>>10)+"k/"+strconv.Itoa(n), "/v1/chat/completions", turnsBody(splitText(text, n, tokens+n)))
			}
		}
	}
	for _, tokens := range []int{8 << 10, 32 << 10, 128 << 10} {
		for _, n := range []int{6, 20, 60} {
			var parts []string
			per := tokens / n
			for i := range n {
				class := textClasses[(i*5)%len(textClasses)]
				if i%2 == 1 {
					class = []string{"english", "code", "json"}[i%3]
				}
				parts = append(parts, classText(tb, class, per/2+(i*7919)%per))
			}
			add("turns/mixed", "mixed/"+strconv.Itoa(tokens>>10)+"k/"+strconv.Itoa(n), "/v1/chat/completions", turnsBody(parts))
		}
	}
	// conversations beside an image sent as a data URL: text sparse next
	// to the body's size
	for _, class := range []string{"english", "code", "chinese", "german"} {
		for _, tokens := range []int{2 << 10, 8 << 10, 32 << 10} {
			parts := splitText(classText(tb, class, tokens), 10, tokens)
			for _, image := range []int{64 << 10, 256 << 10, 1 << 20} {
				add("sparse", class+"/"+strconv.Itoa(tokens>>10)+"k/image"+strconv.Itoa(image>>10)+"k", "/v1/chat/completions", imageTurnsBody(parts, image))
			}
		}
	}
	return bodies
}

// imageTurnsBody is turnsBody with an image of about size bytes, as a
// data URL, in the first turn.
func imageTurnsBody(parts []string, size int) []byte {
	var msgs []any
	for i, p := range parts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i == 0 {
			data := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", size/24)
			msgs = append(msgs, map[string]any{"role": role, "content": []any{
				map[string]any{"type": "text", "text": p},
				map[string]any{"type": "image_url", "image_url": map[string]string{"url": "data:image/png;base64," + data}},
			}})
			continue
		}
		msgs = append(msgs, map[string]string{"role": role, "content": p})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return b
}

// splitText cuts text into n parts of uneven lengths (drawn by seed), at
// character starts.
func splitText(text string, n, seed int) []string {
	var parts []string
	weights := make([]int, n)
	sum := 0
	for i := range weights {
		weights[i] = 1 + int((uint64(i+seed)*0x9E3779B97F4A7C15)>>59)
		sum += weights[i]
	}
	at := 0
	for i, w := range weights {
		end := len(text)
		if i < n-1 {
			end = min(len(text), at+len(text)*w/sum)
			for end < len(text) && (text[end]&0xC0) == 0x80 {
				end++
			}
		}
		parts = append(parts, text[at:end])
		at = end
	}
	return parts
}

// turnsBody is a chat whose messages hold parts, user and assistant in
// turns.
func turnsBody(parts []string) []byte {
	var msgs []map[string]string
	for i, p := range parts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": p})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return b
}
