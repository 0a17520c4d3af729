package kvbridge

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkReceive is the whole receive path over loopback TCP: ZMTP
// framing, decoding, the store. One op is one notification; each id gets
// four, as from a TP=4 prefiller.
func BenchmarkReceive(b *testing.B) {
	svc := start(b, Config{}).svc
	s := dial(b, svc.ZMQEndpoint())
	frames := make([][]byte, 1<<14)
	for i := range frames {
		frames[i] = EncodeNotification(TagProxyNotif, fmt.Sprintf("%036d", i/4))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Queue(frames[i%len(frames)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for svc.Stats().Received < uint64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d", svc.Stats().Received, b.N)
		}
		time.Sleep(50 * time.Microsecond)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "notifications/s")
}

// BenchmarkWake is one long-poll round trip: a GET waits, a notification is
// sent, the GET returns. The time is measured from the send.
func BenchmarkWake(b *testing.B) {
	svc := start(b, Config{}).svc
	s := dial(b, svc.ZMQEndpoint())
	client := &http.Client{}
	url := "http://" + svc.Addr() + "/v1/kv/"
	var waited time.Duration
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint("wake-", i)
		answered := make(chan time.Time, 1)
		go func() {
			resp, err := client.Get(url + id + "?wait_ms=10000")
			if err != nil {
				b.Error(err)
			} else {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			answered <- time.Now()
		}()
		for svc.Stats().Waiters == 0 {
			time.Sleep(20 * time.Microsecond)
		}
		begin := time.Now()
		if err := s.Send(EncodeNotification(TagProxyNotif, id)); err != nil {
			b.Fatal(err)
		}
		waited += (<-answered).Sub(begin)
	}
	b.ReportMetric(float64(waited.Microseconds())/float64(b.N), "us/wake")
}
