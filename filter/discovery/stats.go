package discovery

import (
	"fmt"
	"math"
	"time"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/lb"
)

// Stat is one engine's stats as the companion's GET /v1/stats gives them.
type Stat struct {
	Stats    lb.EngineStats
	Observed time.Time
}

// MaxStatsBytes bounds an answer of GET /v1/stats the filter reads.
const MaxStatsBytes = 1 << 20

// ParseStats reads the companion's stats answer
//
//	{"stats": {"decode-0": {"running": 3, "waiting": 0, "kv_cache_usage": 0.4, "observed_ms": 1764000000000}}}
//
// keeping the entries of names in want (the endpoints in service). An
// entry with a value that is not a finite number >= 0, or no observation
// time, is skipped; a document that is not of this shape is an error.
func ParseStats(data []byte, want map[string]bool) (map[string]Stat, error) {
	if len(data) > MaxStatsBytes {
		return nil, fmt.Errorf("stats answer of %d bytes, at most %d", len(data), MaxStatsBytes)
	}
	if !gjson.ValidBytes(data) {
		return nil, fmt.Errorf("stats answer: not JSON")
	}
	st := gjson.GetBytes(data, "stats")
	if !st.IsObject() {
		return nil, fmt.Errorf("stats answer: no \"stats\" object")
	}
	out := map[string]Stat{}
	st.ForEach(func(k, v gjson.Result) bool {
		name := k.String()
		if !want[name] || !v.IsObject() {
			return true
		}
		var vals [3]float64
		for i, f := range []string{"running", "waiting", "kv_cache_usage"} {
			x := v.Get(f)
			if x.Exists() && x.Type != gjson.Number {
				return true
			}
			vals[i] = x.Float()
			if !(vals[i] >= 0) || math.IsInf(vals[i], 1) {
				return true
			}
		}
		obs := v.Get("observed_ms")
		if obs.Type != gjson.Number || obs.Int() <= 0 {
			return true
		}
		out[name] = Stat{Stats: lb.EngineStats{Running: vals[0], Waiting: vals[1], KVCacheUsage: vals[2]}, Observed: time.UnixMilli(obs.Int())}
		return true
	})
	return out, nil
}
