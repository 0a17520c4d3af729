package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/pdroute/pdroute/lb"
)

// Field checks: each returns "" for a good value, else the rest of a message
// that starts with the quoted value.

func checkPath(s string) string {
	if s[0] != '/' {
		return "must start with /"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '?' || c == '#' {
			return "must be a plain path (no query, fragment, spaces or control characters)"
		}
	}
	return ""
}

// reservedHeaders may not be used as route_header: the filter or Envoy
// already gives them a meaning.
var reservedHeaders = []string{
	"host", "content-length", "content-type", "transfer-encoding", "te", "connection",
	"authorization", "x-request-id", "x-envoy-original-dst-host",
}

func checkHeaderName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return "must be a lower-case HTTP header name"
		}
	}
	for _, r := range reservedHeaders {
		if s == r {
			return "is reserved; choose a header of pdroute's own"
		}
	}
	return ""
}

// checkCluster accepts what can travel in a header value and an Envoy
// cluster name: visible ASCII, at most 255 bytes.
func checkCluster(s string) string {
	if len(s) > 255 {
		return "is longer than 255 bytes"
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return "must be visible ASCII without spaces"
		}
	}
	return ""
}

// checkName accepts names that are safe in metric tags, shared-data keys and
// debug headers.
func checkName(s string) string {
	if len(s) > 64 {
		return "is longer than 64 bytes"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "may only contain letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

func checkAddress(s string) string {
	ap, err := netip.ParseAddrPort(s)
	if err == nil {
		switch {
		case ap.Port() == 0:
			return "has port 0"
		case ap.Addr().Zone() != "":
			return "must not carry an IPv6 zone"
		case ap.Addr().IsUnspecified():
			return "is an unspecified address (0.0.0.0 or ::)"
		}
		return ""
	}
	// Say what is wrong in the common mistakes.
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "is not an IP:port (IPv6 as [::1]:8000)"
	}
	host, port := s[:i], s[i+1:]
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "is not an IP:port: bad port " + strconv.Quote(port)
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "is not an IP:port: IPv6 needs brackets, as [::1]:8000"
	}
	if checkHost(host) == "" {
		return "is not an IP:port: the host must be an IP address (ORIGINAL_DST does not resolve names; use \"cluster\" for DNS names)"
	}
	return "is not an IP:port (IPv6 as [::1]:8000)"
}

// checkHost accepts an IP address (IPv6 without brackets) or a DNS name.
func checkHost(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return "must not carry an IPv6 zone"
		}
		return ""
	}
	if len(s) > 253 {
		return "is longer than 253 bytes"
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "is not an IP address or DNS name"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return "is not an IP address or DNS name (IPv6 goes without brackets)"
			}
		}
	}
	return ""
}

// check applies the cross-field rules and fills the defaults that depend on
// other fields. Rules that depend on the mode are skipped when the mode is
// missing or invalid (that problem is already reported).
func (p *parser) check(c *Config) {
	modeKnown := c.Mode != ""
	if c.Mode == "" && !p.reported("mode") {
		p.add("mode", "is required: one of \"nixl\", \"orchestrated\", \"lmcache\" or \"sglang\"")
	}

	if modeKnown && !p.pathsGiven {
		c.Paths = append([]string(nil), defaultPaths[c.Mode]...)
	}
	if modeKnown {
		for i, s := range c.Paths {
			if ok, msg := apiAllowed(c.Mode, APIForPath(s)); !ok {
				p.add(index("paths", i), "%q: %s", s, msg)
			}
		}
	}

	for _, s := range []struct {
		given bool
		name  string
		mode  Mode
	}{
		{p.orchestrated, "orchestrated", ModeOrchestrated},
		{p.lmcache, "lmcache", ModeLMCache},
		{p.sglang, "sglang", ModeSGLang},
	} {
		if modeKnown && s.given && c.Mode != s.mode {
			p.add(s.name, "this section is only allowed when mode is %q (mode is %q)", s.mode, c.Mode)
		}
	}

	if c.Mode == ModeSGLang && !c.Decode.strategyGiven {
		// SGLang's PD decode engines disable their radix cache unless
		// started with --disaggregation-decode-enable-radix-cache: every
		// request's KV comes whole from the prefiller, so cache_aware would
		// only make the decode choice less even than round robin's.
		c.Decode.Strategy = RoundRobin
	}

	names := map[string]string{} // endpoint name → path of its first use
	if c.Mode == ModeSGLang && c.ThresholdOn == ThresholdOnUncached {
		p.add("threshold_on", "\"uncached\" is not available in sglang mode: its decode engines "+
			"(--disaggregation-mode decode) cannot prefill a request alone, so every request must be disaggregated")
	}
	if c.UncachedRatio > 0 && c.ThresholdOn != ThresholdOnUncached {
		p.add("uncached_ratio", "only applies with threshold_on \"uncached\"")
	}
	p.checkPool(c, "prefill", &c.Prefill, names, modeKnown)
	p.checkPool(c, "decode", &c.Decode, names, modeKnown)
}

// reported reports whether a problem was already recorded at path.
func (p *parser) reported(path string) bool {
	for _, pr := range p.problems {
		if pr.Path == path {
			return true
		}
	}
	return false
}

func (p *parser) checkPool(c *Config, name string, pool *Pool, names map[string]string, modeKnown bool) {
	if len(pool.Endpoints) == 0 && c.Discovery == nil && !p.reportedUnder(name) {
		msg := "must list at least one endpoint"
		if name == "prefill" {
			msg += " (to turn disaggregation off, raise threshold_tokens instead)"
		}
		p.add(name+".endpoints", "%s", msg)
	}
	if pool.Strategy == LeastLoaded || pool.Strategy == PowerOfTwo {
		if pool.RunningWeight == 0 && pool.WaitingWeight == 0 && pool.InflightWeight == 0 {
			p.add(name, "strategy %q needs at least one of running_weight, waiting_weight, inflight_weight above 0", pool.Strategy)
		}
		if c.StatsScrapeInterval > 0 && pool.StatsMaxAge < c.StatsScrapeInterval {
			p.add(name+".stats_max_age_ms", "%d is below stats_scrape_interval_ms (%d): engine stats would always be stale",
				pool.StatsMaxAge.Milliseconds(), c.StatsScrapeInterval.Milliseconds())
		}
	}

	targets := map[string]string{} // cluster or address → path of its first use
	for i := range pool.Endpoints {
		e := &pool.Endpoints[i]
		path := fmt.Sprintf("%s.endpoints[%d]", name, i)
		switch {
		case e.Name == "":
			if !p.reported(path + ".name") {
				p.add(path+".name", "is required")
			}
		case names[e.Name] != "":
			p.add(path+".name", "%q is already used by %s (names are unique across both pools)", e.Name, names[e.Name])
		default:
			names[e.Name] = path
		}

		switch {
		case e.Cluster != "" && e.Address != "":
			p.add(path, "set either \"cluster\" or \"address\", not both")
		case e.Cluster == "" && e.Address == "":
			if !p.reported(path+".cluster") && !p.reported(path+".address") {
				p.add(path, "needs \"cluster\" (a static Envoy cluster) or \"address\" (IP:port via original_dst_cluster)")
			}
		default:
			target, field := e.Cluster, "cluster"
			if e.Address != "" {
				target, field = e.Address, "address"
			}
			if prev := targets[target]; prev != "" {
				p.add(path+"."+field, "%q is already used by %s in this pool", target, prev)
			} else {
				targets[target] = path
			}
		}

		// Defaults that follow from other fields.
		if e.Host == "" && e.Address != "" {
			e.Host = netip.MustParseAddrPort(e.Address).Addr().String()
		}
		if e.MetricsCluster == "" {
			e.MetricsCluster, _ = c.Upstream(e)
		}

		if modeKnown {
			p.checkModeFields(c, name, path, e)
		}
	}
	// The balancer validates its own settings when the plugin starts; a pool
	// that passed the checks above must pass that too, so `pdroute-config
	// check` and the filter never disagree.
	if !p.reportedUnder(name) {
		var fe *lb.FieldError
		bal := pool.Balancing()
		err := bal.Validate()
		if c.Discovery != nil && len(pool.Endpoints) == 0 {
			err = bal.ValidateSettings()
		}
		if errors.As(err, &fe) {
			p.add(name+"."+fe.Field, "%s", fe.Msg)
		}
	}
}

// reportedUnder reports whether a problem was recorded at prefix or below it.
func (p *parser) reportedUnder(prefix string) bool {
	for _, pr := range p.problems {
		if pr.Path == prefix || strings.HasPrefix(pr.Path, prefix+".") {
			return true
		}
	}
	return false
}

func (p *parser) checkModeFields(c *Config, pool, path string, e *Endpoint) {
	isPrefill := pool == "prefill"

	if e.BootstrapPort != 0 && (c.Mode != ModeSGLang || !isPrefill) {
		p.add(path+".bootstrap_port", "only prefill endpoints in sglang mode have a bootstrap port")
	}
	if isPrefill && e.Host == "" && e.Cluster != "" && (c.Mode == ModeSGLang || c.Mode == ModeOrchestrated) {
		field := "bootstrap_host"
		if c.Mode == ModeOrchestrated {
			field = "remote_host"
		}
		p.add(path+".host", "is required for a cluster endpoint in %s mode (it becomes %s)", c.Mode, field)
	}

	r := e.KVReceiver
	needsReceiver := c.Mode == ModeLMCache && !isPrefill
	switch {
	case r != nil && !needsReceiver:
		p.add(path+".kv_receiver", "only decode endpoints in lmcache mode have a kv_receiver")
		return
	case r == nil && needsReceiver:
		p.add(path+".kv_receiver", "is required on decode endpoints in lmcache mode")
		return
	case r == nil:
		return
	}
	rp := path + ".kv_receiver"
	if r.Host == "" {
		r.Host = e.Host
		if r.Host == "" && !p.reported(rp+".host") {
			p.add(rp+".host", "is required when the endpoint has neither \"address\" nor \"host\"")
		}
	}
	switch {
	case len(r.InitPorts) == 0 && !p.reported(rp+".init_ports"):
		p.add(rp+".init_ports", "must list one port per decoder TP rank")
	case len(r.AllocPorts) == 0 && !p.reported(rp+".alloc_ports"):
		p.add(rp+".alloc_ports", "must list one port per decoder TP rank")
	case len(r.InitPorts) != len(r.AllocPorts):
		p.add(rp, "init_ports has %d entries but alloc_ports has %d: both need one per decoder TP rank",
			len(r.InitPorts), len(r.AllocPorts))
	}
	seen := map[int]string{}
	for _, l := range []struct {
		name  string
		ports []int
	}{{"init_ports", r.InitPorts}, {"alloc_ports", r.AllocPorts}} {
		for i, port := range l.ports {
			pp := index(rp+"."+l.name, i)
			if port == 0 {
				continue // already reported
			}
			if prev := seen[port]; prev != "" {
				p.add(pp, "port %d is already used by %s", port, prev)
				continue
			}
			seen[port] = pp
		}
	}
}
