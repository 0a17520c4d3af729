package calib

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/pdroute/pdroute/tokenest"
)

// ClassResult is one row of the accuracy table: a class's errors for each
// method against each reference tokenizer.
type ClassResult struct {
	Class    string
	Required bool
	Samples  int
	Tokens   int       // cl100k tokens of all samples
	Chars4   [2]Errors // vs cl100k, vs o200k
	Default  [2]Errors
}

// Estimate runs a sample through tokenest: a text as a /v1/completions
// prompt, a chat body as itself.
func Estimate(s Sample, m tokenest.Method) (int, error) {
	body, path := s.Body, "/v1/chat/completions"
	if body == nil {
		body, _ = json.Marshal(map[string]string{"prompt": s.Text})
		path = "/v1/completions"
	}
	r, err := tokenest.Estimate(body, path, m)
	return r.Tokens, err
}

// Evaluate computes the table rows, required classes first.
func Evaluate(set map[string][]Sample) ([]ClassResult, error) {
	var rows []ClassResult
	for _, class := range append(append([]string{}, Required...), Informational...) {
		samples := set[class]
		if len(samples) == 0 {
			continue
		}
		row := ClassResult{Class: class, Samples: len(samples)}
		for _, c := range Required {
			row.Required = row.Required || c == class
		}
		cl := make([]int, len(samples))
		o := make([]int, len(samples))
		for i, s := range samples {
			cl[i], o[i] = s.Cl100k, s.O200k
			row.Tokens += s.Cl100k
		}
		for k, m := range []tokenest.Method{tokenest.Chars4, tokenest.Default} {
			est := make([]int, len(samples))
			for i, s := range samples {
				n, err := Estimate(s, m)
				if err != nil {
					return nil, fmt.Errorf("%s[%d]: %w", class, i, err)
				}
				est[i] = n
			}
			errs := [2]Errors{Summarize(est, cl), Summarize(est, o)}
			if k == 0 {
				row.Chars4 = errs
			} else {
				row.Default = errs
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteReport prints the rows as a Markdown table.
func WriteReport(w io.Writer, rows []ClassResult) error {
	fmt.Fprintln(w, "| class | samples | cl100k tokens | chars4 vs cl100k MAPE / p95 | default vs cl100k MAPE / p95 (bias) | chars4 vs o200k MAPE / p95 | default vs o200k MAPE / p95 (bias) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		name := r.Class
		if !r.Required {
			name += " (info)"
		}
		_, err := fmt.Fprintf(w, "| %s | %d | %d | %.1f %% / %.1f %% | %.1f %% / %.1f %% (%+.1f %%) | %.1f %% / %.1f %% | %.1f %% / %.1f %% (%+.1f %%) |\n",
			name, r.Samples, r.Tokens,
			r.Chars4[0].MAPE, r.Chars4[0].P95, r.Default[0].MAPE, r.Default[0].P95, r.Default[0].Bias,
			r.Chars4[1].MAPE, r.Chars4[1].P95, r.Default[1].MAPE, r.Default[1].P95, r.Default[1].Bias)
		if err != nil {
			return err
		}
	}
	return nil
}
