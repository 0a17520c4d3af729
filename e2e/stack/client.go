package stack

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"
)

// Event is one server-sent "data:" event and when it arrived, measured
// from the moment the request was sent.
type Event struct {
	Data string
	At   time.Duration
}

// Response is a finished HTTP exchange, timed.
type Response struct {
	Status int
	Header http.Header
	// Body is the whole body, events included for a stream.
	Body []byte
	// Events are the data events of a text/event-stream answer.
	Events []Event
	// FirstByte is when the first body byte arrived (the headers, for an
	// empty body); Total when the body ended.
	FirstByte, Total time.Duration
}

// maxEvent bounds one SSE line Send reads.
const maxEvent = 4 << 20

// Send makes one request (a JSON body when body is not nil) with client
// (http.DefaultClient when nil) and reads the whole answer, timing the first
// byte and each SSE event. ctx bounds everything.
func Send(ctx context.Context, client *http.Client, method, url string, body []byte, header map[string]string) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if client == nil {
		client = http.DefaultClient
	}
	begin := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := &Response{Status: resp.StatusCode, Header: resp.Header}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	if _, err := br.Peek(1); err != nil && err != io.EOF {
		return nil, err
	}
	r.FirstByte = time.Since(begin)
	if strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		var all bytes.Buffer
		sc := bufio.NewScanner(io.TeeReader(br, &all))
		sc.Buffer(make([]byte, 64<<10), maxEvent)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				r.Events = append(r.Events, Event{Data: d, At: time.Since(begin)})
			}
		}
		r.Body, err = all.Bytes(), sc.Err()
	} else {
		r.Body, err = io.ReadAll(br)
	}
	r.Total = time.Since(begin)
	return r, err
}
