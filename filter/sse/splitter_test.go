package sse

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type got struct{ name, data string }

func (g got) String() string { return fmt.Sprintf("[%s]%q", g.name, g.data) }

// collect feeds the chunks in order and returns the events and the first
// error (Feed's, or End's when endCheck).
func collect(s *Splitter, chunks [][]byte) ([]got, error) {
	var evs []got
	yield := func(e Event) error {
		name := "<none>"
		if e.Name != nil {
			name = string(e.Name)
		}
		evs = append(evs, got{name, string(e.Data)})
		return nil
	}
	for _, c := range chunks {
		if err := s.Feed(c, yield); err != nil {
			return evs, err
		}
	}
	return evs, nil
}

var splitterCases = []struct {
	name   string
	stream string
	want   []got
}{
	{"lf", "data: a\n\ndata: b\n\n", []got{{"<none>", "a"}, {"<none>", "b"}}},
	{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []got{{"<none>", "a"}, {"<none>", "b"}}},
	{"cr", "data: a\r\rdata: b\r\r", []got{{"<none>", "a"}, {"<none>", "b"}}},
	{"mixed endings", "data: a\r\n\rdata: b\n\r\n", []got{{"<none>", "a"}, {"<none>", "b"}}},
	{"multi-line data", "data: one\ndata:two\ndata:  three\n\n", []got{{"<none>", "one\ntwo\n three"}}},
	{"empty data line", "data:\n\ndata\n\n", []got{{"<none>", ""}, {"<none>", ""}}},
	{"event name", "event: error\ndata: {\"e\":1}\n\n", []got{{"error", `{"e":1}`}}},
	{"name resets per event", "event: x\ndata: 1\n\ndata: 2\n\n", []got{{"x", "1"}, {"<none>", "2"}}},
	{"comments and other fields ignored", ": hi\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n", []got{{"<none>", "x"}}},
	{"no data, no event", "event: ping\n\n: c\n\n\n\ndata: y\n\n", []got{{"<none>", "y"}}},
	{"colon in value", "data: a: b\n\n", []got{{"<none>", "a: b"}}},
	{"utf-8 kept whole", "data: caf\u00e9 ✓ \U0001F600\n\n", []got{{"<none>", "caf\u00e9 ✓ \U0001F600"}}},
	{"unfinished last event dropped", "data: a\n\ndata: b\n", []got{{"<none>", "a"}}},
	{"done marker", "data: {\"x\":1}\n\ndata: [DONE]\n\n", []got{{"<none>", `{"x":1}`}, {"<none>", "[DONE]"}}},
}

// TestSplitterEveryBoundary feeds every case whole, cut at every byte offset
// into two chunks, cut into three chunks at every pair of offsets, and byte
// by byte: the events must always be the same.
func TestSplitterEveryBoundary(t *testing.T) {
	for _, tt := range splitterCases {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.stream)
			check := func(desc string, chunks [][]byte) {
				t.Helper()
				evs, err := collect(NewSplitter(1<<10), chunks)
				if err != nil || !reflect.DeepEqual(evs, tt.want) {
					t.Fatalf("%s: got %v (err %v), want %v", desc, evs, err, tt.want)
				}
			}
			check("whole", [][]byte{b})
			for i := 0; i <= len(b); i++ {
				check(fmt.Sprintf("cut at %d", i), [][]byte{b[:i], b[i:]})
				for j := i; j <= len(b); j++ {
					check(fmt.Sprintf("cut at %d and %d", i, j), [][]byte{b[:i], b[i:j], b[j:]})
				}
			}
			var bytewise [][]byte
			for i := range b {
				bytewise = append(bytewise, b[i:i+1])
			}
			check("byte by byte", bytewise)
		})
	}
}

func TestSplitterLimit(t *testing.T) {
	const max = 16
	tests := []struct {
		name   string
		chunks []string
		events int
		err    error
	}{
		{"data at the limit", []string{"data: " + strings.Repeat("x", max) + "\n\n"}, 1, nil},
		{"data over the limit", []string{"data: " + strings.Repeat("x", max+1) + "\n\n"}, 0, ErrEventTooLarge},
		{"lines adding up", []string{"data: 12345678\n", "data: 12345678\n\n"}, 0, ErrEventTooLarge},
		{"partial line over the limit", []string{"data: 1234567890", "1234567890"}, 0, ErrEventTooLarge},
		{"many small events are fine", []string{strings.Repeat("data: 0123456789\n\n", 100)}, 100, nil},
		{"huge comment", []string{":" + strings.Repeat("c", 40)}, 0, ErrEventTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSplitter(max)
			var chunks [][]byte
			for _, c := range tt.chunks {
				chunks = append(chunks, []byte(c))
			}
			evs, err := collect(s, chunks)
			if len(evs) != tt.events || !errors.Is(err, tt.err) {
				t.Fatalf("%d events, err %v; want %d, %v", len(evs), err, tt.events, tt.err)
			}
			if s.Buffered() > max+len("data: ") && err == nil {
				t.Errorf("holds %d bytes", s.Buffered())
			}
			if tt.err != nil {
				if err := s.Feed([]byte("data: x\n\n"), func(Event) error { return nil }); err != tt.err {
					t.Errorf("a failed splitter accepted more input: %v", err)
				}
				if s.Buffered() != 0 {
					t.Errorf("a failed splitter still holds %d bytes", s.Buffered())
				}
			}
		})
	}
}

func TestSplitterEnd(t *testing.T) {
	s := NewSplitter(64)
	if _, err := collect(s, [][]byte{[]byte("data: a\n\ndata: b")}); err != nil {
		t.Fatal(err)
	}
	if s.Buffered() != len("data: b") {
		t.Errorf("Buffered = %d", s.Buffered())
	}
	if err := s.End(); err != ErrTruncated {
		t.Errorf("End = %v, want ErrTruncated", err)
	}
	if err := s.End(); err != nil {
		t.Errorf("End after reset = %v", err)
	}
	s2 := NewSplitter(64)
	collect(s2, [][]byte{[]byte("data: a\n")})
	if err := s2.End(); err != ErrTruncated {
		t.Errorf("data without blank line: End = %v", err)
	}
}

func TestSplitterYieldError(t *testing.T) {
	stop := errors.New("stop")
	s := NewSplitter(64)
	n := 0
	err := s.Feed([]byte("data: 1\n\ndata: 2\n\n"), func(Event) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("err %v after %d events", err, n)
	}
}

func FuzzSplitter(f *testing.F) {
	for _, c := range splitterCases {
		f.Add([]byte(c.stream), uint16(3))
	}
	f.Add([]byte("data: x\r"), uint16(8))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		whole, errWhole := collect(NewSplitter(256), [][]byte{stream})
		i := int(cut) % (len(stream) + 1)
		split, errSplit := collect(NewSplitter(256), [][]byte{stream[:i], stream[i:]})
		if errWhole == nil && errSplit == nil && !reflect.DeepEqual(whole, split) {
			t.Fatalf("cut at %d changed the events:\n%v\n%v", i, whole, split)
		}
		if (errWhole == nil) != (errSplit == nil) && !errors.Is(errWhole, ErrEventTooLarge) && !errors.Is(errSplit, ErrEventTooLarge) {
			t.Fatalf("cut at %d changed the error: %v vs %v", i, errWhole, errSplit)
		}
		for _, e := range whole {
			size := len(e.data)
			if e.name != "<none>" { // collect's placeholder for an event without a name
				size += len(e.name)
			}
			if size > 256 {
				t.Fatalf("event of %d bytes (name %q) passed a 256-byte limit", size, e.name)
			}
		}
	})
}
