package kvbridge

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxReqIDBytes bounds a req_id, on the ZMQ side and on the HTTP side alike.
// 256 bytes fits any id a router generates (pdroute's are 36-byte UUIDs;
// LMCache's example proxies use decimal counters) while keeping a million
// pending entries within a predictable amount of memory.
const MaxReqIDBytes = 256

// Tags LMCache writes into the "type" key of a notification: msgspec encodes
// a tagged Struct with its class name. ProxyNotif is current
// (lmcache/v1/storage_backend/pd_backend.py); NixlProxyNotif is the older
// nixl_connector_v3 name. Other tags (CancelNotif, AllocRequest, ...) are not
// KV-ready signals.
const (
	TagProxyNotif     = "ProxyNotif"
	TagNixlProxyNotif = "NixlProxyNotif"
)

// errUnknownTag marks a well-formed map whose "type" is not a KV-ready tag.
var errUnknownTag = errors.New("type tag is not a KV-ready notification")

// malformedError says why a frame is not a notification.
type malformedError string

func (e malformedError) Error() string { return "malformed frame: " + string(e) }

// wireNotification is the exact shape LMCache puts on the wire: msgspec writes
// the tag field first, then the struct fields in declaration order.
type wireNotification struct {
	Type  string `msgpack:"type"`
	ReqID string `msgpack:"req_id"`
}

// EncodeNotification returns the msgpack frame LMCache's prefiller sends for
// reqID: the map {"type": tag, "req_id": reqID}, tag first. Tests, the load
// tool and mock engines use it to speak to kvbridge exactly as LMCache does.
func EncodeNotification(tag, reqID string) []byte {
	b, err := msgpack.Marshal(wireNotification{Type: tag, ReqID: reqID})
	if err != nil {
		// Marshal of two strings cannot fail.
		panic(err)
	}
	return b
}

// parseNotification decodes one ZMQ frame and returns the req_id it carries,
// as a slice of frame. The frame must hold exactly one msgpack map with a str
// "req_id" of 1..MaxReqIDBytes bytes of UTF-8; a "type" key, when present,
// must be a str and one of the two KV-ready tags (otherwise errUnknownTag).
// Other keys, of any type, are skipped and key order does not matter.
//
// It works on the byte slice directly rather than through a general msgpack
// decoder: it allocates nothing, never trusts a declared length beyond the
// bytes present, and is strict about types (a bin or nil req_id is not a
// string). See RATIONALE.md (kvbridge).
func parseNotification(frame []byte) ([]byte, error) {
	r := mpReader{b: frame}
	n, ok := r.mapLen()
	if !ok {
		return nil, malformedError("not a msgpack map")
	}
	var reqID, tag []byte
	var haveID, haveTag bool
	for i := uint64(0); i < n; i++ {
		key, isStr, ok := r.str()
		if !ok {
			return nil, malformedError("truncated map")
		}
		switch {
		case isStr && string(key) == "req_id":
			if haveID {
				return nil, malformedError("duplicate req_id")
			}
			if reqID, isStr, ok = r.str(); !ok || !isStr {
				return nil, malformedError("req_id is not a string")
			}
			haveID = true
		case isStr && string(key) == "type":
			if haveTag {
				return nil, malformedError("duplicate type")
			}
			if tag, isStr, ok = r.str(); !ok || !isStr {
				return nil, malformedError("type is not a string")
			}
			haveTag = true
		default:
			if !isStr && !r.skip() { // a non-string key: skip the key itself first
				return nil, malformedError("truncated map")
			}
			if !r.skip() {
				return nil, malformedError("truncated map")
			}
		}
	}
	if r.off != len(r.b) {
		return nil, malformedError("trailing bytes after the map")
	}
	if haveTag && string(tag) != TagProxyNotif && string(tag) != TagNixlProxyNotif {
		return nil, errUnknownTag
	}
	if !haveID {
		return nil, malformedError("no req_id")
	}
	if len(reqID) == 0 || len(reqID) > MaxReqIDBytes || !utf8.Valid(reqID) {
		return nil, malformedError("req_id is not 1..256 bytes of UTF-8")
	}
	return reqID, nil
}

// mpReader walks msgpack values in a byte slice. Every method reports false
// when the slice ends before the value does.
type mpReader struct {
	b   []byte
	off int
}

// mapLen reads a map header.
func (r *mpReader) mapLen() (uint64, bool) {
	c, ok := r.byte()
	if !ok {
		return 0, false
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		return uint64(c & 0x0f), true
	case c == 0xde:
		return r.uint(2)
	case c == 0xdf:
		return r.uint(4)
	}
	return 0, false
}

// str reads a str value. When the next value is not a str it consumes nothing
// and returns isStr false with ok true.
func (r *mpReader) str() (s []byte, isStr, ok bool) {
	if r.off >= len(r.b) {
		return nil, false, false
	}
	var n uint64
	switch c := r.b[r.off]; {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9, c == 0xda, c == 0xdb:
		r.off++
		if n, ok = r.uint(1 << (c - 0xd9)); !ok {
			return nil, true, false
		}
	default:
		return nil, false, true
	}
	s, ok = r.take(n)
	return s, true, ok
}

// skip steps over one value of any type, containers included. It keeps a
// count of values still to skip instead of recursing, so deep nesting costs
// no stack; every value consumes at least one byte, so the loop ends.
func (r *mpReader) skip() bool {
	for pending := uint64(1); pending > 0; pending-- {
		c, ok := r.byte()
		if !ok {
			return false
		}
		var n uint64 // bytes of payload to step over
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			// fixint, nil, bool: no payload
		case c <= 0x8f: // fixmap
			pending += 2 * uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			pending += uint64(c & 0x0f)
		case c <= 0xbf: // fixstr
			n = uint64(c & 0x1f)
		case c == 0xc4, c == 0xc5, c == 0xc6: // bin 8/16/32
			if n, ok = r.uint(1 << (c - 0xc4)); !ok {
				return false
			}
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext 8/16/32: length, then a type byte
			if n, ok = r.uint(1 << (c - 0xc7)); !ok {
				return false
			}
			n++
		case c == 0xca, c == 0xcb: // float 32/64
			n = 4 << (c - 0xca)
		case c >= 0xcc && c <= 0xcf: // uint 8..64
			n = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3: // int 8..64
			n = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8: // fixext 1..16, plus the type byte
			n = 1 + 1<<(c-0xd4)
		case c == 0xd9, c == 0xda, c == 0xdb: // str 8/16/32
			if n, ok = r.uint(1 << (c - 0xd9)); !ok {
				return false
			}
		case c == 0xdc, c == 0xdd: // array 16/32
			m, ok := r.uint(2 << (c - 0xdc))
			if !ok {
				return false
			}
			pending += m
		case c == 0xde, c == 0xdf: // map 16/32
			m, ok := r.uint(2 << (c - 0xde))
			if !ok {
				return false
			}
			pending += 2 * m
		default: // 0xc1 is never used
			return false
		}
		if _, ok := r.take(n); !ok {
			return false
		}
	}
	return true
}

func (r *mpReader) byte() (byte, bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	r.off++
	return r.b[r.off-1], true
}

// uint reads a big-endian unsigned integer of size 1, 2 or 4 bytes.
func (r *mpReader) uint(size int) (uint64, bool) {
	b, ok := r.take(uint64(size))
	if !ok {
		return 0, false
	}
	switch size {
	case 1:
		return uint64(b[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), true
	default:
		return uint64(binary.BigEndian.Uint32(b)), true
	}
}

func (r *mpReader) take(n uint64) ([]byte, bool) {
	if n > uint64(len(r.b)-r.off) {
		return nil, false
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, true
}
