package engine

import (
	"fmt"
	"time"
)

// Kind is what an engine does with a request.
type Kind uint8

// The request kinds.
const (
	// Full: prefill and decode on this engine (aggregated serving, or a
	// direct request to a decoder).
	Full Kind = iota
	// PrefillOnly: compute the prompt, emit the first token and end (the
	// prefill leg of P/D). The prompt's blocks stay in this engine's cache.
	PrefillOnly
	// DecodeOnly: the prompt's KV is pulled from a prefiller (the decode leg
	// of P/D): blocks the decoder has cached are not moved, the rest take
	// TransferFixed + TransferPerToken each, and the decoder's cache then
	// holds the whole prompt.
	DecodeOnly
)

// Request is one request to an engine. The caller fills the first block of
// fields; the engine fills the rest.
type Request struct {
	Kind         Kind
	PromptTokens int
	// OutputTokens to generate (PrefillOnly generates 1).
	OutputTokens int
	// Hashes are the prompt's block hashes ([BlockHashes]); nil disables
	// prefix caching for it.
	Hashes []uint64
	// Tag is the caller's.
	Tag any

	// Arrived, Admitted (scheduled into the batch), FirstToken and Finished
	// are times on the engine's clock.
	Arrived, Admitted, FirstToken, Finished time.Duration
	// CachedTokens: prompt tokens found in the prefix cache.
	CachedTokens int
	// TransferredTokens: DecodeOnly tokens pulled from the prefiller.
	TransferredTokens int
	// Generated tokens so far.
	Generated int
	// Rejected: the request can never fit in the KV cache; it finished at
	// arrival without output.
	Rejected bool
}

// EventKind says what happened to a request.
type EventKind uint8

// The events.
const (
	// FirstToken: the first output token (prefill done, or the decoder's
	// first step after a transfer).
	FirstToken EventKind = iota
	// Token: a further output token.
	Token
	// Done: the request left the engine (finished or rejected).
	Done
)

// Event is one output of the engine.
type Event struct {
	Req  *Request
	Kind EventKind
	At   time.Duration
}

type phase uint8

const (
	prefilling phase = iota
	transferring
	decoding
)

type seq struct {
	r         *Request
	phase     phase
	computed  int // prompt tokens computed or cached
	readyAt   time.Duration
	anon      int // anonymous blocks held
	hashed    []*block
	published int // prompt blocks whose hash is registered
	done      bool
}

type item struct {
	s     *seq
	chunk int // prefill tokens this step; 0 = one decode token
}

// Engine is one engine's state on a simulated clock. The caller drives it:
// Submit requests in time order, and call Advance at NextWake. It is not
// safe for concurrent use (see Live for the wall-clock wrapper).
type Engine struct {
	p       Params
	kv      *kvCache
	waiting []*seq
	running []*seq
	plan    []item
	busy    bool
	stepEnd time.Duration
	events  []Event
	stats   Stats
}

// Stats are an engine's counters since New.
type Stats struct {
	Steps          int64
	Busy           time.Duration // time spent in steps
	PromptTokens   int64         // prompt tokens of Full and PrefillOnly requests
	CachedTokens   int64         // of which found in the prefix cache
	ComputedTokens int64         // prefill tokens computed
	Generated      int64         // output tokens
	Evictions      int64         // cached blocks evicted
	Rejected       int64
}

// New returns an idle engine with an empty cache.
func New(p Params) (*Engine, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Engine{p: p, kv: newKVCache(p.KVBlocks)}, nil
}

// Params returns the engine's parameters.
func (e *Engine) Params() Params { return e.p }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Evictions = e.kv.evictions
	return s
}

// Running is the sequences in the batch (including DecodeOnly ones waiting
// for their KV), as vLLM's num_requests_running.
func (e *Engine) Running() int { return len(e.running) }

// Waiting is the requests queued for admission (num_requests_waiting).
func (e *Engine) Waiting() int { return len(e.waiting) }

// KVUsage is the fraction of KV blocks held by running sequences.
func (e *Engine) KVUsage() float64 { return float64(e.kv.used()) / float64(e.kv.capacity) }

// Cached reports how many of hashes' leading blocks the prefix cache holds.
func (e *Engine) Cached(hashes []uint64) int { n, _ := e.kv.match(hashes); return n }

// Events returns and clears the events since the last call. The slice is
// reused by the engine: consume it before the next Submit or Advance.
func (e *Engine) Events() []Event {
	ev := e.events
	e.events = e.events[:0]
	return ev
}

func (e *Engine) blocksFor(tokens int) int { return (tokens + e.p.BlockSize - 1) / e.p.BlockSize }

// Submit queues r at now, and starts a step if the engine was idle.
func (e *Engine) Submit(r *Request, now time.Duration) {
	r.Arrived = now
	if r.Kind == PrefillOnly {
		r.OutputTokens = 1
	}
	r.OutputTokens = max(r.OutputTokens, 1)
	if r.PromptTokens < 1 {
		r.PromptTokens = 1
	}
	if len(r.Hashes) > r.PromptTokens/e.p.BlockSize {
		r.Hashes = r.Hashes[:r.PromptTokens/e.p.BlockSize]
	}
	if e.blocksFor(r.PromptTokens+r.OutputTokens) > e.kv.capacity {
		r.Rejected, r.Finished = true, now
		e.stats.Rejected++
		e.events = append(e.events, Event{r, Done, now})
		return
	}
	e.waiting = append(e.waiting, &seq{r: r})
	if !e.busy {
		e.startStep(now)
	}
}

// NextWake is when the engine next needs Advance: the end of the running
// step, or, when idle, the first pending KV transfer's completion.
func (e *Engine) NextWake() (time.Duration, bool) {
	if e.busy {
		return e.stepEnd, true
	}
	var t time.Duration
	found := false
	for _, s := range e.running {
		if s.phase == transferring && (!found || s.readyAt < t) {
			t, found = s.readyAt, true
		}
	}
	return t, found
}

// Advance completes what is due at now (the step, transfers) and starts the
// next step.
func (e *Engine) Advance(now time.Duration) {
	if e.busy && e.stepEnd <= now {
		e.finishStep()
	}
	if !e.busy {
		e.startStep(now)
	}
}

// startStep schedules one step at now, vLLM V1 style: running sequences
// first (one token per decoding sequence, then prefill chunks), then waiting
// requests in arrival order while the token budget, the sequence cap and the
// KV cache allow. A request that does not fit blocks those behind it.
func (e *Engine) startStep(now time.Duration) {
	budget := e.p.MaxBatchedTokens
	e.plan = e.plan[:0]
	for _, s := range e.running {
		if s.phase == transferring && s.readyAt <= now {
			e.arrived(s)
		}
		if s.phase == decoding && budget > 0 {
			e.plan = append(e.plan, item{s: s})
			budget--
		}
	}
	for _, s := range e.running {
		if s.phase == prefilling && budget > 0 {
			c := min(s.r.PromptTokens-s.computed, budget)
			e.plan = append(e.plan, item{s: s, chunk: c})
			budget -= c
		}
	}
	admitted := 0
	for _, s := range e.waiting {
		if len(e.running) >= e.p.MaxSeqs || !e.admit(s, now) {
			break
		}
		admitted++
		e.running = append(e.running, s)
		if s.phase == prefilling && budget > 0 {
			c := min(s.r.PromptTokens-s.computed, budget)
			e.plan = append(e.plan, item{s: s, chunk: c})
			budget -= c
		}
	}
	e.waiting = e.waiting[admitted:]
	if len(e.plan) == 0 {
		e.busy = false
		return
	}
	e.busy = true
	e.stepEnd = now + e.stepTime()
	e.stats.Steps++
	e.stats.Busy += e.stepEnd - now
}

// admit reserves s's blocks (prompt and output: no preemption is modelled,
// so a running sequence always finishes), using its cached prefix.
func (e *Engine) admit(s *seq, now time.Duration) bool {
	r := s.r
	hashes := r.Hashes
	if r.Kind != DecodeOnly {
		// At least one prompt token is computed, for the logits.
		hashes = hashes[:min(len(hashes), (r.PromptTokens-1)/e.p.BlockSize)]
	}
	hits, inLRU := e.kv.match(hashes)
	need := e.blocksFor(r.PromptTokens+r.OutputTokens) - hits
	if need > e.kv.available()-inLRU {
		return false
	}
	s.hashed = e.kv.ref(hashes, hits)
	e.kv.take(need)
	s.anon = need
	s.published = hits
	s.computed = hits * e.p.BlockSize
	r.CachedTokens = s.computed
	r.Admitted = now
	if r.Kind == DecodeOnly {
		r.TransferredTokens = r.PromptTokens - s.computed
		s.phase = transferring
		s.readyAt = now + e.p.TransferFixed + time.Duration(r.TransferredTokens)*e.p.TransferPerToken
		return true
	}
	e.stats.PromptTokens += int64(r.PromptTokens)
	e.stats.CachedTokens += int64(s.computed)
	return true
}

// arrived ends s's transfer: the decoder's cache now holds the prompt.
func (e *Engine) arrived(s *seq) {
	s.computed = s.r.PromptTokens
	e.publish(s)
	s.phase = decoding
}

// publish registers the hashes of s's computed full prompt blocks.
func (e *Engine) publish(s *seq) {
	full := min(s.computed/e.p.BlockSize, len(s.r.Hashes))
	for ; s.published < full; s.published++ {
		if b := e.kv.publish(s.r.Hashes[s.published]); b != nil {
			s.anon--
			s.hashed = append(s.hashed, b)
		}
	}
}

// stepTime is the planned step's duration.
func (e *Engine) stepTime() time.Duration {
	p := &e.p
	var prefill, attn, decodes, context int64
	for _, it := range e.plan {
		if it.chunk > 0 {
			prefill += int64(it.chunk)
			// Each token of the chunk attends to the context before it:
			// on average computed + chunk/2 tokens.
			attn += int64(it.chunk) * (int64(it.s.computed) + int64(it.chunk)/2)
		} else {
			decodes++
			context += int64(it.s.r.PromptTokens + it.s.r.Generated)
		}
	}
	return p.StepBase +
		time.Duration(prefill)*p.PerPrefillToken +
		time.Duration(attn/1000)*p.PerPrefillTokenPer1kContext +
		time.Duration(decodes)*p.PerDecodeSeq +
		time.Duration(context)*p.PerContextToken
}

func (e *Engine) finishStep() {
	now := e.stepEnd
	e.busy = false
	finished := false
	for _, it := range e.plan {
		s, r := it.s, it.s.r
		if it.chunk > 0 {
			s.computed += it.chunk
			e.stats.ComputedTokens += int64(it.chunk)
			e.publish(s)
			if s.computed < r.PromptTokens {
				continue
			}
			s.phase = decoding
		}
		r.Generated++
		e.stats.Generated++
		if r.Generated == 1 {
			r.FirstToken = now
			e.events = append(e.events, Event{r, FirstToken, now})
		} else {
			e.events = append(e.events, Event{r, Token, now})
		}
		if r.Generated >= r.OutputTokens {
			s.done, finished = true, true
			e.kv.release(s.anon, s.hashed)
			s.anon, s.hashed = 0, nil
			r.Finished = now
			e.events = append(e.events, Event{r, Done, now})
		}
	}
	if finished {
		kept := e.running[:0]
		for _, s := range e.running {
			if !s.done {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
}

// String describes the engine's state, for debugging.
func (e *Engine) String() string {
	return fmt.Sprintf("%s: running %d, waiting %d, kv %.0f%%", e.p.Name, len(e.running), len(e.waiting), 100*e.KVUsage())
}
