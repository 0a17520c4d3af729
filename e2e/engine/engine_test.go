package engine

import (
	"strings"
	"testing"
	"time"
)

// small is a round-numbered profile for tests: a step costs 10 ms + 1 ms per
// prefill token + 1 ms per decoding sequence.
func small() Params {
	return Params{
		Name: "test", BlockSize: 4, KVBlocks: 100, MaxBatchedTokens: 16, MaxSeqs: 4,
		StepBase: 10 * time.Millisecond, PerPrefillToken: time.Millisecond, PerDecodeSeq: time.Millisecond,
		TransferFixed: 5 * time.Millisecond, TransferPerToken: time.Millisecond,
	}
}

type arrival struct {
	at time.Duration
	r  *Request
}

// drive runs the engine until every request is done.
func drive(t *testing.T, e *Engine, arrivals []arrival) {
	t.Helper()
	for i := 0; i < 100000; i++ {
		wake, ok := e.NextWake()
		if len(arrivals) > 0 && (!ok || arrivals[0].at <= wake) {
			e.Submit(arrivals[0].r, arrivals[0].at)
			arrivals = arrivals[1:]
			e.Events()
			continue
		}
		if !ok {
			return
		}
		e.Advance(wake)
		e.Events()
	}
	t.Fatal("engine did not finish")
}

func text(tokens int, fill string) string {
	return strings.Repeat(fill, tokens*BytesPerToken/len(fill))
}

func req(kind Kind, prompt, out int, txt string, bs int) *Request {
	return &Request{Kind: kind, PromptTokens: prompt, OutputTokens: out, Hashes: BlockHashes(txt, bs, prompt/bs)}
}

const ms = time.Millisecond

func TestEngineTimeline(t *testing.T) {
	p := small()
	tests := []struct {
		name   string
		params func(*Params)
		reqs   []arrival
		// want first token and finish times, per request
		first, finish []time.Duration
		cached        []int
	}{{
		name: "one request: prefill step then decode steps",
		// prefill 8 tokens: 10+8 = 18 ms → first token; 2 decode steps of 11 ms.
		reqs:  []arrival{{0, req(Full, 8, 3, text(8, "abcd"), 4)}},
		first: []time.Duration{18 * ms}, finish: []time.Duration{40 * ms}, cached: []int{0},
	}, {
		name: "token budget chunks a long prompt",
		// 20 tokens, budget 16: 26 ms then 10+4 = 14 ms.
		reqs:  []arrival{{0, req(Full, 20, 1, text(20, "abcd"), 4)}},
		first: []time.Duration{40 * ms}, finish: []time.Duration{40 * ms}, cached: []int{0},
	}, {
		name: "continuous batching: a decode shares the step with a prefill chunk",
		// A: prefill 4 (14 ms). B arrives at 1 ms, admitted at 14: step 14–29
		// has A's decode (1) and B's 4-token prefill (4) = 15 ms.
		reqs: []arrival{
			{0, req(Full, 4, 3, text(4, "aaaa"), 4)},
			{1 * ms, req(Full, 4, 1, text(4, "bbbb"), 4)},
		},
		first: []time.Duration{14 * ms, 29 * ms}, finish: []time.Duration{29*ms + 11*ms, 29 * ms}, cached: []int{0, 0},
	}, {
		name: "prefix hit: a repeated prompt computes only its last block",
		// Second: 8 tokens, 1 cached block (the last is recomputed for logits):
		// 4 tokens computed = 14 ms from 100 ms.
		reqs: []arrival{
			{0, req(Full, 8, 1, text(8, "abcd"), 4)},
			{100 * ms, req(Full, 8, 1, text(8, "abcd"), 4)},
		},
		first: []time.Duration{18 * ms, 114 * ms}, finish: []time.Duration{18 * ms, 114 * ms}, cached: []int{0, 4},
	}, {
		name:   "queueing: max one sequence",
		params: func(p *Params) { p.MaxSeqs = 1 },
		reqs: []arrival{
			{0, req(Full, 4, 2, text(4, "aaaa"), 4)},
			{0, req(Full, 4, 1, text(4, "bbbb"), 4)},
		},
		// A: 14, 25. B admitted at 25: 39.
		first: []time.Duration{14 * ms, 39 * ms}, finish: []time.Duration{25 * ms, 39 * ms}, cached: []int{0, 0},
	}, {
		name:   "queueing: KV cache full",
		params: func(p *Params) { p.KVBlocks = 3 },
		reqs: []arrival{
			{0, req(Full, 8, 1, text(8, "aaaa"), 4)}, // 3 blocks (8+1 tokens)
			{0, req(Full, 4, 1, text(4, "bbbb"), 4)}, // 2 blocks: waits
		},
		first: []time.Duration{18 * ms, 32 * ms}, finish: []time.Duration{18 * ms, 32 * ms}, cached: []int{0, 0},
	}, {
		name: "decode only: transfer then first token",
		// 8 tokens to move: 5 + 8 ms, then a decode step of 11 ms.
		reqs:  []arrival{{0, req(DecodeOnly, 8, 2, text(8, "abcd"), 4)}},
		first: []time.Duration{24 * ms}, finish: []time.Duration{35 * ms}, cached: []int{0},
	}, {
		name: "decode only: the decoder's cache holds what an earlier request brought",
		reqs: []arrival{
			{0, req(DecodeOnly, 8, 1, text(8, "abcd"), 4)},
			{100 * ms, req(DecodeOnly, 8, 1, text(8, "abcd"), 4)},
		},
		// Second: all 8 cached, transfer 5 ms, decode 11 ms.
		first: []time.Duration{24 * ms, 116 * ms}, finish: []time.Duration{24 * ms, 116 * ms}, cached: []int{0, 8},
	}, {
		name:  "prefill only: one token",
		reqs:  []arrival{{0, req(PrefillOnly, 8, 50, text(8, "abcd"), 4)}},
		first: []time.Duration{18 * ms}, finish: []time.Duration{18 * ms}, cached: []int{0},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pp := p
			if tc.params != nil {
				tc.params(&pp)
			}
			e, err := New(pp)
			if err != nil {
				t.Fatal(err)
			}
			drive(t, e, tc.reqs)
			for i, a := range tc.reqs {
				r := a.r
				if r.FirstToken != tc.first[i] || r.Finished != tc.finish[i] || r.CachedTokens != tc.cached[i] {
					t.Errorf("request %d: first %v finish %v cached %d, want %v %v %d",
						i, r.FirstToken, r.Finished, r.CachedTokens, tc.first[i], tc.finish[i], tc.cached[i])
				}
			}
			if e.Running() != 0 || e.Waiting() != 0 || e.KVUsage() != 0 {
				t.Errorf("left behind: %v", e)
			}
		})
	}
}

func TestEviction(t *testing.T) {
	p := small()
	p.KVBlocks = 6
	e, _ := New(p)
	a := req(Full, 16, 1, text(16, "aaaa"), 4) // 5 blocks, 4 hashed
	b := req(Full, 16, 1, text(16, "bbbb"), 4) // evicts a's
	a2 := req(Full, 16, 1, text(16, "aaaa"), 4)
	drive(t, e, []arrival{{0, a}, {time.Second, b}, {2 * time.Second, a2}})
	if a2.CachedTokens != 0 {
		t.Errorf("a's blocks survived b: %d cached", a2.CachedTokens)
	}
	if e.Stats().Evictions == 0 {
		t.Error("no eviction counted")
	}
	// LRU: with room for two prompts, the older of two unused ones goes.
	p.KVBlocks = 11
	e, _ = New(p)
	a, b = req(Full, 16, 1, text(16, "aaaa"), 4), req(Full, 16, 1, text(16, "bbbb"), 4)
	a2 = req(Full, 16, 1, text(16, "aaaa"), 4)
	c := req(Full, 16, 1, text(16, "cccc"), 4)
	b2 := req(Full, 16, 1, text(16, "bbbb"), 4)
	drive(t, e, []arrival{{0, a}, {time.Second, b}, {2 * time.Second, a2}, {3 * time.Second, c}, {4 * time.Second, b2}})
	if a2.CachedTokens != 12 || b2.CachedTokens != 0 {
		t.Errorf("a2 cached %d (want 12), b2 cached %d (want 0: b was least recently used)", a2.CachedTokens, b2.CachedTokens)
	}
}

func TestRejectsWhatCannotFit(t *testing.T) {
	p := small()
	e, _ := New(p)
	r := req(Full, 1000, 1, "", 4)
	e.Submit(r, 0)
	if ev := e.Events(); !r.Rejected || len(ev) != 1 || ev[0].Kind != Done {
		t.Fatalf("rejected %v, events %v", r.Rejected, ev)
	}
}

func TestBlockHashesChain(t *testing.T) {
	x, y := strings.Repeat("X", 4*BytesPerToken), strings.Repeat("Y", 4*BytesPerToken)
	head := strings.Repeat("0123", BytesPerToken)
	a := BlockHashes(head+x, 4, 0)
	b := BlockHashes(head+y, 4, 0)
	c := BlockHashes("Z"+head[1:]+x, 4, 0)
	if len(a) != 2 || a[0] != b[0] || a[1] == b[1] || c[1] == a[1] {
		t.Fatalf("a %x b %x c %x", a, b, c)
	}
}

func TestProfilesValid(t *testing.T) {
	for name, p := range Profiles {
		if err := p.Validate(); err != nil || p.Name != name {
			t.Errorf("%s: %v (name %q)", name, err, p.Name)
		}
	}
}

func TestLiveFollowsTheModel(t *testing.T) {
	p := small()
	l, err := NewLive(p, 0.5) // twice as fast as the model
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := req(Full, 8, 3, text(8, "abcd"), 4)
	start := time.Now()
	var kinds []EventKind
	for ev := range l.Submit(r) {
		kinds = append(kinds, ev.Kind)
		if ev.Kind == Done {
			break
		}
	}
	// Model: first token at 18 ms, done at 40 ms; at scale 0.5, 20 ms of wall time.
	if el := time.Since(start); el < 19*time.Millisecond {
		t.Errorf("done after %v of wall time, want at least 20ms", el)
	}
	if len(kinds) != 4 || kinds[0] != FirstToken || kinds[3] != Done {
		t.Errorf("events %v", kinds)
	}
}
