package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/hostcalls/kvbridge"
)

// Each measurement runs end to end against an in-process kvbridge and
// prints its figure line.
func TestMeasurements(t *testing.T) {
	svc, err := kvbridge.New(kvbridge.Config{ZMQBind: "tcp://127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var out strings.Builder
	l := &load{zmq: svc.ZMQEndpoint(), http: "http://" + svc.Addr(), run: "test", out: &out}
	if err := l.throughput(400, 4); err != nil {
		t.Fatal(err)
	}
	if err := l.latency(5); err != nil {
		t.Fatal(err)
	}
	if err := l.rss(100); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^throughput: 400 notifications \(100 ids x 4 peers\) in \S+ = \d+ notifications/s`,
		`(?m)^wake latency \(ZMQ send -> long-poll answered\), 5 samples: p50 \S+ p90 \S+ p99 \S+ max \S+ \(5 of them woken while waiting\)`,
		`(?m)^rss: 205 pending ids: RSS [\d.]+ MiB \(was [\d.]+ MiB with 105 ids;`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output lacks %s:\n%s", re, out.String())
		}
	}
	if st := svc.Stats(); st.Received != 400+5+100 || st.Entries != 205 {
		t.Errorf("server stats %+v", st)
	}
	if got := len(l.id('t', 1)); got != 36 {
		t.Errorf("ids are %d bytes, want 36", got)
	}
}
