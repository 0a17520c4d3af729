package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/lb/prefix"
)

// Parse parses and validates a plugin configuration and applies every
// default. On failure it returns a nil Config and an *Error listing all
// problems. JSON null in any field means "use the default". Unknown and
// duplicate fields are problems, so a misspelt setting never silently keeps
// its default.
func Parse(data []byte) (*Config, error) {
	p := &parser{}
	if err := syntaxError(data); err != "" {
		p.add("", "%s", err)
		return nil, &Error{Problems: p.problems}
	}
	dp := prefix.DefaultParams()
	c := &Config{
		TokenMethod:         "default",
		RouteAt:             RouteAtAuto,
		RouteHeader:         "x-pdroute-cluster",
		OriginalDstCluster:  "pdroute_original_dst",
		PrefillTimeout:      30 * time.Second,
		OnPrefillFailure:    OnFailureFallback,
		MaxBodyBytes:        4 << 20,
		StatsScrapeInterval: 5 * time.Second,
		SharedDataPrefix:    "pdroute",
		ThresholdOn:         ThresholdOnPrompt,
		PrefixIndex:         PrefixIndex{BlockBytes: dp.BlockBytes, Slots: dp.Slots, TTL: dp.TTL},
		Prefill:             defaultPool(),
		Decode:              defaultPool(),
		LMCache: LMCache{
			KVBridgeCluster: "kvbridge",
			KVWaitTimeout:   10 * time.Second,
			OnKVTimeout:     OnKVTimeoutProceed,
			TokenizeOn:      TokenizeOnPrefill,
		},
	}
	p.root(c, gjson.ParseBytes(data))
	p.check(c)
	if len(p.problems) > 0 {
		return nil, &Error{Problems: p.problems}
	}
	return c, nil
}

// defaultPool is a pool with lb's defaults: the balancer owns what its
// settings mean, so it owns their defaults too.
func defaultPool() Pool {
	d := lb.DefaultPoolConfig()
	return Pool{
		Strategy:            Strategy(d.Strategy.String()),
		RunningWeight:       d.RunningWeight,
		WaitingWeight:       d.WaitingWeight,
		InflightWeight:      d.InflightWeight,
		StatsMaxAge:         d.StatsMaxAge,
		QPSWindow:           d.QPSWindow,
		AffinityPrefixBytes: d.AffinityPrefixBytes,
		AffinityLoadFactor:  d.AffinityLoadFactor,
		CacheLoadFactor:     d.CacheLoadFactor,
		CacheLoadSlack:      d.CacheLoadSlack,
		CacheMinGain:        d.CacheMinGain,
		FailureThreshold:    d.FailureThreshold,
		Cooldown:            d.Cooldown,
	}
}

// syntaxError describes why data is not one JSON object, or returns "".
func syntaxError(data []byte) string {
	if len(bytes.TrimSpace(data)) == 0 {
		return "the configuration is empty"
	}
	if gjson.ValidBytes(data) {
		if r := gjson.ParseBytes(data); !r.IsObject() {
			return "the configuration must be a JSON object, got " + kind(r)
		}
		return ""
	}
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		return fmt.Sprintf("not valid JSON: %v (line %d, column %d)", se, line, col)
	}
	return "not valid JSON"
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < off-1 && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// parser collects problems while walking the document.
type parser struct {
	problems []Problem
	// sections seen, for the mode cross-checks
	orchestrated, lmcache, sglang bool
	pathsGiven                    bool
}

func (p *parser) add(path, format string, args ...any) {
	p.problems = append(p.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

type fields map[string]func(path string, v gjson.Result)

// object walks the members of v, calling the handler named by each key.
// Unknown and repeated keys are problems.
func (p *parser) object(path string, v gjson.Result, f fields) {
	if !v.IsObject() {
		p.add(path, "must be an object, got %s", kind(v))
		return
	}
	seen := make(map[string]bool, len(f))
	v.ForEach(func(k, val gjson.Result) bool {
		name := k.String()
		fp := join(path, name)
		switch h, ok := f[name]; {
		case seen[name]:
			p.add(fp, "duplicate field")
		case !ok:
			p.add(fp, "unknown field")
		default:
			h(fp, val)
		}
		seen[name] = true
		return true
	})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// kind names a JSON value's type for messages.
func kind(v gjson.Result) string {
	switch {
	case v.Type == gjson.String:
		return "a string"
	case v.Type == gjson.Number:
		return "a number"
	case v.Type == gjson.True || v.Type == gjson.False:
		return "a boolean"
	case v.Type == gjson.Null:
		return "null"
	case v.IsArray():
		return "an array"
	case v.IsObject():
		return "an object"
	}
	return "nothing"
}

// str stores a non-empty string; null keeps the default.
func (p *parser) str(path string, v gjson.Result, dst *string, check func(string) string) {
	switch {
	case v.Type == gjson.Null:
	case v.Type != gjson.String:
		p.add(path, "must be a string, got %s", kind(v))
	case v.Str == "":
		p.add(path, "must not be empty")
	default:
		if msg := check(v.Str); msg != "" {
			p.add(path, "%q %s", v.Str, msg)
			return
		}
		*dst = v.Str
	}
}

func enum[T ~string](p *parser, path string, v gjson.Result, dst *T, allowed ...T) {
	var s string
	p.str(path, v, &s, func(s string) string {
		for _, a := range allowed {
			if s == string(a) {
				return ""
			}
		}
		return "is not one of " + quoteList(allowed)
	})
	if s != "" {
		*dst = T(s)
	}
}

func quoteList[T ~string](l []T) string {
	s := ""
	for i, a := range l {
		switch {
		case i == 0:
		case i == len(l)-1:
			s += " or "
		default:
			s += ", "
		}
		s += strconv.Quote(string(a))
	}
	return s
}

// integer stores a JSON integer within [lo, hi]; null keeps the default.
func (p *parser) integer(path string, v gjson.Result, lo, hi int64, dst *int) {
	if n, ok := p.intValue(path, v, lo, hi); ok {
		*dst = int(n)
	}
}

// millis stores an integer number of milliseconds within [lo, hi].
func (p *parser) millis(path string, v gjson.Result, lo, hi int64, dst *time.Duration) {
	if n, ok := p.intValue(path, v, lo, hi); ok {
		*dst = time.Duration(n) * time.Millisecond
	}
}

func (p *parser) intValue(path string, v gjson.Result, lo, hi int64) (int64, bool) {
	if v.Type == gjson.Null {
		return 0, false
	}
	if v.Type != gjson.Number {
		p.add(path, "must be an integer, got %s", kind(v))
		return 0, false
	}
	n, err := strconv.ParseInt(v.Raw, 10, 64)
	if err != nil {
		p.add(path, "must be an integer, got %s", v.Raw)
		return 0, false
	}
	if n < lo || n > hi {
		p.add(path, "must be between %d and %d, got %d", lo, hi, n)
		return 0, false
	}
	return n, true
}

// number stores a JSON number within [lo, hi]; null keeps the default.
func (p *parser) number(path string, v gjson.Result, lo, hi float64, dst *float64) {
	switch {
	case v.Type == gjson.Null:
	case v.Type != gjson.Number:
		p.add(path, "must be a number, got %s", kind(v))
	case math.IsInf(v.Num, 0) || v.Num < lo || v.Num > hi:
		p.add(path, "must be between %g and %g, got %s", lo, hi, v.Raw)
	default:
		*dst = v.Num
	}
}

func (p *parser) boolean(path string, v gjson.Result, dst *bool) {
	switch v.Type {
	case gjson.Null:
	case gjson.True, gjson.False:
		*dst = v.Type == gjson.True
	default:
		p.add(path, "must be true or false, got %s", kind(v))
	}
}

// array calls each for every element of v, which must be an array of at most
// max elements; null keeps the default.
func (p *parser) array(path string, v gjson.Result, max int, each func(path string, i int, v gjson.Result)) {
	switch {
	case v.Type == gjson.Null:
		return
	case !v.IsArray():
		p.add(path, "must be an array, got %s", kind(v))
		return
	}
	n := int(v.Get("#").Int())
	if n > max {
		p.add(path, "has %d entries, at most %d are allowed", n, max)
		return
	}
	i := 0
	v.ForEach(func(_, e gjson.Result) bool {
		each(index(path, i), i, e)
		i++
		return true
	})
}

// Bounds that catch unit mistakes (seconds typed as microseconds) without
// constraining real deployments; maxEndpoints and the qps_window_ms minimum
// are lb.PoolConfig.Validate's.
const (
	maxMillis        = 3_600_000 // one hour
	maxEndpoints     = 512
	maxPaths         = 64
	maxTPSize        = 64
	maxBodyBytesHigh = 64 << 20
)

func (p *parser) root(c *Config, v gjson.Result) {
	p.object("", v, fields{
		"mode": func(path string, v gjson.Result) {
			enum(p, path, v, &c.Mode, ModeNIXL, ModeOrchestrated, ModeLMCache, ModeSGLang)
		},
		"threshold_tokens": func(path string, v gjson.Result) {
			p.integer(path, v, 0, 100_000_000, &c.ThresholdTokens)
		},
		"threshold_on": func(path string, v gjson.Result) {
			enum(p, path, v, &c.ThresholdOn, ThresholdOnPrompt, ThresholdOnUncached)
		},
		"uncached_ratio": func(path string, v gjson.Result) {
			p.number(path, v, 0, 1, &c.UncachedRatio)
		},
		"prefix_index": func(path string, v gjson.Result) {
			x := &c.PrefixIndex
			p.object(path, v, fields{
				"block_bytes": func(path string, v gjson.Result) {
					p.integer(path, v, 64, 1<<20, &x.BlockBytes)
				},
				"slots": func(path string, v gjson.Result) {
					p.integer(path, v, 1, 1<<20, &x.Slots)
				},
				"ttl_ms": func(path string, v gjson.Result) {
					p.millis(path, v, 1000, maxMillis, &x.TTL)
				},
			})
		},
		"token_method": func(path string, v gjson.Result) {
			enum(p, path, v, &c.TokenMethod, "default", "chars4")
		},
		"paths": func(path string, v gjson.Result) {
			p.pathsGiven = v.Type != gjson.Null
			if p.pathsGiven && v.IsArray() && len(v.Array()) == 0 {
				p.add(path, "must not be empty (list the paths pdroute handles)")
				return
			}
			c.Paths = nil
			seen := map[string]bool{}
			p.array(path, v, maxPaths, func(path string, _ int, v gjson.Result) {
				var s string
				p.str(path, v, &s, checkPath)
				if s == "" {
					return
				}
				if seen[s] {
					p.add(path, "%q is listed twice", s)
					return
				}
				seen[s] = true
				c.Paths = append(c.Paths, s)
			})
		},
		"route_at": func(path string, v gjson.Result) {
			enum(p, path, v, &c.RouteAt, RouteAtAuto, RouteAtBody, RouteAtHeaders)
		},
		"route_header": func(path string, v gjson.Result) {
			p.str(path, v, &c.RouteHeader, checkHeaderName)
		},
		"original_dst_cluster": func(path string, v gjson.Result) {
			p.str(path, v, &c.OriginalDstCluster, checkCluster)
		},
		"prefill_timeout_ms": func(path string, v gjson.Result) {
			p.millis(path, v, 1, maxMillis, &c.PrefillTimeout)
		},
		"on_prefill_failure": func(path string, v gjson.Result) {
			enum(p, path, v, &c.OnPrefillFailure, OnFailureFallback, OnFailureFail)
		},
		"max_body_bytes": func(path string, v gjson.Result) {
			p.integer(path, v, 1, maxBodyBytesHigh, &c.MaxBodyBytes)
		},
		"stats_scrape_interval_ms": func(path string, v gjson.Result) {
			p.millis(path, v, 0, maxMillis, &c.StatsScrapeInterval)
			if c.StatsScrapeInterval > 0 && c.StatsScrapeInterval < 100*time.Millisecond {
				p.add(path, "must be 0 (disabled) or at least 100, got %d", c.StatsScrapeInterval.Milliseconds())
			}
		},
		"debug_headers": func(path string, v gjson.Result) {
			p.boolean(path, v, &c.DebugHeaders)
		},
		"debug_path": func(path string, v gjson.Result) {
			p.str(path, v, &c.DebugPath, checkPath)
		},
		"shared_data_prefix": func(path string, v gjson.Result) {
			p.str(path, v, &c.SharedDataPrefix, checkName)
		},
		"prefill": func(path string, v gjson.Result) { p.pool(path, v, &c.Prefill) },
		"decode":  func(path string, v gjson.Result) { p.pool(path, v, &c.Decode) },
		"orchestrated": func(path string, v gjson.Result) {
			p.orchestrated = true
			p.object(path, v, fields{
				"attach_prefill_response": func(path string, v gjson.Result) {
					p.boolean(path, v, &c.Orchestrated.AttachPrefillResponse)
				},
			})
		},
		"lmcache": func(path string, v gjson.Result) {
			p.lmcache = true
			l := &c.LMCache
			p.object(path, v, fields{
				"kvbridge_cluster": func(path string, v gjson.Result) {
					p.str(path, v, &l.KVBridgeCluster, checkCluster)
				},
				"kv_wait_timeout_ms": func(path string, v gjson.Result) {
					p.millis(path, v, 1, maxMillis, &l.KVWaitTimeout)
				},
				"on_kv_timeout": func(path string, v gjson.Result) {
					enum(p, path, v, &l.OnKVTimeout, OnKVTimeoutProceed, OnKVTimeoutFail)
				},
				"tokenize_on": func(path string, v gjson.Result) {
					enum(p, path, v, &l.TokenizeOn, TokenizeOnPrefill, TokenizeOnDecode)
				},
			})
		},
		"sglang": func(path string, v gjson.Result) {
			p.sglang = true
			p.object(path, v, fields{})
		},
		"discovery": func(path string, v gjson.Result) {
			if v.Type == gjson.Null {
				return
			}
			d := &Discovery{Cluster: "kvbridge", Path: "/v1/pools", Wait: 5 * time.Second, PollInterval: 500 * time.Millisecond, StatsPath: "/v1/stats"}
			c.Discovery = d
			p.object(path, v, fields{
				"cluster":          func(path string, v gjson.Result) { p.str(path, v, &d.Cluster, checkCluster) },
				"path":             func(path string, v gjson.Result) { p.str(path, v, &d.Path, checkPath) },
				"wait_ms":          func(path string, v gjson.Result) { p.millis(path, v, 0, 30_000, &d.Wait) },
				"poll_interval_ms": func(path string, v gjson.Result) { p.millis(path, v, 10, 1000, &d.PollInterval) },
				"stats":            func(path string, v gjson.Result) { p.boolean(path, v, &d.Stats) },
				"stats_path":       func(path string, v gjson.Result) { p.str(path, v, &d.StatsPath, checkPath) },
			})
		},
	})
}

func (p *parser) pool(path string, v gjson.Result, pool *Pool) {
	p.object(path, v, fields{
		"strategy": func(path string, v gjson.Result) {
			enum(p, path, v, &pool.Strategy, RoundRobin, Random, LeastLoaded, QPS, PowerOfTwo, PrefixAffinity, CacheAware)
			pool.strategyGiven = v.Type != gjson.Null
		},
		"running_weight": func(path string, v gjson.Result) {
			p.number(path, v, 0, 1e6, &pool.RunningWeight)
		},
		"waiting_weight": func(path string, v gjson.Result) {
			p.number(path, v, 0, 1e6, &pool.WaitingWeight)
		},
		"inflight_weight": func(path string, v gjson.Result) {
			p.number(path, v, 0, 1e6, &pool.InflightWeight)
		},
		"stats_max_age_ms": func(path string, v gjson.Result) {
			p.millis(path, v, 1, maxMillis, &pool.StatsMaxAge)
		},
		"qps_window_ms": func(path string, v gjson.Result) {
			p.millis(path, v, 1000, maxMillis, &pool.QPSWindow)
		},
		"affinity_prefix_bytes": func(path string, v gjson.Result) {
			p.integer(path, v, 1, 1<<20, &pool.AffinityPrefixBytes)
		},
		"affinity_load_factor": func(path string, v gjson.Result) {
			p.number(path, v, 1, 100, &pool.AffinityLoadFactor)
		},
		"cache_load_factor": func(path string, v gjson.Result) {
			p.number(path, v, 1, 100, &pool.CacheLoadFactor)
		},
		"cache_load_slack": func(path string, v gjson.Result) {
			p.number(path, v, 0, 1e6, &pool.CacheLoadSlack)
		},
		"cache_min_gain": func(path string, v gjson.Result) {
			p.number(path, v, 0, 1, &pool.CacheMinGain)
		},
		"failure_threshold": func(path string, v gjson.Result) {
			p.integer(path, v, 0, 1000, &pool.FailureThreshold)
		},
		"cooldown_ms": func(path string, v gjson.Result) {
			p.millis(path, v, 1, maxMillis, &pool.Cooldown)
		},
		"endpoints": func(path string, v gjson.Result) {
			p.array(path, v, maxEndpoints, func(path string, _ int, v gjson.Result) {
				var e Endpoint
				p.endpoint(path, v, &e)
				pool.Endpoints = append(pool.Endpoints, e)
			})
		},
	})
}

func (p *parser) endpoint(path string, v gjson.Result, e *Endpoint) {
	p.object(path, v, fields{
		"name":            func(path string, v gjson.Result) { p.str(path, v, &e.Name, checkName) },
		"cluster":         func(path string, v gjson.Result) { p.str(path, v, &e.Cluster, checkCluster) },
		"address":         func(path string, v gjson.Result) { p.str(path, v, &e.Address, checkAddress) },
		"host":            func(path string, v gjson.Result) { p.str(path, v, &e.Host, checkHost) },
		"metrics_cluster": func(path string, v gjson.Result) { p.str(path, v, &e.MetricsCluster, checkCluster) },
		"bootstrap_port": func(path string, v gjson.Result) {
			p.integer(path, v, 1, 65535, &e.BootstrapPort)
		},
		"kv_receiver": func(path string, v gjson.Result) {
			if v.Type == gjson.Null {
				return
			}
			r := &KVReceiver{}
			e.KVReceiver = r
			p.object(path, v, fields{
				"host":        func(path string, v gjson.Result) { p.str(path, v, &r.Host, checkHost) },
				"init_ports":  func(path string, v gjson.Result) { p.ports(path, v, &r.InitPorts) },
				"alloc_ports": func(path string, v gjson.Result) { p.ports(path, v, &r.AllocPorts) },
			})
		},
	})
}

func (p *parser) ports(path string, v gjson.Result, dst *[]int) {
	p.array(path, v, maxTPSize, func(path string, _ int, v gjson.Result) {
		port := 0
		p.integer(path, v, 1, 65535, &port)
		*dst = append(*dst, port)
	})
}
