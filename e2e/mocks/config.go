package mocks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/pdroute/pdroute/e2e/engine"
)

// Kind names the engine a Server emulates.
type Kind string

const (
	// VLLM is vLLM with the NixlConnector: prefill answers kv_transfer_params that a
	// decoder pulls over the side channel.
	VLLM Kind = "vllm"
	// LMCache is vLLM with LMCache's NIXL push backend: the prefiller pushes KV to the
	// decoder's alloc ports and notifies the router over ZeroMQ.
	LMCache Kind = "lmcache"
	// SGLang is SGLang with bootstrap disaggregation: prefill publishes a room on its
	// bootstrap server and the decoder waits for it.
	SGLang Kind = "sglang"
)

// Role is the part a Server plays in a prefill/decode pair.
type Role string

const (
	// Prefill serves prefill requests (and the prefill-side listeners).
	Prefill Role = "prefill"
	// Decode serves decode requests (and the decode-side listeners).
	Decode Role = "decode"
	// Both serves both (vLLM kv_both, an LMCache engine with sender and receiver). For
	// SGLang it means an engine started without --disaggregation-mode: bootstrap fields
	// are ignored and no bootstrap server runs.
	Both Role = "both"
)

func (r Role) prefills() bool { return r == Prefill || r == Both }
func (r Role) decodes() bool  { return r == Decode || r == Both }

// Latency is the timing model. Every duration is multiplied by Slowdown.
type Latency struct {
	// PrefillPerToken is the time to compute one prompt token when the engine computes
	// the prompt itself. Default 100µs: a 1000-token prompt takes 100 ms, enough for a
	// scenario to tell a recomputed decode from a transferred one.
	PrefillPerToken time.Duration
	// TransferredPrefill is the constant time before the first token when the prompt's
	// KV was transferred from a prefiller. Default 2ms.
	TransferredPrefill time.Duration
	// PerOutputToken is the time between two generated tokens. Default 5ms.
	PerOutputToken time.Duration
	// Slowdown multiplies all of the above, so a scenario can make one engine slow.
	// Default 1.
	Slowdown float64
}

// DefaultLatency returns the latency model a zero Config gets.
func DefaultLatency() Latency {
	return Latency{
		PrefillPerToken:    100 * time.Microsecond,
		TransferredPrefill: 2 * time.Millisecond,
		PerOutputToken:     5 * time.Millisecond,
		Slowdown:           1,
	}
}

func (l Latency) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * l.Slowdown)
}

// latencyJSON is Latency on the wire: durations as Go duration strings ("2ms").
type latencyJSON struct {
	PrefillPerToken    string  `json:"prefill_per_token,omitempty"`
	TransferredPrefill string  `json:"transferred_prefill,omitempty"`
	PerOutputToken     string  `json:"per_output_token,omitempty"`
	Slowdown           float64 `json:"slowdown,omitempty"`
}

// MarshalJSON writes durations as strings such as "100µs".
func (l Latency) MarshalJSON() ([]byte, error) {
	return json.Marshal(latencyJSON{
		PrefillPerToken:    l.PrefillPerToken.String(),
		TransferredPrefill: l.TransferredPrefill.String(),
		PerOutputToken:     l.PerOutputToken.String(),
		Slowdown:           l.Slowdown,
	})
}

// UnmarshalJSON reads durations as strings ("2ms"). Absent fields keep their value, so
// POST /mock/latency can change only the slowdown.
func (l *Latency) UnmarshalJSON(b []byte) error {
	var j latencyJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		s    string
		dst  *time.Duration
	}{
		{"prefill_per_token", j.PrefillPerToken, &l.PrefillPerToken},
		{"transferred_prefill", j.TransferredPrefill, &l.TransferredPrefill},
		{"per_output_token", j.PerOutputToken, &l.PerOutputToken},
	} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil || d < 0 {
			return fmt.Errorf("%s: not a non-negative duration: %q", f.name, f.s)
		}
		*f.dst = d
	}
	if j.Slowdown < 0 {
		return fmt.Errorf("slowdown: must be positive, got %v", j.Slowdown)
	}
	if j.Slowdown > 0 {
		l.Slowdown = j.Slowdown
	}
	return nil
}

// Config configures a Server. The zero value of every field means its default.
type Config struct {
	// Kind is the engine to emulate. Required.
	Kind Kind
	// Role is the part it plays. Default Both.
	Role Role
	// Name identifies the instance in the x-mock-name response header and in
	// /mock/stats. Default "<kind>-<role>-<port>", unique on one machine.
	Name string
	// Addr is the OpenAI API listen address. Default "127.0.0.1:0" (loopback, the kernel
	// picks the port), so tests never collide.
	Addr string
	// Model is the served model name reported in responses and metric labels.
	// Default "mock-model".
	Model string
	// MaxModelLen is the context length: longer prompts, or prompt plus max_tokens
	// beyond it, get vLLM's 400. Default 8192.
	MaxModelLen int
	// MaxConcurrency is how many requests run at once; the rest wait and show in the
	// waiting gauge. Default 16 (small, so load shows up in metrics); negative means
	// unlimited.
	MaxConcurrency int
	// KVCacheBlocks is the KV-cache capacity used for the usage gauge. Default 16384.
	KVCacheBlocks int
	// BlockSize is the tokens per KV block (vLLM block ids, usage gauge). Default 16,
	// vLLM's default.
	BlockSize int
	// Latency is the timing model. Zero fields take DefaultLatency's values; for "no
	// delay" use 1ns.
	Latency Latency
	// Perf, when set, times answers with the engine performance model (e2e/engine)
	// instead of Latency and MaxConcurrency: continuous batching, chunked prefill, the
	// prefix cache, KV transfer and queueing, as the routing simulator models them.
	// Prompt tokens are the mock tokenizer's. Default nil.
	Perf *engine.Params
	// PerfScale is wall time per model time: 0.5 answers twice as fast as the
	// modelled GPU. Default 1.
	PerfScale float64
	// RecordLimit bounds the ring of recorded requests behind GET /mock/requests.
	// Default 256.
	RecordLimit int
	// Seed seeds the randomness of probabilistic faults, so a run can be repeated.
	// Default 1.
	Seed uint64
	// Logger receives one line per notable event. Default: discarded.
	Logger *log.Logger

	// EngineID is vLLM's remote_engine_id. Default a random UUID, as vLLM does.
	EngineID string
	// SideChannelAddr is where a vLLM prefiller serves block pulls (NIXL's side channel,
	// VLLM_NIXL_SIDE_CHANNEL_PORT). Default "127.0.0.1:0".
	SideChannelAddr string
	// LeaseDuration is how long a vLLM prefiller holds a prompt's blocks for a decoder
	// that never pulls them. Default 30s, newer vLLM's kv_lease_duration.
	LeaseDuration time.Duration
	// GroupedBlockIDs makes remote_block_ids a list of lists (one per KV-cache group)
	// and adds the newer keys (dcp_size, pp_size, remote_num_tokens,
	// remote_blocks_expiry_time, transfer_mode), like vLLM's nixl/ refactor. Default
	// false: the older flat list, which is what most deployed versions send.
	GroupedBlockIDs bool
	// TPSize is the tensor-parallel size: vLLM's reported tp_size; for LMCache the
	// number of prefiller ranks (one push and one notification each) and of decoder KV
	// receivers. Default 1.
	TPSize int
	// PullTimeout bounds one engine-to-engine HTTP call (NIXL pull, LMCache push,
	// SGLang room poll). Default 5s.
	PullTimeout time.Duration

	// ZMQConnect is the router's PULL endpoint an LMCache prefiller's PUSH sockets
	// connect to, e.g. "tcp://127.0.0.1:7500". Required for an LMCache prefiller.
	ZMQConnect string
	// NotifTag is the msgspec tag of the notification. Default "ProxyNotif" (current
	// LMCache); older LMCache sends "NixlProxyNotif".
	NotifTag string
	// KVInitAddrs and KVAllocAddrs are an LMCache decoder's receiver listeners, one per
	// TP rank (receiver_init_port[i], receiver_alloc_port[i]). Default TPSize times
	// "127.0.0.1:0".
	KVInitAddrs, KVAllocAddrs []string
	// KVBufferTTL is how long KV pushed to an LMCache decoder waits for its decode
	// request. Default 60s.
	KVBufferTTL time.Duration

	// BootstrapAddr is where an SGLang prefiller serves its bootstrap server. Default
	// "127.0.0.1:0" (the engine's own default port is 8998).
	BootstrapAddr string
	// DefaultBootstrapPort is the port an SGLang decoder uses when bootstrap_port is
	// null, like the engine's --disaggregation-bootstrap-port. Default 8998.
	DefaultBootstrapPort int
	// BootstrapTimeout is how long an SGLang decoder waits for a room before failing
	// the request, and how long a prefiller keeps an unclaimed room. Default 300s, the
	// engine's SGLANG_DISAGGREGATION_WAITING_TIMEOUT.
	BootstrapTimeout time.Duration
}

// WithDefaults returns c with every zero field set to its default, and checks it.
func (c Config) WithDefaults() (Config, error) {
	switch c.Kind {
	case VLLM, LMCache, SGLang:
	default:
		return c, fmt.Errorf("mocks: unknown engine kind %q (want vllm, lmcache or sglang)", c.Kind)
	}
	switch c.Role {
	case "":
		c.Role = Both
	case Prefill, Decode, Both:
	default:
		return c, fmt.Errorf("mocks: unknown role %q (want prefill, decode or both)", c.Role)
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	defDur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Addr, "127.0.0.1:0")
	def(&c.Model, "mock-model")
	def(&c.SideChannelAddr, "127.0.0.1:0")
	def(&c.BootstrapAddr, "127.0.0.1:0")
	def(&c.NotifTag, "ProxyNotif")
	defInt(&c.MaxModelLen, 8192)
	defInt(&c.MaxConcurrency, 16)
	defInt(&c.KVCacheBlocks, 16384)
	defInt(&c.BlockSize, 16)
	defInt(&c.RecordLimit, 256)
	defInt(&c.TPSize, 1)
	defInt(&c.DefaultBootstrapPort, 8998)
	defDur(&c.LeaseDuration, 30*time.Second)
	defDur(&c.PullTimeout, 5*time.Second)
	defDur(&c.KVBufferTTL, 60*time.Second)
	defDur(&c.BootstrapTimeout, 300*time.Second)
	if c.Seed == 0 {
		c.Seed = 1
	}
	d := DefaultLatency()
	defDur(&c.Latency.PrefillPerToken, d.PrefillPerToken)
	defDur(&c.Latency.TransferredPrefill, d.TransferredPrefill)
	defDur(&c.Latency.PerOutputToken, d.PerOutputToken)
	if c.Latency.Slowdown == 0 {
		c.Latency.Slowdown = d.Slowdown
	}
	if c.EngineID == "" {
		c.EngineID = newUUID()
	}
	if c.Logger == nil {
		c.Logger = log.New(discard{}, "", 0)
	}
	switch {
	case c.MaxModelLen < 1, c.KVCacheBlocks < 1, c.BlockSize < 1, c.RecordLimit < 1, c.TPSize < 1:
		return c, fmt.Errorf("mocks: MaxModelLen, KVCacheBlocks, BlockSize, RecordLimit and TPSize must be positive")
	case c.Latency.PrefillPerToken < 0, c.Latency.TransferredPrefill < 0, c.Latency.PerOutputToken < 0, c.Latency.Slowdown < 0:
		return c, fmt.Errorf("mocks: latencies and slowdown must not be negative")
	case c.DefaultBootstrapPort < 1 || c.DefaultBootstrapPort > 65535:
		return c, fmt.Errorf("mocks: DefaultBootstrapPort %d out of range", c.DefaultBootstrapPort)
	}
	if c.Kind == LMCache {
		if c.Role.prefills() && c.ZMQConnect == "" {
			return c, fmt.Errorf("mocks: an lmcache prefiller needs ZMQConnect (the router's PULL endpoint)")
		}
		if c.Role.decodes() {
			for _, addrs := range []*[]string{&c.KVInitAddrs, &c.KVAllocAddrs} {
				if len(*addrs) == 0 {
					*addrs = make([]string, c.TPSize)
					for i := range *addrs {
						(*addrs)[i] = "127.0.0.1:0"
					}
				}
				if len(*addrs) != c.TPSize {
					return c, fmt.Errorf("mocks: %d KV receiver addresses for TPSize %d", len(*addrs), c.TPSize)
				}
			}
		}
	}
	return c, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
