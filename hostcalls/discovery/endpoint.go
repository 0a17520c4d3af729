package discovery

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
)

// Endpoint is one engine as the filter reads it: the address form of the
// plugin configuration's endpoints (docs/CONFIGURATION.md).
type Endpoint struct {
	Name          string      `json:"name"`
	Address       string      `json:"address"`
	Host          string      `json:"host,omitempty"`
	BootstrapPort int         `json:"bootstrap_port,omitempty"`
	KVReceiver    *KVReceiver `json:"kv_receiver,omitempty"`
	// MetricsPort is where the companion scrapes the engine's /metrics (0:
	// the address's port). The filter does not read it.
	MetricsPort int `json:"-"`
}

// KVReceiver is an lmcache decode engine's NIXL receiver.
type KVReceiver struct {
	Host       string `json:"host,omitempty"`
	InitPorts  []int  `json:"init_ports"`
	AllocPorts []int  `json:"alloc_ports"`
}

// check returns what is wrong with e for the filter, or "". The filter checks
// again (and per mode); this catches what no mode accepts, near its cause.
func (e *Endpoint) check() string {
	if msg := checkName(e.Name); msg != "" {
		return "name " + msg
	}
	ap, err := netip.ParseAddrPort(e.Address)
	if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().Zone() != "" {
		return fmt.Sprintf("address %q is not an IP:port (IPv6 as [::1]:8000)", e.Address)
	}
	return ""
}

func checkName(s string) string {
	if s == "" || len(s) > 64 {
		return "must be 1 to 64 bytes"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "may only contain letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

// SafeName turns s into a valid endpoint name: other characters become '-',
// and a name over 64 bytes keeps its head and a hash of the whole.
func SafeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	if len(b) <= 64 {
		return string(b)
	}
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%s-%08x", b[:55], h.Sum32())
}

// AddrName is the endpoint name of an address in a pool: "decode-10.0.0.5-8000".
func AddrName(pool string, ap netip.AddrPort) string {
	return SafeName(pool + "-" + strings.ReplaceAll(ap.Addr().String(), ":", "-") + "-" + fmt.Sprint(ap.Port()))
}

// normalize returns the valid endpoints of list, sorted by name, first of
// each name and address kept, and the problems of the others.
func normalize(list []Endpoint) ([]Endpoint, []string) {
	var out []Endpoint
	var problems []string
	names, addrs := map[string]bool{}, map[string]bool{}
	for _, e := range list {
		switch msg := e.check(); {
		case msg != "":
			problems = append(problems, fmt.Sprintf("%s: %s", e.Name, msg))
		case names[e.Name]:
			problems = append(problems, fmt.Sprintf("%s: name used twice", e.Name))
		case addrs[e.Address]:
			problems = append(problems, fmt.Sprintf("%s: address %s used twice", e.Name, e.Address))
		default:
			names[e.Name], addrs[e.Address] = true, true
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.Name, b.Name) })
	return out, problems
}
