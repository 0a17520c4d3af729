// Command kvbridge-load measures a running kvbridge and prints the figures
// BENCHMARKS.md (kvbridge) records:
//
//   - throughput: notifications/s the server absorbs, sent as fast as
//     possible by -tp PUSH peers (one per TP rank, each sending one
//     notification per id), timed until the server's received counter
//     reaches the total;
//   - latency: wake latency, from the ZMQ send of the notification a
//     long-poll waits for to that long-poll's answer, one sample at a time,
//     each sent once the server reports the long-poll waiting;
//   - rss: the server's resident memory and Go heap before and after
//     -rss-ids pending ids (run it against a fresh server).
//
// Run the server and this tool on different cores, e.g.
//
//	GOMAXPROCS=1 taskset -c 0 kvbridge --max-entries=2000000 &
//	taskset -c 1 kvbridge-load
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pdroute/pdroute/hostcalls/kvbridge"
	"github.com/pdroute/pdroute/hostcalls/zmqpush"
)

func main() {
	zmqEndpoint := flag.String("zmq", "tcp://127.0.0.1:7500", "kvbridge's ZMQ endpoint")
	httpURL := flag.String("http", "http://127.0.0.1:7501", "kvbridge's HTTP base URL")
	runs := flag.String("run", "throughput,latency,rss", "measurements to run, comma-separated")
	n := flag.Int("n", 1_000_000, "throughput: notifications to send in all")
	tp := flag.Int("tp", 4, "throughput: PUSH peers; each sends one notification per id")
	samples := flag.Int("samples", 2000, "latency: samples")
	rssIDs := flag.Int("rss-ids", 1_000_000, "rss: pending ids to create")
	flag.Parse()

	l := &load{zmq: *zmqEndpoint, http: strings.TrimSuffix(*httpURL, "/"), run: strconv.FormatInt(time.Now().UnixNano()%1e8, 16), out: os.Stdout}
	for _, r := range strings.Split(*runs, ",") {
		var err error
		switch r {
		case "throughput":
			err = l.throughput(*n, *tp)
		case "latency":
			err = l.latency(*samples)
		case "rss":
			err = l.rss(*rssIDs)
		default:
			err = fmt.Errorf("unknown measurement %q", r)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kvbridge-load: %s: %v\n", r, err)
			os.Exit(1)
		}
	}
}

type load struct {
	zmq, http string
	run       string // makes this run's ids unique on a long-lived server
	out       io.Writer
}

// id is a 36-byte id, the length of the UUIDs pdroute uses.
func (l *load) id(kind byte, i int) string {
	return fmt.Sprintf("%c%07s-0000-4000-8000-%012x", kind, l.run, i)
}

func (l *load) dial() (*zmqpush.Sender, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return zmqpush.Dial(ctx, l.zmq)
}

func (l *load) throughput(n, tp int) error {
	perPeer := n / tp
	frames := make([][]byte, perPeer)
	for i := range frames {
		frames[i] = kvbridge.EncodeNotification(kvbridge.TagProxyNotif, l.id('t', i))
	}
	senders := make([]*zmqpush.Sender, tp)
	for i := range senders {
		s, err := l.dial()
		if err != nil {
			return err
		}
		defer s.Close()
		senders[i] = s
	}
	before, err := l.metric("kvbridge_notifications_received_total")
	if err != nil {
		return err
	}
	total := float64(perPeer * tp)
	begin := time.Now()
	errs := make(chan error, tp)
	for _, s := range senders {
		go func() {
			for _, f := range frames {
				if err := s.Queue(f); err != nil {
					errs <- err
					return
				}
			}
			errs <- s.Flush()
		}()
	}
	for range senders {
		if err := <-errs; err != nil {
			return err
		}
	}
	sent := time.Since(begin)
	if err := l.until("kvbridge_notifications_received_total", before+total); err != nil {
		return err
	}
	took := time.Since(begin)
	fmt.Fprintf(l.out, "throughput: %.0f notifications (%d ids x %d peers) in %v = %.0f notifications/s (sender done after %v)\n",
		total, perPeer, tp, took.Round(time.Millisecond), total/took.Seconds(), sent.Round(time.Millisecond))
	return nil
}

func (l *load) latency(samples int) error {
	s, err := l.dial()
	if err != nil {
		return err
	}
	defer s.Close()
	client := &http.Client{Timeout: 30 * time.Second}
	wokenBefore, err := l.metric("kvbridge_wake_latency_seconds_count")
	if err != nil {
		return err
	}
	lat := make([]time.Duration, 0, samples)
	for i := 0; i < samples; i++ {
		id := l.id('l', i)
		answered := make(chan error, 1)
		var end time.Time
		go func() {
			resp, err := client.Get(l.http + "/v1/kv/" + id + "?wait_ms=10000")
			end = time.Now()
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("long-poll answered %s", resp.Status)
				}
			}
			answered <- err
		}()
		if err := l.until("kvbridge_waiters", 1); err != nil {
			return err
		}
		begin := time.Now()
		if err := s.Send(kvbridge.EncodeNotification(kvbridge.TagProxyNotif, id)); err != nil {
			return err
		}
		if err := <-answered; err != nil {
			return err
		}
		lat = append(lat, end.Sub(begin))
	}
	woken, err := l.metric("kvbridge_wake_latency_seconds_count")
	if err != nil {
		return err
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(time.Microsecond) }
	fmt.Fprintf(l.out, "wake latency (ZMQ send -> long-poll answered), %d samples: p50 %v p90 %v p99 %v max %v (%.0f of them woken while waiting)\n",
		samples, q(0.50), q(0.90), q(0.99), lat[len(lat)-1].Round(time.Microsecond), woken-wokenBefore)
	return nil
}

func (l *load) rss(ids int) error {
	type mem struct{ rss, heap, entries float64 }
	read := func() (m mem, err error) {
		if m.rss, err = l.metric("process_resident_memory_bytes"); err != nil {
			return m, err
		}
		if m.heap, err = l.metric("go_memstats_heap_inuse_bytes"); err != nil {
			return m, err
		}
		m.entries, err = l.metric("kvbridge_entries")
		return m, err
	}
	before, err := read()
	if err != nil {
		return err
	}
	s, err := l.dial()
	if err != nil {
		return err
	}
	defer s.Close()
	for i := 0; i < ids; i++ {
		if err := s.Queue(kvbridge.EncodeNotification(kvbridge.TagProxyNotif, l.id('r', i))); err != nil {
			return err
		}
	}
	if err := s.Flush(); err != nil {
		return err
	}
	if err := l.until("kvbridge_entries", before.entries+float64(ids)); err != nil {
		return fmt.Errorf("%w (is --max-entries large enough?)", err)
	}
	after, err := read()
	if err != nil {
		return err
	}
	const mib = 1 << 20
	fmt.Fprintf(l.out, "rss: %.0f pending ids: RSS %.1f MiB (was %.1f MiB with %.0f ids; %.0f bytes/id), Go heap in use %.1f MiB (was %.1f MiB)\n",
		after.entries, after.rss/mib, before.rss/mib, before.entries, (after.rss-before.rss)/float64(ids), after.heap/mib, before.heap/mib)
	return nil
}

// until polls a metric until it reaches at least want, for up to 2 minutes.
func (l *load) until(name string, want float64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := l.metric(name)
		if err != nil || got >= want {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %.0f, want %.0f", name, got, want)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// metric reads one unlabelled sample from the server's /metrics.
func (l *load) metric(name string) (float64, error) {
	resp, err := http.Get(l.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}
