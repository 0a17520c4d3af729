package sse

import (
	"testing"
)

// BenchmarkChatStream splits and converts one recorded decoder stream
// (5 events) for a chat client, reusing the output buffer.
func BenchmarkChatStream(b *testing.B) {
	stream := read(&testing.T{}, "decode_stream.sse")
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	var out []byte
	for i := 0; i < b.N; i++ {
		s, sp := NewStream(true, "chatcmpl-req-1"), NewSplitter(1<<16)
		out = out[:0]
		err := sp.Feed(stream, func(e Event) error {
			var err error
			out, err = s.AppendEvent(out, e.Data)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
