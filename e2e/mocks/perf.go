package mocks

import (
	"context"
	"errors"
	"hash/fnv"

	"github.com/pdroute/pdroute/e2e/engine"
)

// perfSubmit runs req through the performance model (Config.Perf) and waits
// for its first token. It returns the wait for each further token and a
// release to call when the answer is over. A decode whose KV was transferred
// is a DecodeOnly request; a prefill engine's request is PrefillOnly.
func (s *Server) perfSubmit(ctx context.Context, req *request, rp *reply, transferred bool) (next func() error, release func(), err error) {
	out := 1
	for _, g := range rp.gens {
		out = max(out, len(g.ids))
	}
	var ids []int
	if len(req.prompts) > 0 {
		ids = req.prompts[0]
	}
	kind := engine.Full
	switch {
	case transferred:
		kind = engine.DecodeOnly
	case s.cfg.Role == Prefill:
		kind = engine.PrefillOnly
	}
	r := &engine.Request{Kind: kind, PromptTokens: req.promptTokens(), OutputTokens: out,
		Hashes: idBlockHashes(ids, s.cfg.Perf.BlockSize)}
	s.sched.running.Add(1)
	events := s.live.Submit(r)
	done := false
	release = func() {
		s.sched.running.Add(-1)
		if !done {
			s.live.Cancel(r)
		}
	}
	wait := func() error {
		select {
		case ev := <-events:
			if ev.Kind == engine.Done {
				done = true
				if r.Rejected {
					return errors.New("prompt does not fit in the modelled KV cache")
				}
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(); err != nil {
		release()
		return nil, nil, err
	}
	return wait, release, nil
}

// idBlockHashes are the chained hashes of full blocks of token ids, the
// mocks' equivalent of engine.BlockHashes over text.
func idBlockHashes(ids []int, blockSize int) []uint64 {
	out := make([]uint64, len(ids)/blockSize)
	var prev uint64
	for i := range out {
		h := fnv.New64a()
		var b [8]byte
		for k := range 8 {
			b[k] = byte(prev >> (8 * k))
		}
		h.Write(b[:])
		for _, id := range ids[i*blockSize : (i+1)*blockSize] {
			h.Write([]byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)})
		}
		prev = h.Sum64() | 1
		out[i] = prev
	}
	return out
}

// PromptTokens is how many prompt tokens a mock engine counts in an
// OpenAI-style body for path (/v1/completions or /v1/chat/completions): the
// length the performance model charges, for comparing with the simulator.
func PromptTokens(path string, body []byte) (int, error) {
	ep := epCompletions
	if path == "/v1/chat/completions" {
		ep = epChat
	}
	req, err := parseRequest(ep, body, 1<<30)
	if err != nil {
		return 0, err
	}
	return req.promptTokens(), nil
}
