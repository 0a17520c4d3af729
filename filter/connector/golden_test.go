package connector

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/filter/config"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// Endpoints the golden cases run against.
var (
	prefillEP = config.Endpoint{Name: "p1", Address: "10.0.0.1:8000", Host: "10.0.0.1", BootstrapPort: 8998}
	prefillV6 = config.Endpoint{Name: "p6", Address: "[fd00::1]:8000", Host: "fd00::1"}
	decodeEP  = config.Endpoint{Name: "d1", Address: "10.0.0.2:8000", Host: "10.0.0.2",
		KVReceiver: &config.KVReceiver{Host: "10.0.0.2", InitPorts: []int{7300, 7301}, AllocPorts: []int{7400, 7401}}}
)

// apiOf reads the API from a case name's first word.
func apiOf(t *testing.T, name string) config.API {
	switch strings.SplitN(name, "_", 2)[0] {
	case "chat":
		return config.APIChat
	case "completions":
		return config.APICompletions
	case "responses":
		return config.APIResponses
	case "generate":
		return config.APIGenerate
	}
	t.Fatalf("case %s: name must start with chat_, completions_, responses_ or generate_", name)
	return 0
}

// counter returns a room source giving 1, 2, 3, … with the top bit set, so
// the golden files show the mask to [0, 2^63−1] at work.
func counter() func() uint64 {
	n := uint64(0)
	return func() uint64 { n++; return 1<<63 | n }
}

// legs builds every body a mode sends for one client body, by output suffix.
func legs(t *testing.T, mode config.Mode, name string, in []byte) map[string][]byte {
	dir := filepath.Join("testdata", string(mode))
	read := func(file string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	r, err := NewRequest(apiOf(t, name), in)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	out := map[string][]byte{}
	switch mode {
	case config.ModeNIXL, config.ModeOrchestrated:
		out["prefill"] = NIXLPrefill(r)
		if w := r.Body.Build(nixlPrefillEdits(r)...); string(out["prefill"]) != string(w) {
			t.Errorf("prefill body %s, the general editor's %s", out["prefill"], w)
		}
		answer := read("answer.json")
		a, err := ParsePrefillAnswer(answer)
		if err != nil || !a.Usable(mode) {
			t.Fatalf("answer.json: %v %+v", err, a)
		}
		var edit BodyEdit
		if mode == config.ModeNIXL {
			edit = NIXLDecode(r, a.KVParams)
			kept := append(make([]byte, 0, 4096), "an earlier edit's bytes"...)
			if to := NIXLDecodeTo(kept, r, a.KVParams); string(to.Prefix) != string(edit.Prefix) || to.Drain != edit.Drain {
				t.Errorf("NIXLDecodeTo into a used buffer: %q drain %d, NIXLDecode: %q drain %d", to.Prefix, to.Drain, edit.Prefix, edit.Drain)
			}
		} else {
			ep, attach := &prefillEP, []byte(nil)
			if strings.Contains(name, "ipv6") {
				ep = &prefillV6
			}
			if strings.Contains(name, "attach") {
				attach = answer
			}
			if edit, err = OrchestratedDecode(r, a.KVParams, ep, attach); err != nil {
				t.Fatal(err)
			}
		}
		out["decode"] = edit.Apply(in)
	case config.ModeLMCache:
		if err := LMCacheCheck(r); err != nil {
			t.Fatalf("LMCacheCheck: %v", err)
		}
		tokBody, tokens := LMCacheTokenize(r)
		if tokBody != nil {
			out["tokenize"] = tokBody
			if tokens, err = ParseTokenizeAnswer(read("tokenize.json")); err != nil {
				t.Fatal(err)
			}
		}
		out["prefill"] = LMCachePrefill(r, tokens, "0b5e7c4e-1f6a-4d2b-9c3e-8a7f6e5d4c3b", &decodeEP)
		a, err := ParsePrefillAnswer(read("answer.json"))
		if err != nil || !a.Usable(mode) {
			t.Fatalf("answer.json: %v %+v", err, a)
		}
		out["decode"] = LMCacheDecode(r, tokens, a.First.Token).Apply(in)
	case config.ModeSGLang:
		ep := &prefillEP
		if strings.Contains(name, "ipv6") {
			ep = &prefillV6
		}
		edit, err := SGLang(r, ep, counter())
		if err != nil {
			t.Fatal(err)
		}
		out["prefill"] = edit.Apply(in)
		out["decode"] = edit.Apply(in)
	}
	return out
}

func TestGolden(t *testing.T) {
	for _, mode := range []config.Mode{config.ModeNIXL, config.ModeOrchestrated, config.ModeLMCache, config.ModeSGLang} {
		inputs, _ := filepath.Glob(filepath.Join("testdata", string(mode), "*.in.json"))
		if len(inputs) == 0 {
			t.Fatalf("no cases for %s", mode)
		}
		for _, in := range inputs {
			name := strings.TrimSuffix(filepath.Base(in), ".in.json")
			t.Run(string(mode)+"/"+name, func(t *testing.T) {
				body, err := os.ReadFile(in)
				if err != nil {
					t.Fatal(err)
				}
				outs := legs(t, mode, name, body)
				var suffixes []string
				for s := range outs {
					suffixes = append(suffixes, s)
				}
				sort.Strings(suffixes)
				for _, s := range suffixes {
					assertWellFormed(t, s, body, outs[s])
					golden(t, strings.TrimSuffix(in, ".in.json")+"."+s+".json", outs[s])
				}
			})
		}
	}
}

// assertWellFormed checks what every engine-bound body must be: one JSON
// object, no duplicate key the client did not send itself (those pass
// through, as they would without the proxy), and no client control field
// smuggled through.
func assertWellFormed(t *testing.T, leg string, in, b []byte) {
	t.Helper()
	o, err := ParseObject(b)
	if err != nil {
		t.Fatalf("%s body: %v\n%s", leg, err, b)
	}
	client, _ := ParseObject(in)
	count := func(o Object) map[string]int {
		n := map[string]int{}
		for _, m := range o.members {
			n[m.key]++
		}
		return n
	}
	had := count(client)
	for key, n := range count(o) {
		if n > 1 && n > had[key] {
			t.Errorf("%s body has key %q %d times: %s", leg, key, n, b)
		}
	}
	if bytes.Contains(b, []byte("6.6.6.6")) || bytes.Contains(b, []byte("7.7.7.7")) {
		t.Errorf("%s body carries a client-supplied control field: %s", leg, b)
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs\n got: %s\nwant: %s", path, got, want)
	}
}
