package tokenest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pdroute/pdroute/tokenest/internal/benchdata"
)

// cacheBodies returns bodies with tool definitions: the agent benchmark
// body, the chat benchmark body, every chat sample's tools with a short
// message (chat and Responses), bodies that repeat a definition, and bodies
// that hold a definition seen before next to an error, or a malformed
// value that starts as one does.
func cacheBodies(t testing.TB) map[string][]byte {
	bodies := map[string][]byte{}
	tools, err := benchdata.Tools("testdata/samples")
	if err != nil {
		t.Fatal(err)
	}
	bodies["agent"] = tools
	bodies["chat8k"] = chatBody(t, 8<<10)
	for i, d := range renderValues(t) {
		if !bytes.HasPrefix(d, []byte("{")) {
			continue
		}
		msg := `"messages":[{"role":"user","content":"hi"}]`
		bodies[fmt.Sprint("chat", i)] = fmt.Appendf(nil, `{%s,"tools":[%s]}`, msg, d)
		bodies[fmt.Sprint("twice", i)] = fmt.Appendf(nil, `{"tools":[%s, %s],%s}`, d, d, msg)
		bodies[fmt.Sprint("functions", i)] = fmt.Appendf(nil, `{%s,"functions":[%s]}`, msg, d)
		bodies[fmt.Sprint("responses", i)] = fmt.Appendf(nil, `{"input":"hi","tools":[%s]}`, d)
		bodies[fmt.Sprint("trailing", i)] = fmt.Appendf(nil, `{"tools":[%s],%s}x`, d, msg)
		bodies[fmt.Sprint("fielderr", i)] = fmt.Appendf(nil, `{"tools":[%s],"messages":[]}`, d)
		bodies[fmt.Sprint("cut", i)] = fmt.Appendf(nil, `{"tools":[%s`, d[:len(d)-1])
		bodies[fmt.Sprint("longer", i)] = fmt.Appendf(nil, `{"tools":[%s"x":1}],%s}`, d[:len(d)-1], msg)
	}
	return bodies
}

func pathOf(name string) string {
	if strings.HasPrefix(name, "responses") {
		return "/v1/responses"
	}
	return "/v1/chat/completions"
}

// TestCacheMatchesEstimate checks that Estimate through a Cache returns
// what Estimate returns, cold and warm, with a budget that holds
// everything and with budgets that keep emptying it, and that the warm
// pass finds the definitions.
func TestCacheMatchesEstimate(t *testing.T) {
	bodies := cacheBodies(t)
	for _, budget := range []int{1 << 20, 8 << 10, 3 << 10, 0} {
		c := NewCache(budget)
		for pass := range 2 {
			for name, body := range bodies {
				checkCache(t, c, body, pathOf(name))
			}
			if hits, _, held := c.Stats(); held > budget {
				t.Fatalf("budget %d: holds %d bytes", budget, held)
			} else if pass == 1 && budget == 1<<20 && hits == 0 {
				t.Fatalf("budget %d: no hit in the second pass", budget)
			}
		}
	}
}

// TestCacheChars4First fills a Cache through Chars4, which keeps the
// definitions without their cost, and then reads the bodies through
// Default, which must count them and keep their cost, then through both.
func TestCacheChars4First(t *testing.T) {
	bodies := cacheBodies(t)
	c := NewCache(1 << 20)
	for _, m := range []Method{Chars4, Default, Chars4, Default} {
		for name, body := range bodies {
			if err := sameThroughCache(c, body, pathOf(name), m); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	if hits, _, _ := c.Stats(); hits == 0 {
		t.Fatal("no hit")
	}
}

// checkCache fails t unless body estimates through c as Estimate estimates
// it, by both methods.
func checkCache(t *testing.T, c *Cache, body []byte, path string) {
	t.Helper()
	for _, m := range []Method{Chars4, Default} {
		if err := sameThroughCache(c, body, path, m); err != nil {
			t.Fatalf("%.80q: %v", body, err)
		}
	}
}

// sameThroughCache estimates body through c and with Estimate, and says
// how the two differ (result, or error and its text), or nil.
func sameThroughCache(c *Cache, body []byte, path string, m Method) error {
	want, werr := Estimate(body, path, m)
	got, err := c.Estimate(body, path, m)
	if got != want || (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
		return fmt.Errorf("%s %v: through the cache %+v, %v; Estimate %+v, %v", path, m, got, err, want, werr)
	}
	return nil
}

// TestCacheConcurrent shares one Cache between goroutines (for the race
// detector, and for the answers).
func TestCacheConcurrent(t *testing.T) {
	bodies := cacheBodies(t)
	c := NewCache(16 << 10)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name, body := range bodies {
				if err := sameThroughCache(c, body, pathOf(name), Default); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestCacheNoAllocations: a body whose definitions the Cache holds costs
// no allocation.
func TestCacheNoAllocations(t *testing.T) {
	body := cacheBodies(t)["agent"]
	c := NewCache(1 << 20)
	if _, err := c.Estimate(body, "/v1/chat/completions", Default); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() { c.Estimate(body, "/v1/chat/completions", Default) }); n != 0 {
		t.Fatalf("%v allocations per warm call", n)
	}
}

// fuzzCache is shared by FuzzCache's inputs, so that one input's
// definitions are there for the next.
var fuzzCache = NewCache(64 << 10)

// FuzzCache checks that Estimate through a Cache that holds definitions
// of earlier inputs returns what Estimate returns, on any body.
func FuzzCache(f *testing.F) {
	for name, body := range cacheBodies(f) {
		if len(body) < 4096 {
			f.Add(body, strings.HasPrefix(name, "responses"))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, responses bool) {
		path := "/v1/chat/completions"
		if responses {
			path = "/v1/responses"
		}
		checkCache(t, fuzzCache, body, path)
	})
}

// TestCacheStats checks that every tool definition read through a Cache is
// a hit or a miss, short ones and one that ends the body included.
func TestCacheStats(t *testing.T) {
	c := NewCache(1 << 20)
	long := `{"type":"function","function":{"name":"get_weather","description":"the weather where you are"}}`
	bodies := []string{
		`{"messages":[{"role":"user","content":"hi"}],"tools":[` + long + `,{"type":"function"},` + long + `]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[` + long + `]}`,
	}
	for range 2 {
		for _, body := range bodies {
			checkCache(t, c, []byte(body), "/v1/chat/completions") // both methods
		}
	}
	// 5 definitions in the bodies, read twice with each of two methods
	hits, misses, _ := c.Stats()
	if hits+misses != 2*2*5 || hits == 0 {
		t.Fatalf("hits %d + misses %d, want %d definitions read", hits, misses, 2*2*5)
	}
}
