package connector

// maxRequestIDLen bounds a client X-Request-Id pdroute keeps: engines put the
// id in their own request ids, logs and metrics labels.
const maxRequestIDLen = 128

// RequestID returns the id both legs carry as X-Request-Id: the client's own
// (the first header value) when well-formed, so client, proxy and engine logs
// line up; otherwise a fresh UUIDv4 made from random. Well-formed means 1 to
// 128 bytes of letters, digits, '-', '_', '.' and ':' — enough for UUIDs,
// ULIDs and trace ids, and nothing that could break a log line, a header or
// a key built from the id.
//
// The id is not trusted to be unique: lmcache's disagg_spec req_id, which
// must be, is always a fresh UUIDv4.
func RequestID(header string, random [16]byte) string {
	if wellFormedRequestID(header) {
		return header
	}
	return UUIDv4(random)
}

// KeepsRequestID reports whether RequestID keeps the client's header
// rather than make a UUID (the caller then needs no random bytes).
func KeepsRequestID(header string) bool { return wellFormedRequestID(header) }

func wellFormedRequestID(s string) bool {
	if len(s) == 0 || len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// UUIDv4 formats 16 random bytes as an RFC 9562 version-4 UUID (lower-case
// 8-4-4-4-12 hex), setting the version and variant bits.
func UUIDv4(random [16]byte) string {
	var out [36]byte
	PutUUIDv4(&out, random)
	return string(out[:])
}

// PutUUIDv4 writes UUIDv4(random) into out (memory a caller keeps the id
// in, sparing the string's allocation).
func PutUUIDv4(out *[36]byte, random [16]byte) {
	random[6] = random[6]&0x0f | 0x40
	random[8] = random[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	j := 0
	for i, b := range random {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hex[b>>4], hex[b&0x0f]
		j += 2
	}
}
