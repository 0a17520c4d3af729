// Command phases is a benchmark plugin that runs the filter's request path
// for a disaggregated nixl request up to one phase, named by the plugin
// configuration, each phase including the ones before it:
//
//	read      copy the body into the VM (proxy_get_buffer_bytes)
//	whole     + tokenest reading the whole body (Cache.Estimate), for comparison
//	estimate  + tokenest as the filter estimates (Cache.EstimateNear, long
//	            strings in part, noting the top-level members)
//	index     + connector's Object from that index, sanitised, in a kept
//	            room (NewIndexedRequestIn), and detached (DetachIn)
//	prefill   + the prefill body into a kept buffer (connector.NIXLPrefillTo)
//	decode    + the decode edit from the detached offsets
//	            (NIXLDecodeDetached) and its host call
//
// Each call is the one the filter makes for such a request (filter/plugin
// stream.go and prefill.go), into buffers kept per root as the filter's are.
//
// The cost of a phase is its row's time minus the row before it
// (BenchmarkFilterPhasesInWasm; RATIONALE.md, "Where a request's time goes
// in wasm").
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/connector"
	"github.com/pdroute/pdroute/tokenest"
)

func main() {}

func init() { abi.SetVMContext(&vm{}) }

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &root{} }

var phases = map[string]int{"read": 0, "whole": -1, "estimate": 1, "index": 2, "prefill": 3, "decode": 4}

type root struct {
	types.DefaultPluginContext
	phase int
	cache *tokenest.Cache
	index tokenest.Index
	// kept across requests, as the filter keeps them
	room, detached connector.Room
	prefill, edit  []byte
}

func (r *root) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := abi.GetPluginConfiguration()
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	p, ok := phases[string(cfg)]
	if !ok {
		abi.LogCriticalf("phases: unknown phase %q", cfg)
		return types.OnPluginStartStatusFailed
	}
	r.phase, r.cache = p, tokenest.NewCache(256<<10)
	return types.OnPluginStartStatusOK
}

func (r *root) NewHttpContext(uint32) types.HttpContext { return &stream{r: r} }

type stream struct {
	types.DefaultHttpContext
	r *root
}

var kvParams = []byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],` +
	`"remote_engine_id":"e1","remote_request_id":"r1","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1}`)

func (s *stream) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	body, err := abi.GetHttpRequestBody(0, size)
	if err != nil {
		abi.LogErrorf("phases: %v", err)
		return types.ActionContinue
	}
	if s.r.phase < 0 {
		if _, err := s.r.cache.Estimate(body, "/v1/chat/completions", tokenest.Default); err != nil {
			abi.LogErrorf("phases: %v", err)
		}
		return types.ActionContinue
	}
	if s.r.phase < 1 {
		return types.ActionContinue
	}
	if _, err := s.r.cache.EstimateNear(body, "/v1/chat/completions", tokenest.Default, 0, &s.r.index); err != nil {
		abi.LogErrorf("phases: %v", err)
	}
	if s.r.phase < 2 {
		return types.ActionContinue
	}
	r := s.r
	req, err := connector.NewIndexedRequestIn(config.APIChat, body, &r.index, &r.room)
	if err != nil {
		abi.LogErrorf("phases: %v", err)
		return types.ActionContinue
	}
	detached := req.DetachIn(&r.detached)
	if r.phase < 3 {
		return types.ActionContinue
	}
	if r.prefill = connector.NIXLPrefillTo(r.prefill[:0], req); len(r.prefill) == 0 {
		abi.LogErrorf("phases: empty prefill body")
	}
	if r.phase < 4 {
		return types.ActionContinue
	}
	e, ok := connector.NIXLDecodeDetached(r.edit[:0], detached, kvParams)
	if !ok {
		abi.LogErrorf("phases: the decode edit needs the body's head")
		return types.ActionContinue
	}
	r.edit = e.Prefix[:0]
	if err := abi.EditHttpRequestBody(e.Drain, e.Prefix); err != nil {
		abi.LogErrorf("phases: %v", err)
	}
	return types.ActionContinue
}
