// Package engine is pdroute's performance model of an inference engine on a
// GPU, on a simulated clock: continuous batching under a per-step token
// budget and a cap on running sequences, chunked prefill, a step time that
// grows with the prefill tokens, decode sequences and context in the step, a
// KV cache of fixed capacity in blocks with a prefix cache over it (blocks
// hashed from the prompt's text, chained, LRU eviction), KV transfer between
// engines, and queueing when the batch or the cache is full.
//
// One model serves the routing simulator (e2e/sim, on simulated time) and the
// mock engines (e2e/mocks, on a scaled wall clock through [Live]), so the
// stack and the simulator can be checked against each other.
//
// The model is deterministic: no randomness, no wall clock outside Live.
// It is native Go; the wasm filter must not import it.
package engine

import (
	"fmt"
	"time"
)

// Params describe one engine: a model on its GPUs, with its scheduler
// settings. Build from a profile ([Profiles]) and adjust.
type Params struct {
	// Name identifies the profile, e.g. "llama-3.1-8b-h100".
	Name string
	// BlockSize is the tokens per KV block (vLLM's default 16).
	BlockSize int
	// KVBlocks is the KV cache capacity in blocks.
	KVBlocks int
	// MaxBatchedTokens is the per-step token budget (vLLM
	// max_num_batched_tokens, SGLang chunked_prefill_size): prefill chunks plus
	// one token per decoding sequence.
	MaxBatchedTokens int
	// MaxSeqs is the most sequences running at once (vLLM max_num_seqs).
	MaxSeqs int
	// StepBase is the fixed time of a step: reading the weights once plus
	// launch overheads. A lone decode step takes about StepBase.
	StepBase time.Duration
	// PerPrefillToken is the compute time of one prompt token (the linear
	// layers).
	PerPrefillToken time.Duration
	// PerPrefillTokenPer1kContext is the attention time of one prompt token
	// per 1000 tokens of context before it: long prompts cost more than
	// linearly.
	PerPrefillTokenPer1kContext time.Duration
	// PerDecodeSeq is the time each decoding sequence adds to a step.
	PerDecodeSeq time.Duration
	// PerContextToken is the time to read one token of KV cache while
	// decoding (attention is bound by memory bandwidth).
	PerContextToken time.Duration
	// TransferFixed and TransferPerToken give the time to move a prompt's KV
	// from a prefiller to a decoder: fixed + per token not already cached on
	// the decoder.
	TransferFixed    time.Duration
	TransferPerToken time.Duration
}

// Validate reports a parameter set the model cannot run.
func (p Params) Validate() error {
	switch {
	case p.BlockSize < 1, p.KVBlocks < 1, p.MaxBatchedTokens < 1, p.MaxSeqs < 1:
		return fmt.Errorf("engine: %s: block size, KV blocks, token budget and max sequences must be positive", p.Name)
	case p.StepBase <= 0:
		return fmt.Errorf("engine: %s: step base time must be positive", p.Name)
	case p.PerPrefillToken < 0, p.PerPrefillTokenPer1kContext < 0, p.PerDecodeSeq < 0,
		p.PerContextToken < 0, p.TransferFixed < 0, p.TransferPerToken < 0:
		return fmt.Errorf("engine: %s: times must not be negative", p.Name)
	}
	return nil
}

// The profiles. Their figures and where they come from (docs/SIMULATOR.md
// repeats this with the arithmetic):
//
//   - H100 SXM: 989 TFLOP/s dense BF16, 3.35 TB/s HBM3, 80 GB (NVIDIA H100
//     datasheet).
//   - Llama-3.1-8B: 8.0 B parameters (16 GB in BF16), 32 layers, 8 KV heads
//     of 128 → 128 KiB of KV per token; Llama-3.1-70B: 70.6 B parameters
//     (141 GB), 80 layers, 8 KV heads of 128 → 320 KiB per token (the models'
//     config.json on Hugging Face).
//   - Scheduler: vLLM V1 serving defaults on an 80 GB GPU: block size 16,
//     max_num_batched_tokens 8192, gpu_memory_utilization 0.9 (vLLM engine
//     arguments). max_num_seqs is set to 256 (vLLM V0's default; V1's 1024
//     is rarely reachable with these contexts).
//   - Step time: roofline estimates, NOT measurements. A decode step reads
//     the weights once (8B: 16 GB / 3.35 TB/s ≈ 4.8 ms; the profile uses
//     6 ms, the ~7 ms ITL that public vLLM benchmarks of 8B on one H100 report
//     at low load including overheads). Prefill at ~45 % of peak FLOP/s
//     (2 × params FLOP per token: 8B ≈ 36 µs/token, ~28k tokens/s, in line
//     with published vLLM prefill throughput of 8B on H100). Attention:
//     4 × layers × hidden FLOP per token per context token. KV reads:
//     bytes per token / bandwidth (8B: 128 KiB / 3.35 TB/s ≈ 39 ns).
//   - TP4 (70B): weights and KV split over 4 GPUs; 30 % added to the step
//     base for the all-reduces (estimate).
//   - KV transfer: NIXL over RDMA. vLLM PR #51919 measured ~29 ms p50 for
//     the KV transfer itself on a 3P1D setup; the profiles use 10 ms fixed
//     (handshake, notifications, step alignment) plus bytes per token at
//     ~25 GB/s per GPU (one 200 Gb/s NIC): 8B ≈ 5 µs/token, 70B on TP4
//     (4 NICs) ≈ 3.3 µs/token. A 4k-token prompt then moves in ~30 ms.
//   - KV capacity: (0.9 × 80 GB − weights − ~4 GB activations) / KV bytes
//     per token: 8B ≈ 52 GB / 128 KiB ≈ 400k tokens = 25,000 blocks; 70B on
//     TP4 ≈ 4 × (72 − 35 − 5) GB / 320 KiB ≈ 400k tokens = 25,000 blocks.
var Profiles = map[string]Params{
	"llama-3.1-8b-h100": {
		Name:                        "llama-3.1-8b-h100",
		BlockSize:                   16,
		KVBlocks:                    25_000,
		MaxBatchedTokens:            8192,
		MaxSeqs:                     256,
		StepBase:                    6 * time.Millisecond,
		PerPrefillToken:             36 * time.Microsecond,
		PerPrefillTokenPer1kContext: 1 * time.Microsecond,
		PerDecodeSeq:                20 * time.Microsecond,
		PerContextToken:             39 * time.Nanosecond,
		TransferFixed:               10 * time.Millisecond,
		TransferPerToken:            5 * time.Microsecond,
	},
	"llama-3.1-70b-h100-tp4": {
		Name:                        "llama-3.1-70b-h100-tp4",
		BlockSize:                   16,
		KVBlocks:                    25_000,
		MaxBatchedTokens:            8192,
		MaxSeqs:                     256,
		StepBase:                    14 * time.Millisecond,
		PerPrefillToken:             80 * time.Microsecond,
		PerPrefillTokenPer1kContext: 1500 * time.Nanosecond,
		PerDecodeSeq:                40 * time.Microsecond,
		PerContextToken:             24 * time.Nanosecond,
		TransferFixed:               10 * time.Millisecond,
		TransferPerToken:            3300 * time.Nanosecond,
	},
}

// DefaultProfile is the profile used when none is named.
const DefaultProfile = "llama-3.1-8b-h100"

// Profile returns the named profile.
func Profile(name string) (Params, error) {
	p, ok := Profiles[name]
	if !ok {
		return Params{}, fmt.Errorf("engine: unknown profile %q (have llama-3.1-8b-h100, llama-3.1-70b-h100-tp4)", name)
	}
	return p, nil
}
