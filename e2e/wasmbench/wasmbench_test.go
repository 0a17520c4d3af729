package wasmbench

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/wasmbuild"
)

// chatBody is a chat request of about tokens cl100k tokens of the given text
// class (English prose ≈ 4.3 chars/token, Chinese ≈ 1.2, code ≈ 3.2).
func chatBody(class string, tokens int) []byte {
	var unit string
	var charsPerToken float64
	switch class {
	case "english":
		unit, charsPerToken = "The quick brown fox jumps over the lazy dog while the band plays on. ", 4.3
	case "chinese":
		unit, charsPerToken = "敏捷的棕色狐狸跳过了懒狗，乐队继续演奏。", 1.2
	default:
		unit, charsPerToken = "func add(a, b int) int {\n\treturn a + b // sum\n}\n", 3.2
	}
	chars := int(float64(tokens) * charsPerToken)
	text := strings.Repeat(unit, chars/len([]rune(unit))+1)
	text = string([]rune(text)[:chars])
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": text}}})
	return b
}

// BenchmarkTokenestInWasm is tokenest.Estimate's throughput inside the wasm
// VM. Each op is one request: its body is copied into the VM and estimated;
// the "read" variant only copies, so estimate MB/s ≈ bytes / (ns(method) −
// ns(read)). Reported MB/s include the copy.
func BenchmarkTokenestInWasm(b *testing.B) {
	code, err := os.ReadFile(wasmbuild.ForTest(b, "./e2e/wasmbench/testdata/estimator"))
	if err != nil {
		b.Fatal(err)
	}
	for _, method := range []string{"read", "chars4", "default"} {
		d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{PluginConfig: []byte(method), LogLevel: envoyemu.LevelWarn})
		if err != nil {
			b.Fatal(err)
		}
		if !d.StartVM() || !d.StartPlugin() {
			b.Fatalf("%s: start failed: %s", method, d.Failed())
		}
		for _, class := range []string{"english", "chinese", "code"} {
			for _, size := range []struct {
				name   string
				tokens int
			}{{"1k", 1 << 10}, {"8k", 8 << 10}, {"32k", 32 << 10}, {"128k", 128 << 10}} {
				body := chatBody(class, size.tokens)
				b.Run(method+"/"+class+"/"+size.name, func(b *testing.B) {
					b.SetBytes(int64(len(body)))
					for range b.N {
						id := d.InitializeHttpContext()
						d.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "x"}}, false)
						d.CallOnRequestBody(id, body, true)
						d.CompleteHttpContext(id)
					}
					if f := d.Failed(); f != "" {
						b.Fatal(f)
					}
				})
			}
		}
		d.Close()
	}
}
