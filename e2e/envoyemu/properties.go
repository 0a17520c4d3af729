package envoyemu

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// property is Context::getProperty for the attributes the emulator knows.
// The path is NUL-separated ("request\x00path"). Values use Envoy's encodings:
// strings raw, integers and timestamps 8-byte little-endian, maps as pairs.
// Request attributes read the request headers the plugin can see right now,
// so, as in Envoy, request.path is NotFound in response callbacks.
func (c *ctxState) property(path string) ([]byte, bool) {
	parts := strings.Split(path, "\x00")
	top := parts[0]
	rest := parts[1:]
	str := func(s string) ([]byte, bool) {
		if len(rest) != 0 {
			return nil, false
		}
		return []byte(s), true
	}
	if c.v != nil && c.v.spec != nil {
		switch top {
		case "plugin_name":
			return str(c.v.spec.Name)
		case "plugin_root_id":
			return str(c.v.spec.RootID)
		case "plugin_vm_id":
			return str(c.v.spec.VMID)
		}
	}
	if c.hooks == nil {
		return nil, false
	}
	info := c.hooks.info()
	switch top {
	case "request":
		return c.requestAttr(rest, info)
	case "response":
		return c.responseAttr(rest, info)
	case "source":
		return addrAttr(rest, info.source)
	case "destination":
		return addrAttr(rest, info.destination)
	case "upstream":
		return addrAttr(rest, info.upstreamHost)
	case "connection_id":
		if len(rest) == 0 {
			return u64(info.connectionID), true
		}
		return nil, false
	case "xds":
		if len(rest) != 1 {
			return nil, false
		}
		switch rest[0] {
		case "cluster_name":
			if info.clusterName != "" {
				return []byte(info.clusterName), true
			}
		case "route_name":
			return []byte(info.routeName), true
		}
		return nil, false
	}
	if v, ok := c.filterState[top]; ok && len(rest) == 0 {
		return v, true
	}
	return nil, false
}

func (c *ctxState) requestAttr(rest []string, info *streamInfo) ([]byte, bool) {
	if len(rest) == 0 {
		return nil, false
	}
	h := c.headerMapFor(uint32(abispec.MapTypeHttpRequestHeaders))
	header := func(name string) ([]byte, bool) {
		if h == nil || len(rest) != 1 {
			return nil, false
		}
		v, ok := h.get(name)
		return []byte(v), ok
	}
	switch rest[0] {
	case "path":
		return header(":path")
	case "url_path":
		b, ok := header(":path")
		if ok {
			p, _, _ := strings.Cut(string(b), "?")
			b = []byte(p)
		}
		return b, ok
	case "host":
		return header(":authority")
	case "scheme":
		return header(":scheme")
	case "method":
		return header(":method")
	case "referer":
		return header("referer")
	case "useragent":
		return header("user-agent")
	case "id":
		return header("x-request-id")
	case "headers":
		return mapAttr(h, rest[1:])
	case "protocol":
		if len(rest) == 1 {
			return []byte(info.protocol), true
		}
	case "time":
		if len(rest) == 1 {
			return u64(uint64(info.start.UnixNano())), true
		}
	case "size":
		if len(rest) == 1 {
			return u64(uint64(info.requestSize)), true
		}
	}
	return nil, false
}

func (c *ctxState) responseAttr(rest []string, info *streamInfo) ([]byte, bool) {
	if len(rest) == 0 {
		return nil, false
	}
	switch rest[0] {
	case "code":
		if info.responseCode != 0 && len(rest) == 1 {
			return u64(uint64(info.responseCode)), true
		}
	case "size":
		if len(rest) == 1 {
			return u64(uint64(info.responseSize)), true
		}
	case "code_details":
		if info.details != "" && len(rest) == 1 {
			return []byte(info.details), true
		}
	case "headers":
		return mapAttr(c.headerMapFor(uint32(abispec.MapTypeHttpResponseHeaders)), rest[1:])
	case "trailers":
		return mapAttr(c.headerMapFor(uint32(abispec.MapTypeHttpResponseTrailers)), rest[1:])
	}
	return nil, false
}

// mapAttr serializes a header map as pairs, or one value when a key follows.
func mapAttr(h *headerMap, rest []string) ([]byte, bool) {
	switch len(rest) {
	case 0:
		if h == nil {
			return abispec.AppendPairs(nil, nil), true
		}
		return abispec.AppendPairs(nil, h.pairs), true
	case 1:
		if h == nil {
			return nil, false
		}
		v, ok := h.get(rest[0])
		return []byte(v), ok
	}
	return nil, false
}

func addrAttr(rest []string, addr string) ([]byte, bool) {
	if addr == "" || len(rest) != 1 {
		return nil, false
	}
	switch rest[0] {
	case "address":
		return []byte(addr), true
	case "port":
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, false
		}
		return u64(uint64(ap.Port())), true
	}
	return nil, false
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
