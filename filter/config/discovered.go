package config

import (
	"fmt"
	"net/netip"

	"github.com/tidwall/gjson"
)

// Discovered is one answer of the discovery companion, validated against the
// configuration it will serve: the endpoint sets and their version.
type Discovered struct {
	// Version is the companion's version of the sets; it changes whenever
	// they do (and may restart from 1 when the companion restarts).
	Version int64
	// Prefill and Decode are the endpoints that passed every check, in the
	// answer's order, with defaults applied as Parse applies them.
	Prefill, Decode []Endpoint
	// Dropped lists the endpoints left out and why (a bad label on one pod
	// must not freeze the whole fleet's updates).
	Dropped []Problem
}

// MaxDiscoveredBytes bounds an answer the filter reads: 512 endpoints per
// pool at a few hundred bytes each fit with room to spare.
const MaxDiscoveredBytes = 1 << 20

// ParseDiscovered reads the companion's answer
//
//	{"version": 7, "prefill": [endpoint, ...], "decode": [endpoint, ...]}
//
// where an endpoint has the address form of the plugin configuration
// ("name", "address", and per mode "host", "bootstrap_port", "kv_receiver").
// A malformed document, a missing version or pool, or a pool over 512
// endpoints is an error (the caller keeps its last good sets); an endpoint
// that fails a check (no address, a "cluster", a name used twice, a field
// the mode forbids or lacks) is dropped and listed in Dropped. Unknown
// top-level fields are ignored, so a newer companion can add some.
func (c *Config) ParseDiscovered(data []byte) (*Discovered, error) {
	if len(data) > MaxDiscoveredBytes {
		return nil, fmt.Errorf("answer of %d bytes, at most %d", len(data), MaxDiscoveredBytes)
	}
	if msg := syntaxError(data); msg != "" {
		return nil, fmt.Errorf("answer: %s", msg)
	}
	doc := gjson.ParseBytes(data)
	if !doc.IsObject() {
		return nil, fmt.Errorf("answer: must be an object, got %s", kind(doc))
	}
	var top parser
	d := &Discovered{}
	ver := doc.Get("version")
	n, ok := top.intValue("version", ver, 0, 1<<53)
	if !ok {
		if len(top.problems) > 0 {
			return nil, fmt.Errorf("%s", top.problems[0])
		}
		return nil, fmt.Errorf("version: is required")
	}
	d.Version = n
	names := map[string]bool{}
	for _, pool := range []struct {
		name string
		dst  *[]Endpoint
	}{{"prefill", &d.Prefill}, {"decode", &d.Decode}} {
		v := doc.Get(pool.name)
		if !v.IsArray() {
			return nil, fmt.Errorf("%s: must be an array, got %s", pool.name, kind(v))
		}
		if n := int(v.Get("#").Int()); n > maxEndpoints {
			return nil, fmt.Errorf("%s: has %d endpoints, at most %d are allowed", pool.name, n, maxEndpoints)
		}
		targets := map[string]bool{}
		i := 0
		v.ForEach(func(_, ev gjson.Result) bool {
			path := index(pool.name, i)
			i++
			e, problems := c.discoveredEndpoint(pool.name, path, ev, names, targets)
			if len(problems) > 0 {
				d.Dropped = append(d.Dropped, problems...)
				return true
			}
			names[e.Name] = true
			targets[e.Address] = true
			*pool.dst = append(*pool.dst, e)
			return true
		})
	}
	return d, nil
}

// discoveredEndpoint parses and checks one endpoint of an answer.
func (c *Config) discoveredEndpoint(pool, path string, v gjson.Result, names, targets map[string]bool) (Endpoint, []Problem) {
	var p parser
	var e Endpoint
	p.endpoint(path, v, &e)
	if len(p.problems) > 0 {
		return e, p.problems
	}
	switch {
	case e.Name == "":
		p.add(path+".name", "is required")
	case names[e.Name]:
		p.add(path+".name", "%q is used twice (names are unique across both pools)", e.Name)
	}
	switch {
	case e.Cluster != "":
		p.add(path+".cluster", "discovered endpoints are reached by address, not by cluster")
	case e.Address == "":
		p.add(path+".address", "is required")
	case targets[e.Address]:
		p.add(path+".address", "%q is used twice in this pool", e.Address)
	}
	if len(p.problems) > 0 {
		return e, p.problems
	}
	if e.Host == "" {
		e.Host = netip.MustParseAddrPort(e.Address).Addr().String()
	}
	if e.MetricsCluster == "" {
		e.MetricsCluster, _ = c.Upstream(&e)
	}
	p.checkModeFields(c, pool, path, &e)
	return e, p.problems
}
