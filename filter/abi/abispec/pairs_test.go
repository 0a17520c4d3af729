package abispec

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// goldenPairs is {":path": "/v1", "x-e": ""} laid out by hand from the spec:
// count, the (key, value) lengths, then each key and value NUL-terminated.
var goldenPairs = []byte{
	2, 0, 0, 0, // count
	5, 0, 0, 0, 3, 0, 0, 0, // len(":path"), len("/v1")
	3, 0, 0, 0, 0, 0, 0, 0, // len("x-e"), len("")
	':', 'p', 'a', 't', 'h', 0, '/', 'v', '1', 0,
	'x', '-', 'e', 0, 0,
}

func TestAppendPairsGolden(t *testing.T) {
	pairs := [][2]string{{":path", "/v1"}, {"x-e", ""}}
	got := AppendPairs(nil, pairs)
	if !bytes.Equal(got, goldenPairs) {
		t.Fatalf("AppendPairs =\n% x\nwant\n% x", got, goldenPairs)
	}
	if PairsSize(pairs) != len(goldenPairs) {
		t.Errorf("PairsSize = %d, want %d", PairsSize(pairs), len(goldenPairs))
	}
	// Appending keeps what dst held.
	if got := AppendPairs([]byte("ab"), pairs); !bytes.Equal(got, append([]byte("ab"), goldenPairs...)) {
		t.Errorf("AppendPairs with prefix = % x", got)
	}
	if got := AppendPairs(nil, nil); !bytes.Equal(got, []byte{0, 0, 0, 0}) {
		t.Errorf("empty = % x", got)
	}
}

func TestPairsRoundTrip(t *testing.T) {
	for _, pairs := range [][][2]string{
		{{":method", "POST"}},
		{{"a", "1"}, {"a", "2"}, {"b", ""}, {"", "v"}},
		{{"bin", "\x01\xff\x00inner-nul"}},
		{{"long", string(bytes.Repeat([]byte("x"), 70000))}},
	} {
		b := AppendPairs(nil, pairs)
		got, err := ParsePairs(b)
		if err != nil {
			t.Fatalf("ParsePairs(AppendPairs(%.40q)): %v", pairs, err)
		}
		if !slices.Equal(got, pairs) {
			t.Errorf("round trip = %.40q, want %.40q", got, pairs)
		}
		// The result does not alias the input.
		clear(b)
		if !slices.Equal(got, pairs) {
			t.Errorf("result changed with its input: %.40q", got)
		}
	}
}

func TestParsePairs(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want [][2]string
		ok   bool
	}{
		{"empty", nil, nil, true},
		{"single NUL is empty", []byte{0}, nil, true},
		{"count zero", []byte{0, 0, 0, 0}, [][2]string{}, true},
		{"golden", goldenPairs, [][2]string{{":path", "/v1"}, {"x-e", ""}}, true},
		{"short header", []byte{1, 0}, nil, false},
		{"count beyond data", []byte{1, 0, 0, 0, 0, 0, 0, 0}, nil, false},
		{"huge count", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, false},
		{"missing key NUL", []byte{1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}, nil, false},
		{"missing value NUL", []byte{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b', 'c'}, nil, false},
		{"key overruns", []byte{1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 'a', 0}, nil, false},
		{"value length huge", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}, nil, false},
		{"trailing bytes", append(slices.Clone(goldenPairs), 0), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePairs(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformedPairs) {
				t.Errorf("error %v does not wrap ErrMalformedPairs", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzParsePairs: the guest parses bytes the host wrote. Whatever they are,
// parsing must not panic, and what parses must serialize back to the same
// bytes (the format has one encoding per list, except the empty list).
func FuzzParsePairs(f *testing.F) {
	f.Add(goldenPairs)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0})
	f.Add(AppendPairs(nil, [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"x-request-id", "3f1c"}}))
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		pairs, err := ParsePairs(b)
		if err != nil || len(b) <= 1 {
			return
		}
		if again := AppendPairs(nil, pairs); !bytes.Equal(again, b) {
			t.Fatalf("re-serialized % x, input % x", again, b)
		}
	})
}

func BenchmarkParsePairs(b *testing.B) {
	in := AppendPairs(nil, benchHeaders)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParsePairs(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendPairs(b *testing.B) {
	buf := make([]byte, 0, PairsSize(benchHeaders))
	b.SetBytes(int64(cap(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendPairs(buf[:0], benchHeaders)
	}
}

// benchHeaders is a typical OpenAI-style request's header map (16 headers).
var benchHeaders = [][2]string{
	{":authority", "llm.example.com"}, {":path", "/v1/chat/completions"}, {":method", "POST"},
	{":scheme", "https"}, {"content-type", "application/json"}, {"content-length", "23817"},
	{"authorization", "Bearer sk-0123456789abcdef0123456789abcdef"}, {"user-agent", "openai-python/1.54.0"},
	{"accept", "application/json"}, {"accept-encoding", "gzip, deflate"},
	{"x-request-id", "6f1e4c2a-8a3d-4b8e-9d6c-1f2e3a4b5c6d"}, {"x-forwarded-for", "10.0.0.7"},
	{"x-forwarded-proto", "https"}, {"x-envoy-expected-rq-timeout-ms", "600000"},
	{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {"x-stainless-lang", "python"},
}

// FuzzEachPair: EachPair visits exactly what ParsePairs returns, and
// refuses exactly what it refuses.
func FuzzEachPair(f *testing.F) {
	f.Add(goldenPairs)
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add(AppendPairs(nil, [][2]string{{":status", "200"}, {"content-type", "application/json"}}))
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := ParsePairs(b)
		var got [][2]string
		err := EachPair(b, func(k, v []byte) { got = append(got, [2]string{string(k), string(v)}) })
		if (err != nil) != (werr != nil) {
			t.Fatalf("EachPair error %v, ParsePairs error %v", err, werr)
		}
		if len(got) != len(want) {
			t.Fatalf("EachPair visited %q, ParsePairs returned %q", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("EachPair visited %q, ParsePairs returned %q", got, want)
			}
		}
	})
}
