package sim

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Knee is the highest request rate at which a setup kept TTFT p90 under
// the bound (0 when it never did), for one workload. With an ITL bound,
// JointRPS is the same under both bounds (TTFT p90 and ITL p99).
type Knee struct {
	Workload string  `json:"workload"`
	Setup    string  `json:"setup"`
	RateRPS  float64 `json:"knee_rps"`
	JointRPS float64 `json:"joint_knee_rps,omitempty"`
}

// Report is everything one comparison produced.
type Report struct {
	Profile     string  `json:"profile"`
	Seed        uint64  `json:"seed"`
	TTFTBoundMs float64 `json:"ttft_p90_bound_ms"`
	// ITLBoundMs, when > 0, adds a joint knee: TTFT p90 and ITL p99 both
	// under their bounds.
	ITLBoundMs float64  `json:"itl_p99_bound_ms,omitempty"`
	Results    []Result `json:"results"`
	Knees      []Knee   `json:"knees"`
}

// ComputeKnees fills r.Knees from r.Results: per workload and setup, the
// highest rate whose TTFT p90 is under the bound with nothing failed, with
// every lower rate also under it.
func (r *Report) ComputeKnees() {
	r.Knees = nil
	for _, w := range r.workloads() {
		for _, s := range r.setups(w) {
			k := Knee{Workload: w, Setup: s}
			ttftOK, jointOK := true, r.ITLBoundMs > 0
			for _, x := range r.rows(w, s) {
				ttftOK = ttftOK && x.TTFTP90 <= r.TTFTBoundMs && x.Failed == 0
				jointOK = jointOK && ttftOK && x.ITLP99 <= r.ITLBoundMs
				if ttftOK {
					k.RateRPS = x.Rate
				}
				if jointOK {
					k.JointRPS = x.Rate
				}
			}
			r.Knees = append(r.Knees, k)
		}
	}
}

func (r *Report) workloads() []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range r.Results {
		if !seen[x.Workload] {
			seen[x.Workload] = true
			out = append(out, x.Workload)
		}
	}
	return out
}

func (r *Report) setups(w string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range r.Results {
		if x.Workload == w && !seen[x.Setup] {
			seen[x.Setup] = true
			out = append(out, x.Setup)
		}
	}
	return out
}

// rows are a setup's results on a workload by increasing rate.
func (r *Report) rows(w, s string) []Result {
	var out []Result
	for _, x := range r.Results {
		if x.Workload == w && x.Setup == s {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rate < out[j].Rate })
	return out
}

func (r *Report) jointKnee(w, s string) float64 {
	for _, k := range r.Knees {
		if k.Workload == w && k.Setup == s {
			return k.JointRPS
		}
	}
	return 0
}

func (r *Report) knee(w, s string) float64 {
	for _, k := range r.Knees {
		if k.Workload == w && k.Setup == s {
			return k.RateRPS
		}
	}
	return 0
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes, per workload, the knees (best first) and the full
// table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Routing simulator results\n\nProfile %s, seed %d, knee = highest rate with TTFT p90 ≤ %.0f ms", r.Profile, r.Seed, r.TTFTBoundMs)
	if r.ITLBoundMs > 0 {
		fmt.Fprintf(&b, "; joint knee: and ITL p99 ≤ %.0f ms", r.ITLBoundMs)
	}
	b.WriteString(". A knee equal to the highest rate run may lie higher.\n")
	for _, wl := range r.workloads() {
		fmt.Fprintf(&b, "\n## %s\n\n", wl)
		if r.ITLBoundMs > 0 {
			b.WriteString("| setup | knee (req/s) | joint knee (req/s) |\n|---|---:|---:|\n")
		} else {
			b.WriteString("| setup | knee (req/s) |\n|---|---:|\n")
		}
		setups := r.setups(wl)
		sort.SliceStable(setups, func(i, j int) bool {
			ki, kj := r.knee(wl, setups[i]), r.knee(wl, setups[j])
			return ki > kj || ki == kj && r.jointKnee(wl, setups[i]) > r.jointKnee(wl, setups[j])
		})
		for _, s := range setups {
			if r.ITLBoundMs > 0 {
				fmt.Fprintf(&b, "| %s | %g | %g |\n", s, r.knee(wl, s), r.jointKnee(wl, s))
			} else {
				fmt.Fprintf(&b, "| %s | %g |\n", s, r.knee(wl, s))
			}
		}
		b.WriteString("\n| setup | req/s | TTFT p50 | p90 | p99 (ms) | ITL p50 | p99 (ms) | out tok/s | prefix hit | PD | util P | util D | failed |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.setups(wl) {
			for _, x := range r.rows(wl, s) {
				fmt.Fprintf(&b, "| %s | %g | %.0f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %d |\n",
					s, x.Rate, x.TTFTP50, x.TTFTP90, x.TTFTP99, x.ITLP50, x.ITLP99, x.OutputTokensPerSec,
					100*x.PrefixHitRate, 100*x.DisaggregatedFraction, 100*x.PrefillUtil, 100*x.DecodeUtil, x.Failed)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePlots writes one PNG per workload into dir: TTFT p90 (log scale)
// against request rate, one line per setup; with many setups only the
// `keep` with the highest knees (ties: lowest TTFT p90 at the highest rate)
// are drawn, always with the never/always baselines, the best threshold
// configuration and the best joint knee among them, so the plot stays
// readable. It returns the files written.
func (r *Report) WritePlots(dir string, keep int) ([]string, error) {
	var files []string
	for _, wl := range r.workloads() {
		setups := r.setups(wl)
		score := func(s string) (float64, float64) {
			rows := r.rows(wl, s)
			return r.knee(wl, s), -rows[len(rows)-1].TTFTP90
		}
		sort.SliceStable(setups, func(i, j int) bool {
			ki, ti := score(setups[i])
			kj, tj := score(setups[j])
			return ki > kj || ki == kj && ti > tj
		})
		// The baselines always show.
		chosen := []string{}
		for _, s := range setups {
			if strings.HasPrefix(s, "never ") && strings.HasSuffix(s, " round_robin") || strings.HasPrefix(s, "always ") && strings.HasSuffix(s, " round_robin") {
				chosen = append(chosen, s)
			}
		}
		// And the best threshold configuration, so P/D is always on the plot,
		// and the best under the joint bound.
		for _, s := range setups {
			if strings.HasPrefix(s, "t=") {
				chosen = append(chosen, s)
				break
			}
		}
		if r.ITLBoundMs > 0 {
			best := setups[0]
			for _, s := range setups {
				if r.jointKnee(wl, s) > r.jointKnee(wl, best) {
					best = s
				}
			}
			if !contains(chosen, best) {
				chosen = append(chosen, best)
			}
		}
		for _, s := range setups {
			if len(chosen) >= keep {
				break
			}
			if !contains(chosen, s) {
				chosen = append(chosen, s)
			}
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: TTFT p90 vs request rate (%s)", wl, r.Profile)
		p.X.Label.Text = "request rate (req/s)"
		p.Y.Label.Text = "TTFT p90 (ms, log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		p.Add(plotter.NewGrid())
		bound := plotter.NewFunction(func(float64) float64 { return r.TTFTBoundMs })
		bound.Color = color.Gray{Y: 120}
		bound.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		p.Add(bound)
		p.Legend.Add(fmt.Sprintf("bound %.0f ms", r.TTFTBoundMs), bound)
		for i, s := range chosen {
			var pts plotter.XYs
			for _, x := range r.rows(wl, s) {
				pts = append(pts, plotter.XY{X: x.Rate, Y: math.Max(x.TTFTP90, 1)})
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return files, err
			}
			line.Color = plotutil.Color(i)
			line.Width = vg.Points(1.5)
			line.Dashes = plotutil.Dashes(i / 7)
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			p.Add(line, points)
			p.Legend.Add(s, line, points)
		}
		p.Legend.ThumbnailWidth = vg.Points(24)
		name := filepath.Join(dir, "ttft-p90-"+wl+".png")
		if err := p.Save(9*vg.Inch, 6*vg.Inch, name); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// WriteAll writes results.md, results.json and the plots into dir.
func (r *Report) WriteAll(dir string, keep int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	files := []string{filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json")}
	for i, write := range []func(io.Writer) error{r.WriteMarkdown, r.WriteJSON} {
		f, err := os.Create(files[i])
		if err != nil {
			return nil, err
		}
		if err := write(f); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	plots, err := r.WritePlots(dir, keep)
	return append(files, plots...), err
}
