package plugin

import (
	"encoding/json"
	"time"

	"github.com/pdroute/pdroute/lb"
)

// debugState is what debug_path answers: the pools' shared state (the same
// from every VM) and this VM's own waiters.
type debugState struct {
	Mode    string                     `json:"mode"`
	Pools   map[string][]debugEndpoint `json:"pools"`
	Streams int                        `json:"vm_streams"`
	// KVWaiting are this VM's lmcache streams waiting for KV notifications.
	KVWaiting int `json:"vm_kv_waiting"`
	// Discovery is the table this VM routes by (discovered pools only).
	Discovery *debugDiscovery `json:"discovery,omitempty"`
}

type debugDiscovery struct {
	// Version is the companion's version, Gen the table's generation.
	Version int64  `json:"version"`
	Gen     uint64 `json:"gen"`
	// Draining counts departed endpoints per pool whose slot is not free yet.
	Draining map[string]int `json:"draining"`
	// Failing: this VM's last poll failed (only the polling VM knows).
	Failing bool `json:"vm_poll_failing"`
}

type debugEndpoint struct {
	Name     string `json:"name"`
	Health   string `json:"health"`
	Failures int    `json:"consecutive_failures"`
	// Inflight and Recent are shown only where the pool's strategy keeps
	// them: round_robin keeps neither, and a 0 there would read as idle.
	Inflight      *uint32 `json:"inflight,omitempty"`
	Recent        *uint32 `json:"recent_requests,omitempty"`
	Running       float64 `json:"engine_running"`
	Waiting       float64 `json:"engine_waiting"`
	KVCacheUsage  float64 `json:"engine_kv_cache_usage"`
	StatsAgeMilli int64   `json:"stats_age_ms"` // -1: never scraped
}

// debugAnswer builds debug_path's JSON body.
func (r *rootContext) debugAnswer(now time.Time) []byte {
	st := debugState{Mode: string(r.cfg.Mode), Pools: map[string][]debugEndpoint{}, Streams: r.streams.Len()}
	if r.kv != nil {
		st.KVWaiting = len(r.kv.entries)
	}
	if f := r.disc; f != nil {
		st.Discovery = &debugDiscovery{Version: f.table.Version, Gen: f.table.Gen, Failing: f.failing,
			Draining: map[string]int{"prefill": f.table.Prefill.Draining(), "decode": f.table.Decode.Draining()}}
	}
	for name, b := range map[string]*lb.Balancer{"prefill": r.prefill, "decode": r.decode} {
		for _, e := range b.Snapshot(now) {
			if e.Name == "" {
				continue // a discovered pool's free or draining slot
			}
			age := int64(-1)
			if !e.StatsObserved.IsZero() {
				age = now.Sub(e.StatsObserved).Milliseconds()
			}
			d := debugEndpoint{
				Name: e.Name, Health: e.Health.String(), Failures: e.ConsecutiveFailures,
				Running: e.Stats.Running, Waiting: e.Stats.Waiting, KVCacheUsage: e.Stats.KVCacheUsage,
				StatsAgeMilli: age,
			}
			if b.CountsInflight() {
				d.Inflight = &e.Inflight
			}
			if b.CountsRecent() {
				d.Recent = &e.RecentRequests
			}
			st.Pools[name] = append(st.Pools[name], d)
		}
	}
	b, _ := json.Marshal(st)
	return b
}
