package sim

import (
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"
)

// Workload is a prepared trace and the request rates to run it at.
type Workload struct {
	Trace *Prepared
	// Rates in requests per second: the trace's arrival times are scaled to
	// each.
	Rates []float64
}

// Bounds define the knees: TTFT p90 under TTFTP90Ms, and for the joint
// knee (when ITLP99Ms > 0) ITL p99 under ITLP99Ms too.
type Bounds struct{ TTFTP90Ms, ITLP99Ms float64 }

// Compare runs every setup on every workload at every rate, on up to
// workers goroutines (0: GOMAXPROCS), printing progress to progress (may be
// nil). Results are in a fixed order and do not depend on workers.
func Compare(workloads []Workload, setups []Setup, seed uint64, bounds Bounds, workers int, progress io.Writer) (*Report, error) {
	type job struct {
		trace *Prepared
		setup *Setup
		rate  float64
		out   *Result
	}
	var jobs []job
	var results []Result
	for _, w := range workloads {
		w.Trace.Warm(setups)
		base := w.Trace.Rate()
		for _, rate := range w.Rates {
			scaled := w.Trace.Scaled(rate / base)
			for i := range setups {
				jobs = append(jobs, job{trace: scaled, setup: &setups[i], rate: rate})
			}
		}
	}
	results = make([]Result, len(jobs))
	for i := range jobs {
		jobs[i].out = &results[i]
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		mu       sync.Mutex
		done     int
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan job)
		start    = time.Now()
		lastShow time.Time
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				r, err := Run(j.setup, j.trace, seed)
				r.Rate = j.rate // the rate asked for, not its float round trip
				*j.out = r
				mu.Lock()
				done++
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if progress != nil && (time.Since(lastShow) > time.Second || done == len(jobs)) {
					lastShow = time.Now()
					el := time.Since(start)
					eta := time.Duration(float64(el) / float64(done) * float64(len(jobs)-done))
					fmt.Fprintf(progress, "sim: %d/%d runs (%s at %.1f req/s: %s), %s elapsed, ~%s left\n",
						done, len(jobs), r.Workload, r.Rate, r.Setup, el.Round(time.Second), eta.Round(time.Second))
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	rep := &Report{Seed: seed, TTFTBoundMs: bounds.TTFTP90Ms, ITLBoundMs: bounds.ITLP99Ms, Results: results}
	if len(setups) > 0 {
		rep.Profile = setups[0].Profile.Name
	}
	rep.ComputeKnees()
	return rep, nil
}
