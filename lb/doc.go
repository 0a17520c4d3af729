// Package lb chooses the prefill or decode endpoint for a request, correctly across
// Envoy worker threads, and parses the Prometheus text the engines expose.
//
// Envoy runs one wasm VM per worker thread, each with its own Go heap. Balancing
// state therefore lives in a [Store] with the semantics of proxy-wasm shared data
// (one store per Envoy process, values replaced with compare-and-swap), and every
// decision here is written as a bounded optimistic read-modify-write on it.
//
// # What is shared, what is per VM
//
// Shared by all VMs of a process, in the Store, under keys derived from the pool
// name and a fingerprint of the pool's endpoint names (see [New]):
//   - the round-robin rotation counter (round_robin, and least_loaded's fallback);
//   - pdroute's in-flight count per endpoint (least_loaded, power_of_two,
//     prefix_affinity: the strategies that read it);
//   - the qps sliding window (qps);
//   - passive health: consecutive failures, cool-downs and the half-open probe;
//   - engine stats with their observation time ([Balancer.PutStats]);
//   - the prefix index of the cache_aware strategy, under "px/<slot>" keys
//     (package lb/prefix, a fixed number of small records).
//
// Per VM, in the Go heap of one [Balancer]: the configuration, the injected random
// source, scratch buffers, decrements that could not yet be written because of
// contention (they are folded into this VM's next in-flight write), and
// cache_aware's rotation, sticky share and pending prefill work (cacheaware.go). A Balancer is
// not safe for concurrent use: the filter creates one per pool per VM, and a wasm VM
// is single-threaded.
//
// # How callers must release
//
// Every successful [Balancer.Pick] returns a [*Lease]. The caller must:
//   - call [Lease.Report] once, as soon as the outcome is known (prefill: its answer;
//     decode: the response headers, a reset or a timeout). It feeds passive health
//     and decides a half-open probe;
//   - call [Lease.Release] exactly once when the endpoint's work is over: for
//     prefill when the prefill answers (not when the whole request ends), for decode
//     when the stream ends. Further calls are no-ops, so a count is never
//     decremented twice, and counts never go below zero.
//
// # When a VM dies
//
// A VM that traps is never called again, so it releases nothing. In-flight counts
// are therefore kept per owner (one row per VM, see [Balancer.SetOwner]) with an
// expiry the owner moves forward on every write and on [Balancer.Heartbeat], which
// every VM calls from its tick. A dead VM's counts stop counting at most the owner
// TTL ([DefaultOwnerTTL] in the filter) after its last write or heartbeat; the next
// writer drops its row. A half-open probe claim works the same way: with an owner
// TTL, Heartbeat renews this VM's outstanding probe claims, and a claim not renewed
// for one TTL is free for the next pick (without an owner, after probeExpiry, 2
// minutes).
//
// A lease taken before a configuration reload keeps pointing at the keys of the
// endpoint set it was taken from, so releasing it after the set changed touches
// nothing the new set uses.
//
// # Dynamic pools
//
// A pool made by [NewDynamic] follows a set that changes at run time (discovered
// endpoints). Its endpoints are indexed by slot, a number every VM agrees on (the
// filter's discovery table assigns them), and its state lives under fixed keys
// "lb/<pool>/dyn/<kind>" indexed by slot: an endpoint that keeps its slot keeps its
// state across changes, a slot with no name gets no picks while its leases release to
// it, and [Balancer.ResetSlots] clears a slot before it serves a new endpoint. Values
// only widen (a VM with an older, narrower set never truncates a newer slot's count),
// up to [MaxSlots].
//
// Nothing here imports proxy-wasm packages, starts goroutines, sets timers or
// sleeps: the package runs inside the wasm VM. Time is passed in as now; randomness
// comes from an injected [math/rand/v2.Source]. It imports the standard library only.
package lb
