package mocks

import (
	"context"
	"sync/atomic"
	"time"
)

// scheduler is the engine's batch: at most a fixed number of requests run, the rest
// wait. Its counts are the live gauges of /metrics and /mock/stats.
type scheduler struct {
	slots    chan struct{} // nil: unlimited
	inFlight atomic.Int64  // inference handlers running
	running  atomic.Int64
	waiting  atomic.Int64
	blocks   atomic.Int64 // KV blocks of running requests
	// transferring counts SGLang decodes waiting for their bootstrap rooms.
	transferring atomic.Int64
	// promptTokens and generationTokens are the /metrics token counters; unlike the
	// /mock/stats counters they survive POST /mock/reset, as a Prometheus counter must.
	promptTokens     atomic.Int64
	generationTokens atomic.Int64
}

func newScheduler(maxConcurrency int) *scheduler {
	q := &scheduler{}
	if maxConcurrency > 0 {
		q.slots = make(chan struct{}, maxConcurrency)
	}
	return q
}

// acquire waits for a slot and counts the request as running with its KV blocks
// until release is called. It fails only when ctx ends first.
func (q *scheduler) acquire(ctx context.Context, blocks int64) (release func(), err error) {
	if q.slots != nil {
		q.waiting.Add(1)
		select {
		case q.slots <- struct{}{}:
			q.waiting.Add(-1)
		case <-ctx.Done():
			q.waiting.Add(-1)
			return nil, ctx.Err()
		}
	}
	q.running.Add(1)
	q.blocks.Add(blocks)
	return func() {
		q.blocks.Add(-blocks)
		q.running.Add(-1)
		if q.slots != nil {
			<-q.slots
		}
	}, nil
}

// sleep waits d or until ctx ends; it reports ctx's error in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
