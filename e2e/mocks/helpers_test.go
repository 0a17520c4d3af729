package mocks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fast is the latency model of most tests: every step takes a microsecond.
var fast = Latency{PrefillPerToken: time.Microsecond, TransferredPrefill: time.Microsecond, PerOutputToken: time.Microsecond, Slowdown: 1}

// start runs a mock for the test's duration.
func start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Latency == (Latency{}) {
		cfg.Latency = fast
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testCtx is bounded by the test deadline and at most 20 s, so no test hangs.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	d := time.Now().Add(20 * time.Second)
	if tt, ok := t.(*testing.T); ok {
		if dl, ok := tt.Deadline(); ok && dl.Before(d) {
			d = dl.Add(-time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// events returns the data payloads of an SSE body.
func (r response) events() []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// post sends body (a string is sent as is, anything else as JSON) and reads the
// whole answer.
func post(t testing.TB, url string, body any, header ...string) response {
	t.Helper()
	resp, err := send(testCtx(t), url, body, header...)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", url, err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

func send(ctx context.Context, url string, body any, header ...string) (*http.Response, error) {
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return http.DefaultClient.Do(req)
}

func get(t testing.TB, url string) response {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

func stats(t testing.TB, s *Server) Stats {
	t.Helper()
	st, err := s.Control().Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// text is the generated text of a non-streaming completion or chat response.
func text(t testing.TB, m map[string]any) string {
	t.Helper()
	choices, _ := m["choices"].([]any)
	if len(choices) == 0 {
		t.Fatalf("no choices in %v", m)
	}
	c := choices[0].(map[string]any)
	if msg, ok := c["message"].(map[string]any); ok {
		return msg["content"].(string)
	}
	return c["text"].(string)
}

// streamText concatenates the text of completion or chat chunks.
func streamText(t testing.TB, events []string) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range events {
		if ev == "[DONE]" {
			continue
		}
		var m struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &m); err != nil {
			t.Fatalf("bad event %q: %v", ev, err)
		}
		for _, c := range m.Choices {
			b.WriteString(c.Text + c.Delta.Content)
		}
	}
	return b.String()
}

// longPrompt is a prompt of n tokens (each word is one token).
func longPrompt(n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = "w" + string(rune('a'+i%26))
	}
	return strings.Join(words, " ")
}
