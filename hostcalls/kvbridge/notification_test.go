package kvbridge

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// lmcacheFrame42 is the frame an LMCache prefiller rank sends for req_id "42":
// the byte example in shared/reference/protocol-notes.md §2.3.
const lmcacheFrame42 = "82 a4 74 79 70 65 aa 50 72 6f 78 79 4e 6f 74 69 66 a6 72 65 71 5f 69 64 a2 34 32"

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mp encodes v with the msgpack library, an encoder independent of the
// decoder under test.
func mp(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ordered builds a msgpack map with keys in the given order; values are
// encoded by the library.
func ordered(t testing.TB, kv ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.EncodeMapLen(len(kv) / 2); err != nil {
		t.Fatal(err)
	}
	for _, v := range kv {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestEncodeNotificationIsLMCacheBytes(t *testing.T) {
	got := EncodeNotification(TagProxyNotif, "42")
	if want := unhex(t, lmcacheFrame42); !bytes.Equal(got, want) {
		t.Fatalf("EncodeNotification = % x\nwant             % x", got, want)
	}
}

func TestParseNotification(t *testing.T) {
	long := strings.Repeat("x", MaxReqIDBytes)
	tests := []struct {
		name  string
		frame []byte
		id    string // expected req_id when err is nil
		err   error  // errUnknownTag, or a malformedError
	}{
		{"lmcache bytes", unhex(t, lmcacheFrame42), "42", nil},
		{"older tag", EncodeNotification(TagNixlProxyNotif, "r-1"), "r-1", nil},
		{"req_id first", ordered(t, "req_id", "a", "type", "ProxyNotif"), "a", nil},
		{"no type tag", ordered(t, "req_id", "b"), "b", nil},
		{"extra keys of every type", ordered(t,
			"n", nil, "t", true, "i", -5, "u", uint64(1)<<40, "f", 1.5, "f32", float32(2.5),
			"bin", []byte{1, 2, 3}, "arr", []any{1, "x", []any{map[string]any{"k": []byte{9}}}},
			"type", "ProxyNotif", "map", map[string]any{"req_id": 7}, "s", strings.Repeat("s", 300),
			"ext", msgpack.RawMessage{0xd6, 0x05, 1, 2, 3, 4}, "req_id", "c",
		), "c", nil},
		{"non-string keys skipped", ordered(t, 1, "x", []byte("req_id"), 5, "req_id", "d"), "d", nil},
		{"map16 header, str8 id", append([]byte{0xde, 0x00, 0x01, 0xa6, 'r', 'e', 'q', '_', 'i', 'd', 0xd9, 0x02}, "ef"...), "ef", nil},
		{"str16 id", append([]byte{0x81, 0xa6, 'r', 'e', 'q', '_', 'i', 'd', 0xda, 0x00, 0x01}, 'g'), "g", nil},
		{"id at the length limit", EncodeNotification(TagProxyNotif, long), long, nil},
		{"unicode id", EncodeNotification(TagProxyNotif, "ид-1"), "ид-1", nil},

		{"cancel notification", ordered(t, "type", "CancelNotif", "req_id", "a", "keys", []string{"k"}), "", errUnknownTag},
		{"alloc request", ordered(t, "type", "AllocRequest", "keys", []string{"k"}, "fmt", 1), "", errUnknownTag},
		{"unknown tag without req_id", ordered(t, "type", "X"), "", errUnknownTag},

		{"empty frame", nil, "", malformedError("not a msgpack map")},
		{"array", mp(t, []string{"ProxyNotif", "a"}), "", malformedError("not a msgpack map")},
		{"string", mp(t, "req_id"), "", malformedError("not a msgpack map")},
		{"nil", mp(t, nil), "", malformedError("not a msgpack map")},
		{"empty map", mp(t, map[string]any{}), "", malformedError("no req_id")},
		{"no req_id", ordered(t, "type", "ProxyNotif", "id", "a"), "", malformedError("no req_id")},
		{"int req_id", ordered(t, "type", "ProxyNotif", "req_id", 42), "", malformedError("req_id is not a string")},
		{"bin req_id", ordered(t, "type", "ProxyNotif", "req_id", []byte("42")), "", malformedError("req_id is not a string")},
		{"nil req_id", ordered(t, "type", "ProxyNotif", "req_id", nil), "", malformedError("req_id is not a string")},
		{"array req_id", ordered(t, "req_id", []string{"a"}), "", malformedError("req_id is not a string")},
		{"empty req_id", EncodeNotification(TagProxyNotif, ""), "", malformedError("req_id is not 1..256 bytes of UTF-8")},
		{"req_id too long", EncodeNotification(TagProxyNotif, long+"x"), "", malformedError("req_id is not 1..256 bytes of UTF-8")},
		{"req_id not UTF-8", EncodeNotification(TagProxyNotif, "a\xff"), "", malformedError("req_id is not 1..256 bytes of UTF-8")},
		{"int type", ordered(t, "type", 3, "req_id", "a"), "", malformedError("type is not a string")},
		{"duplicate req_id", ordered(t, "req_id", "a", "req_id", "b"), "", malformedError("duplicate req_id")},
		{"duplicate type", ordered(t, "type", "ProxyNotif", "type", "ProxyNotif", "req_id", "a"), "", malformedError("duplicate type")},
		{"trailing bytes", append(unhex(t, lmcacheFrame42), 0xc0), "", malformedError("trailing bytes after the map")},
		{"two maps", append(unhex(t, lmcacheFrame42), unhex(t, lmcacheFrame42)...), "", malformedError("trailing bytes after the map")},
		{"map32 claims 4G entries", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'k', 0xc0}, "", malformedError("truncated map")},
		{"str32 claims 4GB", []byte{0x81, 0xa1, 'k', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, "", malformedError("truncated map")},
		{"array32 claims 4G items", []byte{0x81, 0xa1, 'k', 0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}, "", malformedError("truncated map")},
		{"req_id str32 claims 4GB", []byte{0x81, 0xa6, 'r', 'e', 'q', '_', 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff}, "", malformedError("req_id is not a string")},
		{"reserved code 0xc1", []byte{0x81, 0xa1, 'k', 0xc1}, "", malformedError("truncated map")},
		{"deep nesting", append(append([]byte{0x81, 0xa1, 'k'}, bytes.Repeat([]byte{0x91}, 100_000)...), 0xc0), "", malformedError("no req_id")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := parseNotification(tt.frame)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || string(id) != tt.id {
				t.Fatalf("parseNotification = %q, %v; want %q", id, err, tt.id)
			}
		})
	}
}

// Every strict prefix of a valid frame is malformed, never accepted.
func TestParseNotificationTruncated(t *testing.T) {
	frame := ordered(t, "type", "ProxyNotif", "extra", map[string]any{"a": []int{1, 2}}, "req_id", "abc")
	for n := 0; n < len(frame); n++ {
		if id, err := parseNotification(frame[:n]); err == nil {
			t.Fatalf("prefix of %d bytes accepted as %q", n, id)
		}
	}
}

// FuzzParseNotification checks that the decoder never panics, that what it
// accepts satisfies the documented rules, and that the msgpack library reads
// the same req_id from every frame it accepts.
func FuzzParseNotification(f *testing.F) {
	f.Add(unhex(f, lmcacheFrame42))
	f.Add(EncodeNotification(TagNixlProxyNotif, "cmpl-3f1c2a9e-1"))
	f.Add(ordered(f, "req_id", "x", "type", "ProxyNotif", "keys", []string{"a", "b"}))
	f.Add(ordered(f, "type", "CancelNotif", "req_id", "x", "keys", []string{"k"}))
	f.Add(ordered(f, "type", "AllocRequest", "keys", []string{"k"}, "fmt", 1, "shape", []int{2, 3}, "dtype", "bf16", "last_chunk_toks", 7))
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa6, 'r', 'e', 'q', '_', 'i', 'd', 0xc4, 0x01, 'a'})
	f.Fuzz(func(t *testing.T, frame []byte) {
		id, err := parseNotification(frame)
		if err != nil {
			var m malformedError
			if !errors.Is(err, errUnknownTag) && !errors.As(err, &m) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		if len(id) == 0 || len(id) > MaxReqIDBytes || !bytes.Contains(frame, id) {
			t.Fatalf("accepted bad id %q", id)
		}
		var m map[string]any
		if msgpack.Unmarshal(frame, &m) != nil {
			return // the library is stricter about some skipped values (ext types)
		}
		if got, ok := m["req_id"].(string); !ok || got != string(id) {
			t.Fatalf("parseNotification = %q; msgpack library reads req_id %#v", id, m["req_id"])
		}
	})
}

func BenchmarkParseNotification(b *testing.B) {
	frame := EncodeNotification(TagProxyNotif, "cmpl-3f1c2a9e-8d7b-4c1a-9f5e-0a1b2c3d4e5f")
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := parseNotification(frame); err != nil {
			b.Fatal(err)
		}
	}
}
