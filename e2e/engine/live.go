package engine

import (
	"sync"
	"time"
)

// Live runs an Engine on the wall clock, for the mock engines: one
// goroutine steps the engine at its wake times, scaled by Scale (0.5 runs
// the model twice as fast as the GPU it describes), and hands each request
// its events. It is safe for concurrent use.
type Live struct {
	mu      sync.Mutex
	e       *Engine
	scale   float64
	start   time.Time
	subs    map[*Request]chan Event
	kick    chan struct{}
	stop    chan struct{}
	stopped sync.WaitGroup
}

// NewLive starts a live engine; scale ≤ 0 means 1. Close stops it.
func NewLive(p Params, scale float64) (*Live, error) {
	e, err := New(p)
	if err != nil {
		return nil, err
	}
	if scale <= 0 {
		scale = 1
	}
	l := &Live{e: e, scale: scale, start: time.Now(), subs: map[*Request]chan Event{},
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	l.stopped.Add(1)
	go l.loop()
	return l, nil
}

// now is the engine clock: wall time since start, unscaled.
func (l *Live) now() time.Duration { return time.Duration(float64(time.Since(l.start)) / l.scale) }

// Submit queues r and returns the channel of its events (FirstToken, Token…,
// Done), buffered so the engine never waits for a slow reader.
func (l *Live) Submit(r *Request) <-chan Event {
	ch := make(chan Event, max(r.OutputTokens, 1)+2)
	l.mu.Lock()
	l.subs[r] = ch
	now := l.now()
	l.catchUp(now)
	l.e.Submit(r, now)
	l.dispatch()
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return ch
}

// Stats returns the engine's queue: running, waiting and KV usage.
func (l *Live) Stats() (running, waiting int, kvUsage float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.e.Running(), l.e.Waiting(), l.e.KVUsage()
}

// Cancel forgets r's events (its client went away); the engine still
// finishes it, as an engine does until it notices.
func (l *Live) Cancel(r *Request) {
	l.mu.Lock()
	delete(l.subs, r)
	l.mu.Unlock()
}

// Close stops the goroutine.
func (l *Live) Close() {
	close(l.stop)
	l.stopped.Wait()
}

func (l *Live) dispatch() {
	for _, ev := range l.e.Events() {
		if ch, ok := l.subs[ev.Req]; ok {
			ch <- ev
			if ev.Kind == Done {
				delete(l.subs, ev.Req)
			}
		}
	}
}

func (l *Live) loop() {
	defer l.stopped.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l.mu.Lock()
		now := l.now()
		l.catchUp(now)
		wake, ok := l.e.NextWake()
		l.mu.Unlock()
		wait := time.Hour
		if ok {
			wait = time.Duration(float64(wake-now) * l.scale)
		}
		timer.Reset(wait)
		select {
		case <-l.stop:
			return
		case <-l.kick:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// catchUp advances the engine through every wake up to now.
func (l *Live) catchUp(now time.Duration) {
	for {
		wake, ok := l.e.NextWake()
		if !ok || wake > now {
			return
		}
		l.e.Advance(wake)
		l.dispatch()
	}
}
