package stack

import (
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/filter/config"
)

// DevThreshold is threshold_tokens in `make dev` and the reference
// envoy.yaml: production-stack's examples disaggregate at a few hundred
// tokens, and 512 makes a one-line prompt go direct and a paragraph go
// through prefill.
const DevThreshold = 512

// DevTopology is the stack `make dev` runs and e2e/envoy/envoy.yaml
// describes: mode, two prefill and two decode engines by cluster on
// DevPorts, both pools balanced by cache_aware, threshold_tokens
// DevThreshold compared with the tokens the chosen decoder does not hold
// (threshold_on "uncached") — except in sglang mode, where the threshold is
// 0 on the whole prompt (an SGLang decoder in disaggregation mode cannot
// serve a request without a prefiller's room, so every request must be
// disaggregated) and the decode pool keeps its sglang default, round_robin
// (those decoders keep no prefix cache: docs/CONFIGURATION.md).
func DevTopology(mode config.Mode) Topology {
	plugin := map[string]any{
		"threshold_tokens": DevThreshold,
		"threshold_on":     string(config.ThresholdOnUncached),
		"prefill":          map[string]any{"strategy": string(config.CacheAware)},
		"decode":           map[string]any{"strategy": string(config.CacheAware)},
	}
	if mode == config.ModeSGLang {
		plugin["threshold_tokens"] = 0
		delete(plugin, "threshold_on")
		delete(plugin, "decode")
	}
	return Topology{Mode: mode, Ports: DevPorts, Plugin: plugin}
}

// ReferenceWasmFile is the module the checked-in envoy.yaml loads: what
// `make wasm` builds, relative to the repository root (run envoy there).
const ReferenceWasmFile = "build/pdroute.wasm"

// ReferenceBootstrap renders e2e/envoy/envoy.yaml: DevTopology in nixl mode,
// with the engines' planned addresses (nothing is started). `pdroute-dev
// -proxy envoy` in nixl mode runs the same file but for the module path.
func ReferenceBootstrap() ([]byte, error) { return ModeBootstrap(config.ModeNIXL) }

// ModeBootstrap renders the bootstrap `make dev` runs in mode (DevTopology,
// engines' planned addresses, nothing started): what the Envoy API check
// (e2e/envoy/manifests) validates for every mode.
func ModeBootstrap(mode config.Mode) ([]byte, error) {
	return referenceBootstrap(DevTopology(mode))
}

// ReferenceBootstrapNoFlag renders e2e/envoy/envoy-1.33.yaml: ReferenceBootstrap
// without allow_on_headers_stop_iteration, which Envoy 1.33 and 1.34 reject as an
// unknown field. Requests take pdroute's headers way (route_at auto).
func ReferenceBootstrapNoFlag() ([]byte, error) {
	t := DevTopology(config.ModeNIXL)
	t.NoStopIteration = true
	return referenceBootstrap(t)
}

// ReferenceDiscoveryBootstrap renders e2e/envoy/envoy-discovery.yaml: the
// same stack with discovered pools (`PDROUTE_DEV_DISCOVERY=file make dev`):
// no engine cluster, the pools from the discovery companion in kvbridge
// (kvbridge -discovery), engines reached through the ORIGINAL_DST cluster.
func ReferenceDiscoveryBootstrap() ([]byte, error) {
	t := DevTopology(config.ModeNIXL)
	t.Discovery = DiscoveryFile
	return referenceBootstrap(t)
}

func referenceBootstrap(t Topology) ([]byte, error) {
	t, err := t.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Stack{Topology: t, WasmFile: ReferenceWasmFile}
	// Side ports (SGLang bootstrap, LMCache receivers) are planned above the
	// engines' API ports; only the configuration's shape depends on them.
	side := t.Ports.EngineBase + 100
	_ = eachEngine(t, func(e *Engine, addr string) error {
		e.Addr, e.Addresses = addr, mocks.Addresses{Addr: addr}
		switch {
		case t.Mode == config.ModeSGLang && e.Role == mocks.Prefill:
			e.Addresses.Bootstrap = loopback(side)
			side++
		case t.Mode == config.ModeLMCache && e.Role == mocks.Decode:
			e.Addresses.KVInit, e.Addresses.KVAlloc = []string{loopback(side)}, []string{loopback(side + 1)}
			side += 2
		}
		s.add(e)
		return nil
	})
	if s.PluginConfig, err = pluginJSON(t, s.Prefill, s.Decode); err != nil {
		return nil, err
	}
	return s.bootstrap(loopback(t.Ports.Listener), loopback(t.Ports.Admin)).Render()
}
