package lb

import (
	"bytes"
	"errors"
	"math"
	"strconv"
)

// EngineStats is the load an inference engine reports on /metrics.
type EngineStats struct {
	// Running: requests in the engine's batches (vllm:num_requests_running,
	// sglang:num_running_reqs).
	Running float64
	// Waiting: requests queued for scheduling (vllm:num_requests_waiting,
	// sglang:num_queue_reqs).
	Waiting float64
	// KVCacheUsage: KV-cache usage fraction (vllm:kv_cache_usage_perc,
	// sglang:token_usage). Summed like the others, so an engine with data
	// parallelism 2 reports up to 2. Informational; no strategy reads it.
	KVCacheUsage float64
}

// ErrNoEngineMetrics is returned by ParseMetrics when the text has no sample of
// running or waiting requests (wrong URL, or SGLang without --enable-metrics).
var ErrNoEngineMetrics = errors.New("lb: no vLLM or SGLang request metrics in the text")

type statField uint8

const (
	fieldNone statField = iota
	fieldRunning
	fieldWaiting
	fieldKV
)

func metricField(name []byte) statField {
	switch string(name) {
	case "vllm:num_requests_running", "sglang:num_running_reqs":
		return fieldRunning
	case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
		return fieldWaiting
	case "vllm:kv_cache_usage_perc", "sglang:token_usage":
		return fieldKV
	}
	return fieldNone
}

// ParseMetrics reads a Prometheus text exposition (as served by vLLM and SGLang on
// /metrics) and sums every sample of the metrics named in [EngineStats], whatever
// their labels: vLLM labels each series with engine (one per data-parallel rank)
// and model_name (one per served model), and the load of the endpoint is the sum.
//
// It accepts comments and HELP/TYPE lines, CRLF line ends, blank lines, label values
// with escapes, quoted (UTF-8) metric names, timestamps and trailing exemplars.
// Samples that are NaN, infinite or negative are skipped (an unknown gauge is not a
// load), as are malformed lines: one odd line from another library must not void a
// scrape. Sums are capped at the largest float64.
func ParseMetrics(text []byte) (EngineStats, error) {
	var s EngineStats
	found := false
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		field, v, ok := parseSample(line)
		if !ok || field == fieldNone || !(v >= 0) || math.IsInf(v, 1) {
			continue
		}
		switch field {
		case fieldRunning:
			s.Running = min(s.Running+v, math.MaxFloat64)
			found = true
		case fieldWaiting:
			s.Waiting = min(s.Waiting+v, math.MaxFloat64)
			found = true
		case fieldKV:
			s.KVCacheUsage = min(s.KVCacheUsage+v, math.MaxFloat64)
		}
	}
	if !found {
		return EngineStats{}, ErrNoEngineMetrics
	}
	return s, nil
}

// parseSample parses one exposition line: name{labels} value [timestamp]. It
// returns the field the metric feeds and the value; ok is false for comments, blank
// and malformed lines. Lines of other metrics are skipped after their name.
func parseSample(line []byte) (statField, float64, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	p := skipBlanks(line, 0)
	if p == len(line) || line[p] == '#' {
		return fieldNone, 0, false
	}
	var name []byte
	if line[p] != '{' {
		end := p
		for end < len(line) && isNameByte(line[end], end > p) {
			end++
		}
		if end == p || metricField(line[p:end]) == fieldNone {
			return fieldNone, 0, false
		}
		name, p = line[p:end], end
	}
	if q := skipBlanks(line, p); q < len(line) && line[q] == '{' {
		quotedName, next, ok := parseLabels(line, q+1)
		if !ok || (name == nil) == (quotedName == nil) {
			return fieldNone, 0, false
		}
		if name == nil {
			name = quotedName
		}
		p = next
	}
	if p == len(line) || (line[p] != ' ' && line[p] != '\t') {
		return fieldNone, 0, false // the value must be separated by a blank
	}
	field := metricField(name)
	if field == fieldNone {
		return fieldNone, 0, false
	}
	p = skipBlanks(line, p)
	end := p
	for end < len(line) && line[end] != ' ' && line[end] != '\t' {
		end++
	}
	v, err := strconv.ParseFloat(string(line[p:end]), 64)
	if err != nil {
		return fieldNone, 0, false
	}
	return field, v, true
}

// parseLabels parses a label set from just after '{' to just after '}'. In the
// quoted-name form ({"metric.name", label="v"}) the one quoted string not followed
// by '=' is the metric name, which it returns (raw, escapes kept: the names matched
// here contain none).
func parseLabels(line []byte, p int) (quotedName []byte, next int, ok bool) {
	for {
		p = skipBlanks(line, p)
		if p == len(line) {
			return nil, 0, false
		}
		if line[p] == '}' {
			return quotedName, p + 1, true
		}
		var label []byte
		quoted := line[p] == '"'
		if quoted {
			label, p, ok = parseQuoted(line, p)
			if !ok {
				return nil, 0, false
			}
		} else {
			start := p
			for p < len(line) && isNameByte(line[p], p > start) && line[p] != ':' {
				p++
			}
			if p == start {
				return nil, 0, false
			}
		}
		p = skipBlanks(line, p)
		if p < len(line) && line[p] == '=' {
			p = skipBlanks(line, p+1)
			if p == len(line) || line[p] != '"' {
				return nil, 0, false
			}
			if _, p, ok = parseQuoted(line, p); !ok {
				return nil, 0, false
			}
		} else if quoted && quotedName == nil {
			quotedName = label
		} else {
			return nil, 0, false
		}
		p = skipBlanks(line, p)
		if p < len(line) && line[p] == ',' {
			p++
		} else if p == len(line) || line[p] != '}' {
			return nil, 0, false
		}
	}
}

// parseQuoted parses a double-quoted string starting at line[p] == '"', with
// backslash escapes, and returns its raw contents and the position after it.
func parseQuoted(line []byte, p int) ([]byte, int, bool) {
	for i := p + 1; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++
		case '"':
			return line[p+1 : i], i + 1, true
		}
	}
	return nil, 0, false
}

func skipBlanks(line []byte, p int) int {
	for p < len(line) && (line[p] == ' ' || line[p] == '\t') {
		p++
	}
	return p
}

// isNameByte reports whether c may appear in a legacy metric name; digits only
// after the first byte.
func isNameByte(c byte, notFirst bool) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(notFirst && c >= '0' && c <= '9')
}
