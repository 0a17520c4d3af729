// Command pdroute-sim compares routing configurations on a workload trace
// with the routing simulator (e2e/sim): the filter's own decision and
// balancing code, engines modelled on GPUs, simulated time.
//
//	pdroute-sim -out build/sim                          # the shipped workloads and comparison
//	pdroute-sim -trace my.jsonl -out build/sim          # a trace, the shipped comparison
//	pdroute-sim -trace my.jsonl -config a.json -config b.json -rates 2,4,8
//	pdroute-sim -workload tenants -rate 5 -requests 1000 -write-trace t.jsonl
//
// With -config, each file is a plugin configuration (as given to the
// filter); every endpoint of its pools is one engine of -profile.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pdroute/pdroute/e2e/engine"
	"github.com/pdroute/pdroute/e2e/sim"
	"github.com/pdroute/pdroute/e2e/sim/trace"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pdroute-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	var configs list
	var (
		tracePath  = flag.String("trace", "", "JSONL trace to run (default: the shipped workloads)")
		out        = flag.String("out", "build/sim", "output directory (results.md, results.json, PNG plots)")
		profile    = flag.String("profile", engine.DefaultProfile, "engine profile: llama-3.1-8b-h100 or llama-3.1-70b-h100-tp4")
		gpus       = flag.Int("gpus", 8, "engines per configuration in the shipped comparison")
		rates      = flag.String("rates", "", "comma-separated request rates (req/s); default: per workload, or 0.5x to 4x a trace's own rate")
		requests   = flag.Int("requests", 600, "requests per shipped workload")
		seed       = flag.Uint64("seed", 1, "seed of the generators and balancers")
		bound      = flag.Float64("ttft-bound-ms", 2000, "TTFT p90 bound defining the knee")
		itlBound   = flag.Float64("itl-bound-ms", 50, "ITL p99 bound of the joint knee (with the TTFT bound); 0 = no joint knee")
		workloads  = flag.String("workloads", "", "comma-separated shipped workloads (default all)")
		keep       = flag.Int("plot-lines", 8, "at most this many configurations per plot (the baselines and the best knees)")
		workers    = flag.Int("workers", 0, "parallel runs (default GOMAXPROCS)")
		genOnly    = flag.String("workload", "", "with -write-trace: the workload to generate")
		genRate    = flag.Float64("rate", 4, "with -write-trace: request rate (req/s)")
		genRamp    = flag.Float64("ramp-to", 0, "with -write-trace: ramp the rate to this (req/s)")
		writeTrace = flag.String("write-trace", "", "generate -workload into this file and exit")
		misses     = flag.Bool("misses", false, "print each aggregated run's prefix-cache misses by cause (first visit, give-way, eviction, pending prefill…) to stderr")
		study      = flag.String("study", "", `"cache" or "uncached": a study of docs/ROUTING.md ("Cache-aware routing") instead of the shipped matrix`)
	)
	flag.Var(&configs, "config", "plugin configuration JSON file to compare (repeatable; default: the shipped matrix)")
	flag.Parse()
	if *misses {
		sim.MissReport = func(setup, workload string, rate float64, m *sim.Misses) {
			fmt.Fprintf(os.Stderr, "misses: %s, %s, %.0f req/s: %s\n", workload, setup, rate, m)
		}
	}

	prof, err := engine.Profile(*profile)
	if err != nil {
		return err
	}
	if *writeTrace != "" {
		w, err := trace.Lookup(*genOnly)
		if err != nil {
			return err
		}
		reqs, err := w.Generate(trace.Load{Rate: *genRate, RampTo: *genRamp, Requests: *requests, Seed: *seed})
		if err != nil {
			return err
		}
		f, err := os.Create(*writeTrace)
		if err != nil {
			return err
		}
		if err := trace.Write(f, reqs); err != nil {
			return err
		}
		return f.Close()
	}

	var setups []sim.Setup
	matrix := sim.Matrix
	switch *study {
	case "":
	case "cache":
		matrix = sim.CacheMatrix
	case "uncached":
		matrix = sim.UncachedMatrix
	default:
		return fmt.Errorf("-study: unknown study %q (want cache or uncached)", *study)
	}
	if len(configs) == 0 {
		for _, v := range matrix(*gpus) {
			s, err := v.Setup(prof)
			if err != nil {
				return err
			}
			setups = append(setups, s)
		}
	}
	for _, path := range configs {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s, err := sim.UserSetup(strings.TrimSuffix(filepath.Base(path), ".json"), raw, prof)
		if err != nil {
			return err
		}
		setups = append(setups, s)
	}
	userRates, err := parseRates(*rates)
	if err != nil {
		return err
	}

	var wls []sim.Workload
	if *tracePath != "" {
		f, err := os.Open(*tracePath)
		if err != nil {
			return err
		}
		reqs, err := trace.Read(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *tracePath, err)
		}
		name := strings.TrimSuffix(filepath.Base(*tracePath), filepath.Ext(*tracePath))
		p := sim.Prepare(name, reqs, prof.BlockSize)
		r := userRates
		if r == nil {
			base := p.Rate()
			if base == 0 {
				return errors.New("the trace needs at least two arrival times to have a rate; give -rates")
			}
			for _, f := range []float64{0.5, 1, 1.5, 2, 3, 4} {
				r = append(r, round(base*f))
			}
		}
		wls = append(wls, sim.Workload{Trace: p, Rates: r})
	} else {
		for _, w := range trace.Workloads {
			if *workloads != "" && !strings.Contains(","+*workloads+",", ","+w.Name+",") {
				continue
			}
			reqs, err := w.Generate(trace.Load{Rate: 4, Requests: *requests, Seed: *seed})
			if err != nil {
				return err
			}
			r := userRates
			if r == nil {
				r = defaultRates[w.Name]
				if *study != "" {
					r = cacheRates[w.Name]
				}
			}
			wls = append(wls, sim.Workload{Trace: sim.Prepare(w.Name, reqs, prof.BlockSize), Rates: r})
		}
	}
	n := 0
	for _, w := range wls {
		n += len(w.Rates) * len(setups) * len(w.Trace.Reqs)
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "sim: %d workloads × %d configurations, %d simulated requests, profile %s\n", len(wls), len(setups), n, prof.Name)
	rep, err := sim.Compare(wls, setups, *seed, sim.Bounds{TTFTP90Ms: *bound, ITLP99Ms: *itlBound}, *workers, os.Stderr)
	if err != nil {
		return err
	}
	el := time.Since(start)
	files, err := rep.WriteAll(*out, *keep)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "sim: %d simulated requests in %s (%.0f requests/s)\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	for _, f := range files {
		fmt.Println(f)
	}
	return nil
}

// defaultRates are the loads of the shipped workloads on 8 engines of the
// 8B profile: from light to past the knee of most configurations.
var defaultRates = map[string][]float64{
	"tenants": {4, 8, 12, 16, 24, 32},
	"chat":    {8, 16, 32, 64, 96, 128},
	"agentic": {4, 8, 12, 16, 24, 32},
	"rag":     {2, 4, 8, 12, 16, 20},
	"short":   {16, 32, 64, 128, 192, 256},
	"mix":     {4, 8, 12, 16, 20, 24},
}

// cacheRates are the loads of the cache study: finer steps around the
// knees, and beyond round robin's so that throughput at saturation shows.
// On tenants every strategy runs every 4 req/s from 28 to 72, past every
// strategy's saturation, so that "the best throughput within round robin's
// TTFT p90" is not decided by a gap in the grid.
var cacheRates = map[string][]float64{
	"tenants": {16, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72},
	"chat":    {16, 32, 48, 64},
	"agentic": {8, 16, 24, 32, 40, 48},
	"rag":     {4, 8, 12, 16, 20},
	"short":   {32, 64, 96},
	"mix":     {8, 12, 16, 20, 24, 32},
}

func parseRates(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("-rates: %q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func round(x float64) float64 {
	if x >= 10 {
		return float64(int(x + 0.5))
	}
	return float64(int(x*10+0.5)) / 10
}
