package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Load is a generator's arrival process: Poisson arrivals whose rate goes
// linearly from Rate to RampTo (requests per second) over the trace; RampTo
// 0 means a constant rate.
type Load struct {
	Rate   float64
	RampTo float64
	// Requests is how many requests to generate.
	Requests int
	Seed     uint64
}

func (l Load) check() error {
	if !(l.Rate > 0) || l.RampTo < 0 || l.Requests < 1 || math.IsInf(l.Rate, 0) || math.IsInf(l.RampTo, 0) {
		return fmt.Errorf("trace: load needs rate > 0, ramp_to >= 0, requests >= 1; got %+v", l)
	}
	return nil
}

// arrivals returns n arrival times in ms. With a ramp, the rate at the
// k-th arrival is interpolated by k/n, so the trace sweeps the whole range.
func (l Load) arrivals(rng *rand.Rand) []float64 {
	out := make([]float64, l.Requests)
	t := 0.0
	for k := range out {
		rate := l.Rate
		if l.RampTo > 0 {
			rate = l.Rate + (l.RampTo-l.Rate)*float64(k)/float64(l.Requests)
		}
		t += rng.ExpFloat64() / rate * 1000
		out[k] = t
	}
	return out
}

// Workload is a shipped generator.
type Workload struct {
	Name        string
	Description string
	gen         func(rng *rand.Rand, at []float64) []Request
}

// Generate makes the workload's trace for load.
func (w Workload) Generate(l Load) ([]Request, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(l.Seed, 0x5eed))
	reqs := w.gen(rng, l.arrivals(rng))
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].AtMs < reqs[j].AtMs })
	return reqs, nil
}

// Workloads are the shipped generators, by name.
var Workloads = []Workload{
	{"tenants", "150 tenants, each a 6k-token shared context, 1.2k-token unique queries, 128 output tokens", tenants},
	{"chat", "multi-turn chat: 300-token system prompt, conversations of up to 8 turns whose history grows each turn", chat},
	{"agentic", "agents: shared 2k system prompt and 3k tool definitions, tasks of up to 10 steps each adding a 1.5k tool result", agentic},
	{"rag", "long unique prompts: 4k to 12k tokens of retrieved documents and a short question, 256 output tokens", rag},
	{"short", "short chat only: 50 to 400-token prompts, 100 to 400 output tokens", short},
	{"mix", "a mix: 45% short, 20% rag, 20% tenants, 15% agentic", mix},
}

// Lookup returns the named workload.
func Lookup(name string) (Workload, error) {
	for _, w := range Workloads {
		if w.Name == name {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("trace: unknown workload %q", name)
}

func between(rng *rand.Rand, lo, hi int) int { return lo + rng.IntN(hi-lo+1) }

func tenants(rng *rand.Rand, at []float64) []Request {
	out := make([]Request, len(at))
	for i, t := range at {
		tenant := rng.IntN(150)
		out[i] = Request{AtMs: t, API: "chat", OutputTokens: 128, Segments: []Segment{
			{ID: fmt.Sprintf("tenant-sys-%d", tenant), Tokens: 6000, Role: "system"},
			{ID: fmt.Sprintf("tenant-q-%d", i), Tokens: 1200, Role: "user"},
		}}
	}
	return out
}

func short(rng *rand.Rand, at []float64) []Request {
	out := make([]Request, len(at))
	for i, t := range at {
		out[i] = shortOne(rng, t, i)
	}
	return out
}

func shortOne(rng *rand.Rand, t float64, i int) Request {
	return Request{AtMs: t, API: "chat", OutputTokens: between(rng, 100, 400), Segments: []Segment{
		{ID: "short-sys", Tokens: 40, Role: "system"},
		{ID: fmt.Sprintf("short-q-%d", i), Tokens: between(rng, 10, 360), Role: "user"},
	}}
}

func rag(rng *rand.Rand, at []float64) []Request {
	out := make([]Request, len(at))
	for i, t := range at {
		out[i] = ragOne(rng, t, i)
	}
	return out
}

func ragOne(rng *rand.Rand, t float64, i int) Request {
	return Request{AtMs: t, API: "completions", OutputTokens: 256, Segments: []Segment{
		{ID: "rag-instructions", Tokens: 200},
		{ID: fmt.Sprintf("rag-docs-%d", i), Tokens: between(rng, 4000, 12000)},
		{ID: fmt.Sprintf("rag-q-%d", i), Tokens: between(rng, 20, 100)},
	}}
}

// session is a conversation (chat) or a task (agentic) in progress.
type session struct {
	id    int
	segs  []Segment
	turns int
	left  int
}

// sessions spreads arrivals over sessions: each arrival continues a random
// open session or opens a new one, so a conversation's turns are spaced by
// other traffic as real think time spaces them.
func sessions(rng *rand.Rand, at []float64, open int, start func(id int) *session, turn func(s *session, i int) Request) []Request {
	out := make([]Request, len(at))
	var live []*session
	next := 0
	for i, t := range at {
		var s *session
		if len(live) < open || rng.IntN(4) == 0 {
			s = start(next)
			next++
			live = append(live, s)
		} else {
			s = live[rng.IntN(len(live))]
		}
		r := turn(s, i)
		r.AtMs = t
		out[i] = r
		s.turns++
		if s.turns >= s.left {
			for k, x := range live {
				if x == s {
					live = append(live[:k], live[k+1:]...)
					break
				}
			}
		}
	}
	return out
}

func chat(rng *rand.Rand, at []float64) []Request {
	return sessions(rng, at, 32, func(id int) *session {
		return &session{id: id, left: between(rng, 2, 8), segs: []Segment{{ID: "chat-sys", Tokens: 300, Role: "system"}}}
	}, func(s *session, i int) Request {
		q := Segment{ID: fmt.Sprintf("chat-%d-u%d", s.id, s.turns), Tokens: between(rng, 50, 400), Role: "user"}
		out := between(rng, 100, 500)
		segs := append(append([]Segment(nil), s.segs...), q)
		// The answer joins the history for the next turn.
		s.segs = append(segs, Segment{ID: fmt.Sprintf("chat-%d-a%d", s.id, s.turns), Tokens: out, Role: "assistant"})
		return Request{API: "chat", OutputTokens: out, Segments: segs}
	})
}

func agentic(rng *rand.Rand, at []float64) []Request {
	return sessions(rng, at, 16, func(id int) *session {
		return &session{id: id, left: between(rng, 3, 10), segs: []Segment{
			{ID: "agent-sys", Tokens: 2000, Role: "system"},
			{ID: "agent-tools", Tokens: 3000, Role: "system"},
			{ID: fmt.Sprintf("agent-%d-task", id), Tokens: 500, Role: "user"},
		}}
	}, func(s *session, i int) Request {
		out := between(rng, 60, 200)
		segs := append([]Segment(nil), s.segs...)
		s.segs = append(s.segs,
			Segment{ID: fmt.Sprintf("agent-%d-call%d", s.id, s.turns), Tokens: out, Role: "assistant"},
			Segment{ID: fmt.Sprintf("agent-%d-result%d", s.id, s.turns), Tokens: between(rng, 500, 2500), Role: "tool"})
		return Request{API: "chat", OutputTokens: out, Segments: segs}
	})
}

func mix(rng *rand.Rand, at []float64) []Request {
	// Split the arrivals by kind, then let each generator fill its share.
	var shortAt, ragAt, tenAt, agAt []float64
	for _, t := range at {
		switch x := rng.Float64(); {
		case x < 0.45:
			shortAt = append(shortAt, t)
		case x < 0.65:
			ragAt = append(ragAt, t)
		case x < 0.85:
			tenAt = append(tenAt, t)
		default:
			agAt = append(agAt, t)
		}
	}
	out := short(rng, shortAt)
	for _, r := range rag(rng, ragAt) {
		out = append(out, r)
	}
	out = append(out, tenants(rng, tenAt)...)
	return append(out, agentic(rng, agAt)...)
}
