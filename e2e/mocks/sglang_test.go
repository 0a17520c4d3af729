package mocks

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"
)

type sglangPair struct {
	p, d     *Server
	bootPort int
}

func newSGLangPair(t *testing.T, timeout time.Duration) sglangPair {
	p := start(t, Config{Kind: SGLang, Role: Prefill})
	bp := p.Addresses().BootstrapPort()
	// The decoder's default bootstrap port is the prefiller's, so null ports work.
	d := start(t, Config{Kind: SGLang, Role: Decode, DefaultBootstrapPort: bp, BootstrapTimeout: timeout})
	return sglangPair{p: p, d: d, bootPort: bp}
}

// both sends body to P and D concurrently, as SGLang's routers do, and returns D's
// answer.
func (sp sglangPair) both(t *testing.T, path string, body map[string]any) response {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		post(t, sp.p.URL()+path, body)
	}()
	r := post(t, sp.d.URL()+path, body)
	wg.Wait()
	return r
}

func withBootstrap(body map[string]any, port any, room any) map[string]any {
	b := maps.Clone(body)
	b["bootstrap_host"], b["bootstrap_port"], b["bootstrap_room"] = "127.0.0.1", port, room
	return b
}

func TestSGLangRoomFound(t *testing.T) {
	sp := newSGLangPair(t, 5*time.Second)
	chat := []map[string]any{{"role": "user", "content": "sglang"}}
	for i, tc := range []struct {
		name, path string
		body       map[string]any
		port       any
	}{
		{"generate explicit port", "/generate", map[string]any{"text": "hello sglang", "sampling_params": map[string]any{"max_new_tokens": 4, "ignore_eos": true}}, sp.bootPort},
		{"generate null port", "/generate", map[string]any{"text": "hello sglang", "sampling_params": map[string]any{"max_new_tokens": 4, "ignore_eos": true}}, nil},
		{"chat stream", "/v1/chat/completions", map[string]any{"messages": chat, "max_tokens": 4, "ignore_eos": true, "stream": true}, sp.bootPort},
		{"completions", "/v1/completions", map[string]any{"prompt": "hello sglang", "max_tokens": 4, "ignore_eos": true}, nil},
	} {
		room := uint64(1<<63-1) - uint64(i)
		r := sp.both(t, tc.path, withBootstrap(tc.body, tc.port, room))
		if r.status != 200 {
			t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
		}
		if tc.body["stream"] == true {
			if got := streamText(t, r.events()); len(Tokenize(got)) != 4 {
				t.Errorf("%s: streamed %q", tc.name, got)
			}
		} else if r.header.Get("X-Mock-Kv") != KVTransferred {
			t.Errorf("%s: x-mock-kv %q", tc.name, r.header.Get("X-Mock-Kv"))
		}
		recs, _ := sp.d.Control().Requests(testCtx(t), RequestFilter{Path: tc.path})
		if last := recs[len(recs)-1]; last.KV != KVTransferred {
			t.Errorf("%s: record %+v", tc.name, last)
		}
	}
	// Every room was claimed: nothing left held on the prefiller.
	if st := stats(t, sp.p); st.RoomsHeld != 0 || st.Requests["prefill"] != 4 || st.Requests["room_claim"] < 4 {
		t.Errorf("prefiller stats %+v", st)
	}
	if st := stats(t, sp.d); st.Transferred != 4 {
		t.Errorf("decoder stats %+v", st)
	}
}

func TestSGLangGenerateShapes(t *testing.T) {
	sp := newSGLangPair(t, 5*time.Second)
	// Prefill answers SGLang's /generate shape with the single first token.
	r := post(t, sp.p.URL()+"/generate", withBootstrap(map[string]any{"text": "shape", "rid": "r1", "sampling_params": map[string]any{"max_new_tokens": 8}}, nil, 1))
	var one struct {
		Text      string `json:"text"`
		OutputIDs []int  `json:"output_ids"`
		MetaInfo  struct {
			ID           string         `json:"id"`
			FinishReason map[string]any `json:"finish_reason"`
			PromptTokens int            `json:"prompt_tokens"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(r.body, &one); err != nil || len(one.OutputIDs) != 1 || one.MetaInfo.PromptTokens != 2 || one.MetaInfo.FinishReason["type"] != "length" {
		t.Errorf("prefill answer %s (%v)", r.body, err)
	}
	if st := stats(t, sp.p); st.RoomsHeld != 1 {
		t.Errorf("an unclaimed room is held: %+v", st)
	}

	// Batched: lists of texts and rooms; the decoder answers a list, item by item.
	body := map[string]any{"text": []string{"first item", "second item"}, "sampling_params": map[string]any{"max_new_tokens": 3, "ignore_eos": true},
		"bootstrap_host": []string{"127.0.0.1", "127.0.0.1"}, "bootstrap_port": []any{sp.bootPort, nil}, "bootstrap_room": []uint64{11, 12}}
	r = sp.both(t, "/generate", body)
	var items []struct {
		Text     string `json:"text"`
		MetaInfo struct {
			ID               string `json:"id"`
			CompletionTokens int    `json:"completion_tokens"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(r.body, &items); err != nil || len(items) != 2 || r.header.Get("X-Mock-Kv") != KVTransferred {
		t.Fatalf("batched answer %d %s", r.status, r.body)
	}
	for i, it := range items {
		want := generate(Tokenize([]string{"first item", "second item"}[i]), limits{max: 3, ignoreEOS: true}).text()
		if it.Text != want || it.MetaInfo.CompletionTokens != 3 || !strings.HasSuffix(it.MetaInfo.ID, fmt.Sprint("-", i)) {
			t.Errorf("item %d: %+v, want text %q", i, it, want)
		}
	}
	// Streaming /generate sends cumulative text, SGLang style.
	body = withBootstrap(map[string]any{"text": "cumulative", "stream": true, "sampling_params": map[string]any{"max_new_tokens": 3, "ignore_eos": true}}, nil, 21)
	events := sp.both(t, "/generate", body).events()
	if len(events) != 4 || events[3] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var prev string
	for _, ev := range events[:3] {
		var m struct {
			Text string `json:"text"`
		}
		json.Unmarshal([]byte(ev), &m)
		if !strings.HasPrefix(m.Text, prev) || len(m.Text) <= len(prev) {
			t.Errorf("text %q does not extend %q", m.Text, prev)
		}
		prev = m.Text
	}

	// Missing bootstrap fields: 400 in SGLang's shapes.
	for path, want := range map[string]string{
		"/generate":            `{"error":{"message":"bootstrap_host and bootstrap_room are required by an engine in disaggregation mode decode"}}`,
		"/v1/completions":      `{"object":"error","message":"bootstrap_host and bootstrap_room are required by an engine in disaggregation mode decode","type":"BadRequestError","param":null,"code":400}`,
		"/v1/chat/completions": `"code":400`,
	} {
		r := post(t, sp.d.URL()+path, map[string]any{"text": "x", "prompt": "x", "messages": []map[string]any{{"role": "user", "content": "x"}}, "bootstrap_host": "127.0.0.1"})
		if r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
}

func TestSGLangRoomFailures(t *testing.T) {
	sp := newSGLangPair(t, 300*time.Millisecond)
	gen := map[string]any{"text": "never prefilled", "rid": "rid-9", "sampling_params": map[string]any{"max_new_tokens": 2}}

	// No prefill at all: the decoder gives up after its timeout, naming the room.
	began := time.Now()
	r := post(t, sp.d.URL()+"/generate", withBootstrap(gen, nil, 777))
	if r.status != 500 || time.Since(began) < 300*time.Millisecond ||
		!strings.Contains(string(r.body), "rid=rid-9 bootstrap_room=777 with exception KVTransferError: bootstrap room not ready") {
		t.Errorf("timeout: %d after %v: %s", r.status, time.Since(began), r.body)
	}
	// A stream has started (200) when the failure comes: an error event, then [DONE].
	chat := map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "stream": true}
	r = post(t, sp.d.URL()+"/v1/chat/completions", withBootstrap(chat, nil, 778))
	events := r.events()
	if r.status != 200 || len(events) != 2 || events[1] != "[DONE]" ||
		!strings.HasPrefix(events[0], `{"error":{"object":"error","message":"Decode transfer failed for request rid= bootstrap_room=778`) {
		t.Errorf("stream timeout: %d %q", r.status, events)
	}

	// A failed prefill marks the room failed: the waiting decoder fails at once.
	long := newSGLangPair(t, 10*time.Second)
	must(t, long.p.Control().SetFaults(testCtx(t), Fault{Type: FaultStatus, Status: 500, Count: 1}))
	began = time.Now()
	r = long.both(t, "/generate", withBootstrap(gen, nil, 779))
	if r.status != 500 || time.Since(began) > 5*time.Second || !strings.Contains(string(r.body), "bootstrap_room=779 with exception KVTransferError: the prefill of this room failed") {
		t.Errorf("failed prefill: %d after %v: %s", r.status, time.Since(began), r.body)
	}
	if st := stats(t, long.p); st.RoomsFailed != 1 || st.RoomsHeld != 0 {
		t.Errorf("prefiller stats %+v", st)
	}

	// missing_params is the silent failure: the prefill answers 200, the room never
	// appears, and the decoder waits out its timeout.
	must(t, sp.p.Control().SetFaults(testCtx(t), Fault{Type: FaultMissingParams, Count: 1}))
	began = time.Now()
	r = sp.both(t, "/generate", withBootstrap(gen, nil, 780))
	if r.status != 500 || time.Since(began) < 300*time.Millisecond {
		t.Errorf("silent prefill failure: %d after %v", r.status, time.Since(began))
	}
	if st := stats(t, sp.d); st.RoomTimeouts != 3 || st.InFlight != 0 {
		t.Errorf("decoder stats %+v", st)
	}
	if st := stats(t, sp.p); st.RoomsHeld != 0 {
		t.Errorf("prefiller holds rooms: %+v", st)
	}
}

// An SGLang engine without a disaggregation mode (role both) ignores bootstrap fields.
func TestSGLangPlainEngine(t *testing.T) {
	s := start(t, Config{Kind: SGLang})
	if s.Addresses().Bootstrap != "" {
		t.Errorf("a plain engine runs no bootstrap server")
	}
	r := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": "plain", "max_tokens": 2, "bootstrap_room": 5})
	m := r.json(t)
	if _, has := m["kv_transfer_params"]; r.status != 200 || has || r.header.Get("X-Mock-Kv") != KVRecomputed {
		t.Errorf("%d %v %s", r.status, r.header, r.body)
	}
}

// A decoder's claim is a long poll: when its answer is lost after the bootstrap server
// took the room (the decoder's client timeout fired on a stalled machine), the
// decoder asks again and must get the room, not wait out BootstrapTimeout for a room
// that can never come while the router has seen the prefill succeed (the soak's
// sglang requests with no answer in 60 s).
func TestSGLangClaimAnswerLost(t *testing.T) {
	sp := newSGLangPair(t, 2*time.Second)
	gen := map[string]any{"text": "lost claim answer", "rid": "rid-lost", "sampling_params": map[string]any{"max_new_tokens": 2, "ignore_eos": true}}
	body := withBootstrap(gen, nil, 4242)
	if r := post(t, sp.p.URL()+"/generate", body); r.status != 200 {
		t.Fatalf("prefill: %d %s", r.status, r.body)
	}
	// The claim whose answer never reached the decoder.
	claim := fmt.Sprintf("http://127.0.0.1:%d/bootstrap/rooms/4242/claim?wait_ms=100", sp.bootPort)
	if r := post(t, claim, struct{}{}); r.status != 200 || !strings.Contains(string(r.body), `"state":"ready"`) {
		t.Fatalf("first claim: %d %s", r.status, r.body)
	}
	began := time.Now()
	r := post(t, sp.d.URL()+"/generate", body)
	if r.status != 200 || r.header.Get("X-Mock-Kv") != KVTransferred {
		t.Errorf("decode after a lost claim answer: %d after %v: %s", r.status, time.Since(began), r.body)
	}
	// The claimed room is no longer held (its KV went to the decoder).
	if st := stats(t, sp.p); st.RoomsHeld != 0 {
		t.Errorf("prefiller stats %+v", st)
	}
}
