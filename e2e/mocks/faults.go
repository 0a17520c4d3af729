package mocks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Fault types. Request faults act on an inference request; notify faults act on the
// ZeroMQ notifications an LMCache prefiller sends after a prefill.
const (
	// FaultStatus answers Status (default 500) with Body (default an engine-shaped
	// error) instead of serving the request.
	FaultStatus = "status"
	// FaultHang never answers; the handler returns when the client goes away.
	FaultHang = "hang"
	// FaultReset closes the connection abruptly (TCP RST): before the response, or for
	// a stream after AfterTokens tokens.
	FaultReset = "reset"
	// FaultMissingParams makes a prefill answer 2xx without kv_transfer_params (vLLM,
	// LMCache), or never publish its room (SGLang, the silent prefill failure).
	FaultMissingParams = "missing_params"
	// FaultDelay waits DelayMS before serving the request.
	FaultDelay = "delay"
	// FaultNotifyDelay waits DelayMS before sending the ZeroMQ notifications.
	FaultNotifyDelay = "notify_delay"
	// FaultNotifyDrop does not send the notifications of Ranks (all ranks when empty).
	FaultNotifyDrop = "notify_drop"
	// FaultNotifyDuplicate sends every notification twice.
	FaultNotifyDuplicate = "notify_duplicate"
)

// Fault is one entry of POST /mock/faults.
type Fault struct {
	// Type is one of the Fault* constants.
	Type string `json:"type"`
	// Count applies the fault to the next Count matching requests, then drops it.
	// 0 means every matching request.
	Count int `json:"count,omitempty"`
	// Probability applies the fault to a matching request with this probability
	// (seeded by Config.Seed). 0 means always.
	Probability float64 `json:"probability,omitempty"`
	// Paths restricts the fault to these request paths. Empty means the inference
	// paths (/v1/completions, /v1/chat/completions, /generate); /tokenize, /metrics and
	// /health are hit only when listed. /mock/ is never faulted.
	Paths []string `json:"paths,omitempty"`
	// Kind restricts the fault to "prefill" or "decode" requests; empty means both.
	Kind string `json:"kind,omitempty"`
	// Status is the HTTP status of a status fault. Default 500.
	Status int `json:"status,omitempty"`
	// Body is the response body of a status fault, sent verbatim. Default: the
	// engine's error JSON with the message "mock: injected fault".
	Body string `json:"body,omitempty"`
	// DelayMS is the wait of a delay or notify_delay fault.
	DelayMS int `json:"delay_ms,omitempty"`
	// AfterTokens lets a reset fault on a streamed response send this many tokens
	// first. 0 resets before any response byte.
	AfterTokens int `json:"after_tokens,omitempty"`
	// Ranks are the TP ranks whose notification a notify_drop fault drops; empty
	// means all.
	Ranks []int `json:"ranks,omitempty"`
}

func (f Fault) notify() bool {
	return f.Type == FaultNotifyDelay || f.Type == FaultNotifyDrop || f.Type == FaultNotifyDuplicate
}

// faultsBody is the JSON of POST and GET /mock/faults.
type faultsBody struct {
	Faults []Fault `json:"faults"`
}

// parseFaults reads a POST /mock/faults body and checks every entry.
func parseFaults(body []byte) ([]Fault, error) {
	var fb faultsBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fb); err != nil {
		return nil, fmt.Errorf("faults: %v", err)
	}
	for i := range fb.Faults {
		f := &fb.Faults[i]
		bad := func(format string, args ...any) error {
			return fmt.Errorf("faults[%d]: %s", i, fmt.Sprintf(format, args...))
		}
		switch f.Type {
		case FaultStatus:
			if f.Status == 0 {
				f.Status = 500
			}
			if f.Status < 200 || f.Status > 599 {
				return nil, bad("status %d out of range", f.Status)
			}
		case FaultHang, FaultReset, FaultMissingParams, FaultNotifyDuplicate, FaultNotifyDrop:
		case FaultDelay, FaultNotifyDelay:
			if f.DelayMS <= 0 {
				return nil, bad("%s needs a positive delay_ms", f.Type)
			}
		default:
			return nil, bad("unknown type %q", f.Type)
		}
		switch {
		case f.Count < 0:
			return nil, bad("count must not be negative")
		case f.Probability < 0 || f.Probability > 1:
			return nil, bad("probability must be in [0, 1]")
		case f.Kind != "" && f.Kind != kindPrefill && f.Kind != kindDecode:
			return nil, bad("kind must be prefill, decode or empty")
		case f.DelayMS < 0 || f.AfterTokens < 0:
			return nil, bad("delay_ms and after_tokens must not be negative")
		}
	}
	return fb.Faults, nil
}

// plan is what the faults matching one request ask for.
type plan struct {
	delay         time.Duration
	final         *Fault // the status, hang or reset fault, if any
	missingParams bool
	applied       []string // fault types, for the record and the counters
}

// notifyPlan is what the notify faults matching one prefill ask for.
type notifyPlan struct {
	delay     time.Duration
	drop      func(rank int) bool
	duplicate bool
	applied   []string
}

// faultSet is the active faults, in the order they were posted.
type faultSet struct {
	mu   sync.Mutex
	list []Fault
	rng  *rand.Rand
}

func newFaultSet(seed uint64) *faultSet {
	return &faultSet{rng: rand.New(rand.NewPCG(seed, seed))}
}

func (fs *faultSet) set(list []Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.list = slices.Clone(list)
}

func (fs *faultSet) snapshot() []Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]Fault, 0, len(fs.list))
	return append(out, fs.list...)
}

// take returns the faults that apply now to a request of kind on path (notify faults
// when notify is set), at most one per type, and uses up their counts.
func (fs *faultSet) take(path, kind string, notify bool) []Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []Fault
	seen := map[string]bool{}
	kept := fs.list[:0]
	for _, f := range fs.list {
		match := f.notify() == notify && !seen[f.Type] &&
			(f.Kind == "" || f.Kind == kind) && fs.pathMatches(f, path, notify)
		if match && f.Probability > 0 && fs.rng.Float64() >= f.Probability {
			match = false
		}
		if match {
			seen[f.Type] = true
			out = append(out, f)
			if f.Count > 0 {
				f.Count--
				if f.Count == 0 {
					continue
				}
			}
		}
		kept = append(kept, f)
	}
	fs.list = kept
	return out
}

func (fs *faultSet) pathMatches(f Fault, path string, notify bool) bool {
	if notify {
		return true
	}
	if len(f.Paths) == 0 {
		return inferencePaths[path]
	}
	return slices.Contains(f.Paths, path)
}

var inferencePaths = map[string]bool{
	"/v1/completions":      true,
	"/v1/chat/completions": true,
	"/generate":            true,
}

func requestPlan(faults []Fault) plan {
	var p plan
	for i := range faults {
		f := faults[i]
		switch f.Type {
		case FaultDelay:
			p.delay = time.Duration(f.DelayMS) * time.Millisecond
		case FaultMissingParams:
			p.missingParams = true
		case FaultStatus, FaultHang, FaultReset:
			if p.final != nil {
				continue
			}
			p.final = &f
		}
		p.applied = append(p.applied, f.Type)
	}
	return p
}

func notifyPlanOf(faults []Fault) notifyPlan {
	p := notifyPlan{drop: func(int) bool { return false }}
	for _, f := range faults {
		switch f.Type {
		case FaultNotifyDelay:
			p.delay = time.Duration(f.DelayMS) * time.Millisecond
		case FaultNotifyDuplicate:
			p.duplicate = true
		case FaultNotifyDrop:
			ranks := f.Ranks
			p.drop = func(r int) bool { return len(ranks) == 0 || slices.Contains(ranks, r) }
		}
		p.applied = append(p.applied, f.Type)
	}
	return p
}
