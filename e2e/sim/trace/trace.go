// Package trace owns the simulator's workload traces: the JSONL format (one
// request per line, docs/SIMULATOR.md), its parser, the deterministic
// rendering of segments to text and of requests to the HTTP bodies the
// filter receives, and generators of the shipped workloads.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

// Segment is a piece of a prompt: a message (chat) or a stretch of text
// (completions). Equal ids render to equal text.
type Segment struct {
	ID     string `json:"id"`
	Tokens int    `json:"tokens"`
	// Role is the chat role: system, user, assistant or tool. Default user.
	Role string `json:"role,omitempty"`
}

// Request is one line of a trace.
type Request struct {
	// AtMs is the arrival time in milliseconds from the trace's start.
	AtMs     float64   `json:"at_ms"`
	Segments []Segment `json:"segments"`
	// OutputTokens is how many tokens the answer has.
	OutputTokens int `json:"output_tokens"`
	// API is "chat" (default) or "completions".
	API string `json:"api,omitempty"`
}

// Limits on what a trace may hold: bounds on memory and time, far above any
// real prompt.
const (
	MaxSegmentTokens = 1_000_000
	MaxOutputTokens  = 1_000_000
	MaxSegments      = 10_000
	MaxIDBytes       = 256
	MaxLineBytes     = 16 << 20
)

// Error is a problem with one line of a trace.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("trace: line %d: %s", e.Line, e.Msg) }

// Read parses a JSONL trace. Blank lines are skipped. Unknown fields are
// errors (a misspelt field would otherwise silently take its default). A
// segment id must keep its token count on every line. Requests are returned
// in arrival order (stable for equal times).
func Read(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	var out []Request
	seen := map[string]seenSegment{}
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		req, err := parseLine(b)
		if err != nil {
			return nil, &Error{line, err.Error()}
		}
		for _, s := range req.Segments {
			if prev, ok := seen[s.ID]; ok && prev.tokens != s.Tokens {
				return nil, &Error{line, fmt.Sprintf("segment %q has %d tokens, but %d on line %d", s.ID, s.Tokens, prev.tokens, prev.line)}
			} else if !ok {
				seen[s.ID] = seenSegment{line, s.Tokens}
			}
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &Error{line + 1, fmt.Sprintf("longer than %d bytes", MaxLineBytes)}
		}
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("trace: no requests")
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].AtMs < out[j].AtMs })
	return out, nil
}

type seenSegment struct{ line, tokens int }

func parseLine(b []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("not a request object: %v", err)
	}
	if dec.More() {
		return req, errors.New("more than one JSON value on the line")
	}
	return req, req.Check()
}

// Check validates a request and applies its defaults (api, roles).
func (r *Request) Check() error {
	if math.IsNaN(r.AtMs) || math.IsInf(r.AtMs, 0) || r.AtMs < 0 {
		return fmt.Errorf("at_ms must be a finite number >= 0, got %v", r.AtMs)
	}
	switch r.API {
	case "":
		r.API = "chat"
	case "chat", "completions":
	default:
		return fmt.Errorf("api must be \"chat\" or \"completions\", got %q", r.API)
	}
	if r.OutputTokens < 1 || r.OutputTokens > MaxOutputTokens {
		return fmt.Errorf("output_tokens must be in [1, %d], got %d", MaxOutputTokens, r.OutputTokens)
	}
	if len(r.Segments) == 0 || len(r.Segments) > MaxSegments {
		return fmt.Errorf("segments: need 1 to %d, got %d", MaxSegments, len(r.Segments))
	}
	for i := range r.Segments {
		s := &r.Segments[i]
		if s.ID == "" || len(s.ID) > MaxIDBytes {
			return fmt.Errorf("segments[%d].id must be 1 to %d bytes", i, MaxIDBytes)
		}
		if s.Tokens < 1 || s.Tokens > MaxSegmentTokens {
			return fmt.Errorf("segments[%d].tokens must be in [1, %d], got %d", i, MaxSegmentTokens, s.Tokens)
		}
		switch s.Role {
		case "":
			s.Role = "user"
		case "system", "user", "assistant", "tool":
		default:
			return fmt.Errorf("segments[%d].role must be system, user, assistant or tool, got %q", i, s.Role)
		}
	}
	return nil
}

// Write writes requests as JSONL.
func Write(w io.Writer, reqs []Request) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range reqs {
		if err := enc.Encode(&reqs[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// PromptTokens is the sum of the request's segment tokens: the prompt
// length the engines are charged for.
func (r *Request) PromptTokens() int {
	n := 0
	for _, s := range r.Segments {
		n += s.Tokens
	}
	return n
}

// Scale returns reqs with arrival times divided by factor: factor 2 is twice
// the request rate.
func Scale(reqs []Request, factor float64) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.AtMs /= factor
		out[i] = r
	}
	return out
}

// Rate is the mean request rate (requests per second) of a trace.
func Rate(reqs []Request) float64 {
	if len(reqs) < 2 {
		return 0
	}
	span := reqs[len(reqs)-1].AtMs - reqs[0].AtMs
	if span <= 0 {
		return math.Inf(1)
	}
	return float64(len(reqs)-1) / (span / 1000)
}
