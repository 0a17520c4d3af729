package discovery

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/lb"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func ep(name string, octet int) config.Endpoint {
	return config.Endpoint{Name: name, Address: fmt.Sprintf("10.0.0.%d:8000", octet), Host: fmt.Sprintf("10.0.0.%d", octet)}
}

func answer(version int64, decode ...config.Endpoint) *config.Discovered {
	return &config.Discovered{Version: version, Prefill: []config.Endpoint{ep("p", 200)}, Decode: decode}
}

// slotsOf renders a pool as "name" per slot, "-name" draining, "." free.
func slotsOf(p Pool) string {
	var parts []string
	for _, s := range p {
		switch {
		case s.Endpoint != nil:
			parts = append(parts, s.Endpoint.Name)
		case s.Left != "":
			parts = append(parts, "-"+s.Left)
		default:
			parts = append(parts, ".")
		}
	}
	return strings.Join(parts, " ")
}

func TestNext(t *testing.T) {
	idle := func(string, int) bool { return false }
	busy := func(string, int) bool { return true }
	var tab Table
	steps := []struct {
		at      time.Duration
		decode  []config.Endpoint
		busy    Busy
		want    string
		reset   string
		changed bool
	}{
		{0, []config.Endpoint{ep("a", 1), ep("b", 2)}, idle, "a b", "[0 1]", true},
		{time.Second, []config.Endpoint{ep("b", 2), ep("a", 1)}, idle, "a b", "[]", false},
		{2 * time.Second, []config.Endpoint{ep("b", 2), ep("c", 3)}, idle, "-a b c", "[2]", true},
		// Freed only after DrainMin, and only when idle.
		{10 * time.Second, []config.Endpoint{ep("b", 2), ep("c", 3)}, idle, "-a b c", "[]", false},
		{40 * time.Second, []config.Endpoint{ep("b", 2), ep("c", 3)}, busy, "-a b c", "[]", false},
		{41 * time.Second, []config.Endpoint{ep("b", 2), ep("c", 3), ep("d", 4)}, busy, "-a b c d", "[3]", true},
		// The busy draining slot is freed after DrainMax.
		{2*time.Second + DrainMax, []config.Endpoint{ep("b", 2), ep("c", 3), ep("d", 4)}, busy, ". b c d", "[]", true},
		{DrainMax + 3*time.Second, []config.Endpoint{ep("e", 5), ep("c", 3), ep("d", 4)}, idle, "e -b c d", "[0]", true},
		// b comes back while draining: its own slot, no reset.
		{DrainMax + 4*time.Second, []config.Endpoint{ep("e", 5), ep("c", 3), ep("d", 4), ep("b", 2)}, idle, "e b c d", "[]", true},
		// An address change keeps the slot.
		{DrainMax + 5*time.Second, []config.Endpoint{ep("e", 6), ep("c", 3), ep("d", 4), ep("b", 2)}, idle, "e b c d", "[]", true},
		// Everything leaves, and trailing free slots go.
		{DrainMax + 6*time.Second, nil, idle, "-e -b -c -d", "[]", true},
		{DrainMax + 60*time.Second, nil, idle, "", "[]", true},
	}
	for i, st := range steps {
		next, reset, changed := Next(tab, answer(int64(i), st.decode...), st.busy, t0.Add(st.at))
		if got := slotsOf(next.Decode); got != st.want {
			t.Fatalf("step %d: decode slots %q, want %q", i, got, st.want)
		}
		if got := fmt.Sprint(reset[1]); got != st.reset && !(st.reset == "[]" && reset[1] == nil) {
			t.Fatalf("step %d: reset %v, want %s", i, reset[1], st.reset)
		}
		if changed != st.changed && i > 0 {
			t.Fatalf("step %d: changed %v, want %v", i, changed, st.changed)
		}
		if next.Gen != tab.Gen+1 || next.Version != int64(i) {
			t.Fatalf("step %d: gen %d version %d", i, next.Gen, next.Version)
		}
		tab = next
	}
}

func TestEncodeDecode(t *testing.T) {
	tab, _, _ := Next(Table{}, answer(9, ep("a", 1), ep("b", 2)), func(string, int) bool { return false }, t0)
	tab, _, _ = Next(tab, answer(10, ep("b", 2)), func(string, int) bool { return false }, t0)
	got, err := Decode(tab.Encode())
	if err != nil || slotsOf(got.Decode) != "-a b" || got.Version != 10 || got.Decode[1].Endpoint.Address != "10.0.0.2:8000" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{`{`, `{"prefill":[{"ep":{"Name":""}}]}`, `{"decode":[{"ep":{"Name":"a","Address":"1.2.3.4:5"},"left":"a"}]}`,
		`{"decode":[{"ep":{"Name":"a","Address":"1.2.3.4:5"}},{"ep":{"Name":"a","Address":"1.2.3.4:6"}}]}`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
	if p := Initial(&config.Config{Decode: config.Pool{Endpoints: []config.Endpoint{ep("x", 1)}}}); slotsOf(p.Decode) != "x" || len(p.Prefill) != 0 {
		t.Fatalf("initial %+v", p)
	}
}

// memBytes is the total size of a MemStore's values.
func storeBytes(s *lb.MemStore, keys []string) int {
	n := 0
	for _, k := range keys {
		v, _, _ := s.Get(k)
		n += len(v)
	}
	return n
}

// 10 000 pods coming and going (a rolling churn over 64 live decoders, with
// requests in flight on leaving ones) keep the table, the shared values and
// the balancer's per-slot memory bounded.
func TestChurnBounded(t *testing.T) {
	store := lb.NewMemStore()
	cfg := lb.DefaultPoolConfig()
	cfg.Strategy = lb.LeastLoaded
	b, err := lb.NewDynamic("decode", cfg, store, rand.NewPCG(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	busy := func(pool string, s int) bool { return pool == "decode" && b.Inflight(s) > 0 }
	const live = 64
	var tab Table
	var held []*lb.Lease
	maxWidth := 0
	for i := 0; i < 10_000; i++ {
		now := t0.Add(time.Duration(i) * 200 * time.Millisecond)
		var eps []config.Endpoint
		for k := i; k < i+live; k++ {
			eps = append(eps, config.Endpoint{Name: fmt.Sprintf("pod-%d", k), Address: fmt.Sprintf("10.%d.%d.%d:8000", k>>16&255, k>>8&255, k&255)})
		}
		next, reset, _ := Next(tab, &config.Discovered{Version: int64(i), Decode: eps}, busy, now)
		if err := b.SetEndpoints(next.Decode.Balancing()); err != nil {
			t.Fatal(err)
		}
		if err := b.ResetSlots(reset[1]); err != nil {
			t.Fatal(err)
		}
		tab = next
		maxWidth = max(maxWidth, len(tab.Decode))
		l, err := b.Pick(now, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if len(held) > 300 { // requests last ~60 s
			held[0].Release(now)
			held = held[1:]
		}
	}
	// A slot drains while a request holds it (300 changes) and at least
	// DrainMin (150 changes): at most 64 live + 300 draining, whatever the
	// number of pods that came and went.
	if maxWidth > live+300+1 || len(tab.Encode()) > 64<<10 {
		t.Fatalf("table width reached %d, %d bytes", maxWidth, len(tab.Encode()))
	}
	keys := []string{"lb/decode/dyn/inflight", "lb/decode/dyn/health", "lb/decode/dyn/stats", "lb/decode/dyn/qps", "lb/decode/dyn/rotation"}
	if n := storeBytes(store, keys); n > 4*lb.MaxSlots+64 {
		t.Fatalf("shared values %d bytes", n)
	}
	for _, l := range held {
		l.Release(t0)
	}
	// Once the requests are over and DrainMin passed, only the live remain.
	end := t0.Add(10_000*200*time.Millisecond + DrainMin)
	tab, _, _ = Next(tab, &config.Discovered{Version: 1}, busy, end)
	tab, _, _ = Next(tab, &config.Discovered{Version: 2}, busy, end.Add(DrainMin))
	if len(tab.Decode) != 0 {
		t.Fatalf("after draining: %d slots", len(tab.Decode))
	}
}
