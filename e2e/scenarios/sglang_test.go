package scenarios

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/mocks"
	"github.com/pdroute/pdroute/e2e/stack"
	"github.com/pdroute/pdroute/filter/config"
)

// Issue 7: sglang mode (bootstrap rooms). The same body, with
// bootstrap_host/port/room, goes to the prefiller and the decoder at once;
// the decoder fetches the KV from the prefiller's bootstrap server.

// sglangDecoderTimeout is the mock decoders' bootstrap wait (the engine's
// is 300 s): a failed prefill must be answered long before it.
const sglangDecoderTimeout = 10 * time.Second

func TestSGLang(t *testing.T) { bothWays(t, testSGLang) }

func testSGLang(t *testing.T) {
	t.Parallel()
	topo := modeTopology(config.ModeSGLang, nil)
	for i := range topo.Decode {
		topo.Decode[i].Mock = func(c *mocks.Config) { c.BootstrapTimeout = sglangDecoderTimeout }
	}
	s := start(t, topo)

	t.Run("long_both_legs_same_room", func(t *testing.T) {
		reset(t, s)
		r := post(t, s, "/v1/completions", completion(longPrompt, nil), nil)
		r.expect(t, 200, "disagg")
		prefiller, pre := recordedBy(t, s.Prefill, "prefill")
		_, dec := recordedBy(t, s.Decode, "decode")
		pb, _ := pre.JSON()
		db, _ := dec.JSON()
		room, ok := pb["bootstrap_room"].(float64)
		if !ok || jsonString(pb["bootstrap_room"]) != jsonString(db["bootstrap_room"]) {
			t.Errorf("bootstrap_room: prefill %v, decode %v; want one room on both legs", pb["bootstrap_room"], db["bootstrap_room"])
		}
		if room < 0 {
			t.Errorf("bootstrap_room %v is negative", room)
		}
		for _, b := range []map[string]any{pb, db} {
			if b["bootstrap_host"] != "127.0.0.1" || num(b["bootstrap_port"]) != fmt.Sprint(prefiller.Addresses.BootstrapPort()) {
				t.Errorf("bootstrap_host %v port %v, want 127.0.0.1 and %s's %d", b["bootstrap_host"], b["bootstrap_port"], prefiller.Name, prefiller.Addresses.BootstrapPort())
			}
		}
		if dec.KV != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", dec.KV, dec.KVReason)
		}
	})

	t.Run("short_direct", func(t *testing.T) {
		reset(t, s)
		r := post(t, s, "/v1/completions", completion(shortPrompt, nil), nil)
		// A decode-mode SGLang engine cannot serve a request without a
		// prefiller's room and refuses it (docs/CONFIGURATION.md,
		// threshold_tokens); what the filter owes is to send it direct,
		// without bootstrap fields, to relay the engine's answer unchanged,
		// and to have warned at start.
		r.expect(t, 400, "direct")
		_, dec := recordedBy(t, s.Decode, "decode")
		db, _ := dec.JSON()
		for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"} {
			if _, ok := db[k]; ok {
				t.Errorf("direct request carries %s", k)
			}
		}
		if n := len(recorded(t, s.Prefill, "")); n != 0 {
			t.Errorf("prefill engines got %d requests for a short prompt", n)
		}
		if get(r.JSON(t), "object") != "error" {
			t.Errorf("not the engine's own error: %s", r.Body)
		}
		if !strings.Contains(s.Logs(), "threshold_tokens: 256 in sglang mode") {
			t.Errorf("no start-up warning about direct requests in sglang mode; proxy log:\n%s", s.Logs())
		}
	})

	t.Run("batched_lists", func(t *testing.T) {
		reset(t, s)
		body, _ := json.Marshal(map[string]any{"text": []string{longPrompt, longPrompt[:2000], longPrompt[:1800]},
			"sampling_params": map[string]any{"max_new_tokens": 4}})
		r := post(t, s, "/generate", body, nil)
		r.expect(t, 200, "disagg")
		_, pre := recordedBy(t, s.Prefill, "prefill")
		_, dec := recordedBy(t, s.Decode, "decode")
		pb, _ := pre.JSON()
		db, _ := dec.JSON()
		for _, k := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"} {
			pl, _ := pb[k].([]any)
			if len(pl) != 3 || jsonString(pb[k]) != jsonString(db[k]) {
				t.Errorf("%s: prefill %v, decode %v; want the same list of 3", k, pb[k], db[k])
			}
		}
		rooms, _ := pb["bootstrap_room"].([]any)
		if len(rooms) == 3 && (rooms[0] == rooms[1] || rooms[1] == rooms[2] || rooms[0] == rooms[2]) {
			t.Errorf("batch items share a room: %v", rooms)
		}
		if dec.KV != mocks.KVTransferred {
			t.Errorf("decoder says %q (%s), want transferred", dec.KV, dec.KVReason)
		}
		var answers []any
		if err := json.Unmarshal(r.Body, &answers); err != nil || len(answers) != 3 {
			t.Errorf("want 3 answers: %v %s", err, r.Body)
		}
	})

	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefill_500_fails_fast/stream=%v", stream), func(t *testing.T) {
			reset(t, s)
			faults(t, s.Prefill, mocks.Fault{Type: mocks.FaultStatus, Status: 500})
			r := post(t, s, "/v1/completions", completion(longPrompt, map[string]any{"stream": stream}), nil)
			// Both legs are in flight and either may report first: the filter's
			// 502 when the prefill's 500 arrives first, else the decoder's own
			// error (SGLang's decoder fails the room when its prefill fails,
			// here within milliseconds), passed through: its 500, or when
			// streaming its 200 stream with the error event. Seen under load.
			decoderStatus := 500
			if stream {
				decoderStatus = 200
			}
			decoderFirst := r.Status == decoderStatus && strings.Contains(string(r.Body), "KVTransferError")
			if !decoderFirst && (r.Status != 502 || r.errorCode(t) != "PREFILL_FAILED") {
				t.Fatalf("got %d %s, want 502 PREFILL_FAILED or the decoder's error (%d)", r.Status, r.Body, decoderStatus)
			}
			if r.Total > sglangDecoderTimeout/4 {
				t.Errorf("answered after %s: the client waited for the decoder's room timeout (%s)", r.Total, sglangDecoderTimeout)
			}
			// The decode leg left with the prefill leg. The 502 resets it, which
			// may happen before or after it reached a decoder: count the decode
			// requests of this request's bootstrap room (a leg still on its way
			// from an earlier subtest has another), after giving an in-flight
			// one a moment to land. Never more than one.
			_, pre := recordedBy(t, s.Prefill, "prefill")
			pb, _ := pre.JSON()
			room := jsonString(pb["bootstrap_room"])
			ofRoom := func() int {
				n := 0
				for _, d := range recorded(t, s.Decode, "decode") {
					if db, _ := d.JSON(); jsonString(db["bootstrap_room"]) == room {
						n++
					}
				}
				return n
			}
			for deadline := time.Now().Add(time.Second); ofRoom() == 0 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if n := ofRoom(); n > 1 {
				t.Errorf("%d decode requests of room %s, want at most 1 (sent with the prefill)", n, room)
			}
		})
	}

	t.Run("rooms_unique_over_http", func(t *testing.T) {
		reset(t, s)
		const total, workers = 120, 6
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range total / workers {
					r, err := send(testCtx(t, 30*time.Second), http.MethodPost, s.URL+"/v1/completions", completion(longPrompt, map[string]any{"max_tokens": 1}), nil)
					if err != nil || r.Status != 200 {
						t.Errorf("worker %d: %s", w, describe(r, err))
						return
					}
				}
			}()
		}
		wg.Wait()
		byRoom := map[string]int{}
		for _, pool := range [][]*stack.Engine{s.Prefill, s.Decode} {
			for _, rec := range recorded(t, pool, "") {
				m, _ := rec.JSON()
				byRoom[jsonString(m["bootstrap_room"])]++
			}
		}
		if len(byRoom) != total {
			t.Errorf("%d distinct rooms over %d requests", len(byRoom), total)
		}
		for room, n := range byRoom {
			if n != 2 {
				t.Errorf("room %s seen %d times, want once per leg", room, n)
			}
		}
	})
}

// TestSGLangRooms100k drives 100 000 sglang requests through four VMs of
// the compiled filter (envoyemu's VM-level Driver: the same host functions
// and WASI randomness, no network), two goroutines taking turns over two
// VMs each, and checks that no two share a bootstrap room. A room is the
// only thing pairing a decoder with its prefiller, so a repeat would hand
// one request another's KV. -short runs 10 000. It is not parallel: it
// would starve the HTTP scenarios of the two cores.
func TestSGLangRooms100k(t *testing.T) { bothWays(t, testSGLangRooms100k) }

func testSGLangRooms100k(t *testing.T) {
	vmLevel(t)
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	const vms, goroutines = 4, 2
	code := pluginCode(t)
	plugin := []byte(`{"mode":"sglang","prefill":{"endpoints":[{"name":"p","address":"10.0.0.1:30000","bootstrap_port":8998}]},` +
		`"decode":{"endpoints":[{"name":"d","address":"10.0.0.2:30000"}]}}`)
	body := completion(shortPrompt, nil)
	rooms := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rooms[g] = driveRooms(t, code, plugin, body, vms/goroutines, total/goroutines)
		}()
	}
	wg.Wait()
	seen := make(map[uint64]bool, total)
	for g, list := range rooms {
		if len(list) != total/goroutines {
			t.Fatalf("goroutine %d drew %d rooms, want %d", g, len(list), total/goroutines)
		}
		for _, r := range list {
			if r >= 1<<63 {
				t.Errorf("room %d is beyond 2^63-1", r)
			}
			if seen[r] {
				t.Fatalf("room %d drawn twice", r)
			}
			seen[r] = true
		}
	}
}

// driveRooms runs n requests over vms VMs in turn and returns the decode
// leg's bootstrap_room of each.
func driveRooms(t *testing.T, code, plugin, body []byte, vms, n int) []uint64 {
	ds := make([]*envoyemu.Driver, vms)
	for i := range ds {
		if ds[i] = newDriver(t, code, plugin, stack.EmulatedEnvoy); ds[i] == nil {
			return nil
		}
	}
	out := make([]uint64, 0, n)
	for i := range n {
		d := ds[i%vms]
		id := d.InitializeHttpContext()
		d.CallOnRequestHeaders(id, postHeaders, false)
		if a := d.CallOnRequestBody(id, body, true); a != types.ActionContinue {
			t.Errorf("request %d body: %v, local reply %+v, VM failure %.300q", i, a, d.SentLocalResponse(id), d.Failed())
			return out
		}
		var decode struct {
			Room uint64 `json:"bootstrap_room"`
		}
		if err := json.Unmarshal(d.RequestBody(id), &decode); err != nil {
			t.Errorf("decode body: %v", err)
			return out
		}
		out = append(out, decode.Room)
		d.CompleteHttpContext(id)
	}
	return out
}
