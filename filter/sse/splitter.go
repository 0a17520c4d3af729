// Package sse handles the server-sent-event streams pdroute has to look
// into: an incremental splitter for engine streams arriving in arbitrary
// chunks; the lmcache-mode answer rewriting (the first token produced by the
// prefill, text_completion chunks turned into chat.completion.chunk chunks,
// usage corrected for the token the decoder did not generate, a
// non-streaming answer completed); and the terminal error event that ends a
// stream pdroute must fail (sglang prefill failure).
//
// It is pure Go compiled into the wasm filter: stdlib, gjson and the sibling
// connector and apierr packages only; no proxy-wasm import, no goroutines or
// timers.
package sse

import (
	"bytes"
	"errors"
)

// Errors of the Splitter.
var (
	// ErrEventTooLarge: one event grew past the Splitter's limit. The
	// Splitter stays failed; the stream cannot be followed any more.
	ErrEventTooLarge = errors.New("sse: event exceeds the size limit")
	// ErrTruncated: the stream ended inside an event (End).
	ErrTruncated = errors.New("sse: stream ended inside an event")
)

// Event is one dispatched event. Its slices are only valid during the
// callback that receives it.
type Event struct {
	// Name is the "event:" field, nil when the event had none.
	Name []byte
	// Data is the event's data lines joined by '\n'.
	Data []byte
}

// Splitter cuts an SSE byte stream, fed in chunks split anywhere (inside a
// line, between '\r' and '\n', inside a UTF-8 sequence), into events, per the
// WHATWG event-stream rules: lines end with "\r\n", "\n" or "\r"; a blank line
// dispatches; "data" lines accumulate; lines starting with ':' are comments;
// "id", "retry" and unknown fields are ignored; an event without data lines
// is not dispatched. Memory is bounded: the bytes held for one event never
// exceed the limit given to NewSplitter.
type Splitter struct {
	max     int
	line    []byte // a line split across chunks
	data    []byte
	name    []byte
	hasData bool
	hasName bool
	skipLF  bool // the previous chunk ended with '\r'
	err     error
}

// NewSplitter returns a Splitter that fails with ErrEventTooLarge when one
// event (its partial line, name and data) needs more than maxEvent bytes.
// Engine chunks are well under 4 KiB; 1 MiB leaves room for logprobs.
func NewSplitter(maxEvent int) *Splitter {
	return &Splitter{max: maxEvent}
}

// Feed consumes a chunk, calling yield for every event it completes, in
// order. An error from yield stops Feed and is returned (the rest of the
// chunk is dropped); a Splitter that failed keeps returning its error.
func (s *Splitter) Feed(chunk []byte, yield func(Event) error) error {
	if s.err != nil {
		return s.err
	}
	for len(chunk) > 0 {
		if s.skipLF {
			s.skipLF = false
			if chunk[0] == '\n' {
				chunk = chunk[1:]
				continue
			}
		}
		i := bytes.IndexAny(chunk, "\r\n")
		if i < 0 {
			s.line = append(s.line, chunk...)
			return s.checkSize()
		}
		line := chunk[:i]
		if len(s.line) > 0 {
			s.line = append(s.line, line...)
			if err := s.checkSize(); err != nil {
				return err
			}
			line = s.line
		}
		if chunk[i] == '\r' {
			if i+1 == len(chunk) {
				s.skipLF = true
			} else if chunk[i+1] == '\n' {
				i++
			}
		}
		chunk = chunk[i+1:]
		err := s.processLine(line, yield)
		s.line = s.line[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Splitter) checkSize() error {
	if len(s.line)+len(s.data)+len(s.name) > s.max {
		s.err = ErrEventTooLarge
		s.line, s.data, s.name = nil, nil, nil
	}
	return s.err
}

func (s *Splitter) processLine(line []byte, yield func(Event) error) error {
	if len(line) == 0 {
		if !s.hasData {
			s.reset()
			return nil
		}
		ev := Event{Data: s.data}
		if s.hasName {
			ev.Name = s.name
		}
		err := yield(ev)
		s.reset()
		return err
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		field, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case "event":
		s.name = append(s.name[:0], value...)
		s.hasName = true
	default:
		return nil
	}
	return s.checkSize()
}

func (s *Splitter) reset() {
	s.data, s.name = s.data[:0], s.name[:0]
	s.hasData, s.hasName = false, false
}

// Buffered is how many bytes the Splitter holds for the event in progress.
func (s *Splitter) Buffered() int { return len(s.line) + len(s.data) + len(s.name) }

// End reports, at the end of the stream, whether an event was left
// unfinished (ErrTruncated); the spec drops such an event, and so does End.
// It returns the Splitter's error if it had failed.
func (s *Splitter) End() error {
	if s.err != nil {
		return s.err
	}
	if len(s.line) > 0 || s.hasData || s.hasName {
		s.line = s.line[:0]
		s.reset()
		return ErrTruncated
	}
	return nil
}
