package mocks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Control is a client of a mock's /mock/ API. It uses plain HTTP, so it works the same
// against an in-process Server, a mockengine process, or a mock behind Envoy.
type Control struct {
	// BaseURL is the mock's API base URL, "http://host:port".
	BaseURL string
	// HTTP is the client used. Default http.DefaultClient; calls are bounded by their
	// context.
	HTTP *http.Client
}

// NewControl returns a Control for the mock at baseURL.
func NewControl(baseURL string) *Control { return &Control{BaseURL: baseURL} }

// RequestFilter selects recorded requests; zero fields match everything.
type RequestFilter struct {
	Since uint64 // only requests with Seq > Since
	Path  string // only this path
	Kind  string // only prefill, decode or tokenize
}

// Requests returns the recorded requests that match f, oldest first.
func (c *Control) Requests(ctx context.Context, f RequestFilter) ([]RecordedRequest, error) {
	q := url.Values{}
	if f.Since > 0 {
		q.Set("since", strconv.FormatUint(f.Since, 10))
	}
	if f.Path != "" {
		q.Set("path", f.Path)
	}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	var out []RecordedRequest
	err := c.do(ctx, http.MethodGet, "/mock/requests?"+q.Encode(), nil, &out)
	return out, err
}

// Reset clears records, faults, counters and held KV state and restores the
// configured latency.
func (c *Control) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/mock/reset", nil, nil)
}

// SetFaults replaces the active faults (none clears them).
func (c *Control) SetFaults(ctx context.Context, faults ...Fault) error {
	if faults == nil {
		faults = []Fault{}
	}
	return c.do(ctx, http.MethodPost, "/mock/faults", faultsBody{Faults: faults}, nil)
}

// Faults returns the active faults with their remaining counts.
func (c *Control) Faults(ctx context.Context) ([]Fault, error) {
	var fb faultsBody
	err := c.do(ctx, http.MethodGet, "/mock/faults", nil, &fb)
	return fb.Faults, err
}

// Stats returns the counters and gauges.
func (c *Control) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := c.do(ctx, http.MethodGet, "/mock/stats", nil, &st)
	return st, err
}

// Latency returns the current latency model.
func (c *Control) Latency(ctx context.Context) (Latency, error) {
	var l Latency
	err := c.do(ctx, http.MethodGet, "/mock/latency", nil, &l)
	return l, err
}

// SetLatency replaces the latency model until the next Reset.
func (c *Control) SetLatency(ctx context.Context, l Latency) error {
	return c.do(ctx, http.MethodPost, "/mock/latency", l, nil)
}

func (c *Control) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("mock %s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
