// Package kvbridge is pdroute's native companion service: it receives the
// KV-ready notifications LMCache prefillers push over ZeroMQ (one msgpack map
// {"type":"ProxyNotif","req_id":...} per frame, one per TP rank) and answers
// the pdroute filter's HTTP long-polls for them, because a wasm filter cannot
// open sockets.
//
// It owns the ZMQ PULL receiver, a TTL- and size-bounded store of per-id
// counts, the HTTP API (GET /v1/kv/{req_id}, POST /v1/kv/wait, /healthz,
// /metrics) and its metrics. It is native code: it must not be imported by
// the filter or by the pure packages (tokenest, lb) that run inside wasm.
//
// Use it in-process as
//
//	svc, err := kvbridge.New(kvbridge.Config{ZMQBind: "tcp://127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
//	go svc.Run(ctx)
//	// PUSH peers connect to svc.ZMQEndpoint(); HTTP clients call svc.Addr().
//
// The binary is hostcalls/cmd/kvbridge; hostcalls/README.md documents the API.
package kvbridge
