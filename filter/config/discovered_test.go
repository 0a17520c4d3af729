package config

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func discoveryConfig(t testing.TB, mode Mode) *Config {
	t.Helper()
	extra := ""
	if mode == ModeLMCache {
		extra = `,"lmcache":{}`
	}
	c, err := Parse([]byte(`{"mode":"` + string(mode) + `","discovery":{}` + extra + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDiscoveryConfig(t *testing.T) {
	c := discoveryConfig(t, ModeNIXL)
	d := c.Discovery
	if d == nil || d.Cluster != "kvbridge" || d.Path != "/v1/pools" || d.Wait.Milliseconds() != 5000 || d.PollInterval.Milliseconds() != 500 {
		t.Fatalf("defaults: %+v", d)
	}
	if len(c.Prefill.Endpoints) != 0 {
		t.Fatal("endpoints without configuration")
	}
	for _, bad := range []string{
		`{"mode":"nixl","discovery":{"poll_interval_ms":2000}}`,
		`{"mode":"nixl","discovery":{"wait_ms":-1}}`,
		`{"mode":"nixl","discovery":{"colour":1}}`,
		`{"mode":"nixl"}`,
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestParseDiscovered(t *testing.T) {
	c := discoveryConfig(t, ModeNIXL)
	for _, tc := range []struct {
		name, doc   string
		err         string
		pre, dec    []string
		droppedPath []string
	}{
		{name: "good", doc: `{"version":3,"prefill":[{"name":"p0","address":"10.0.0.1:8000"}],"decode":[{"name":"d0","address":"[fd00::1]:8000"}],"stats":{}}`,
			pre: []string{"p0"}, dec: []string{"d0"}},
		{name: "empty pools", doc: `{"version":0,"prefill":[],"decode":[]}`},
		{name: "not json", doc: `{"version":`, err: "answer"},
		{name: "array", doc: `[]`, err: "must be a JSON object"},
		{name: "no version", doc: `{"prefill":[],"decode":[]}`, err: "version: is required"},
		{name: "string version", doc: `{"version":"1","prefill":[],"decode":[]}`, err: "version: must be an integer"},
		{name: "no decode", doc: `{"version":1,"prefill":[]}`, err: "decode: must be an array"},
		{name: "drops bad endpoints", doc: `{"version":1,"prefill":[
			{"name":"p0","address":"10.0.0.1:8000"},
			{"name":"p1","cluster":"x"},
			{"name":"p2","address":"host:80"},
			{"name":"p0","address":"10.0.0.2:8000"},
			{"name":"p3","address":"10.0.0.1:8000"},
			{"name":"p4","address":"10.0.0.4:8000","bootstrap_port":1},
			{"address":"10.0.0.5:8000"},
			{"name":"p6","address":"10.0.0.6:8000","colour":"red"}],
			"decode":[{"name":"d0","address":"10.0.0.9:8000"}]}`,
			pre: []string{"p0"}, dec: []string{"d0"},
			droppedPath: []string{"prefill[1].cluster", "prefill[2].address", "prefill[3].name", "prefill[4].address", "prefill[5].bootstrap_port", "prefill[6].name", "prefill[7].colour"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := c.ParseDiscovered([]byte(tc.doc))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(d.Prefill); strings.Join(got, ",") != strings.Join(tc.pre, ",") {
				t.Errorf("prefill %v, want %v", got, tc.pre)
			}
			if got := names(d.Decode); strings.Join(got, ",") != strings.Join(tc.dec, ",") {
				t.Errorf("decode %v, want %v", got, tc.dec)
			}
			var paths []string
			for _, p := range d.Dropped {
				paths = append(paths, p.Path)
			}
			if strings.Join(paths, " ") != strings.Join(tc.droppedPath, " ") {
				t.Errorf("dropped %v, want %v", d.Dropped, tc.droppedPath)
			}
			for _, e := range append(d.Prefill, d.Decode...) {
				if e.Host == "" || e.MetricsCluster != c.OriginalDstCluster {
					t.Errorf("%s: defaults not applied: %+v", e.Name, e)
				}
			}
		})
	}
}

func TestParseDiscoveredModes(t *testing.T) {
	c := discoveryConfig(t, ModeLMCache)
	d, err := c.ParseDiscovered([]byte(`{"version":1,"prefill":[{"name":"p","address":"10.0.0.1:8000"}],
		"decode":[{"name":"d","address":"10.0.0.2:8000","kv_receiver":{"init_ports":[7000],"alloc_ports":[7100]}},
		{"name":"d2","address":"10.0.0.3:8000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Decode) != 1 || d.Decode[0].KVReceiver.Host != "10.0.0.2" || len(d.Dropped) != 1 {
		t.Fatalf("%+v", d)
	}
}

func names(eps []Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Name)
	}
	return out
}

// FuzzParseDiscovered: the filter reads the companion's answers; whatever
// arrives, parsing does not panic, and every endpoint it keeps is routable
// (an IP:port address, a unique name, per-mode fields present).
func FuzzParseDiscovered(f *testing.F) {
	f.Add([]byte(`{"version":3,"prefill":[{"name":"p0","address":"10.0.0.1:8000","bootstrap_port":8998}],"decode":[{"name":"d0","address":"[fd00::1]:8000"}]}`))
	f.Add([]byte(`{"version":1,"prefill":[{"name":"p0","address":"10.0.0.1:8000"},{"name":"p0"}],"decode":[{"name":"d","address":"10.0.0.2:8000","kv_receiver":{"init_ports":[1],"alloc_ports":[2]}}]}`))
	f.Add([]byte(`{"version":null}`))
	f.Add([]byte(`nul`))
	modes := []*Config{discoveryConfig(f, ModeNIXL), discoveryConfig(f, ModeLMCache), discoveryConfig(f, ModeSGLang)}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range modes {
			d, err := c.ParseDiscovered(data)
			if err != nil {
				continue
			}
			seen := map[string]bool{}
			for k, pool := range [][]Endpoint{d.Prefill, d.Decode} {
				if len(pool) > 512 {
					t.Fatalf("pool of %d", len(pool))
				}
				for _, e := range pool {
					if _, err := netip.ParseAddrPort(e.Address); err != nil || e.Cluster != "" || e.Name == "" || seen[e.Name] {
						t.Fatalf("kept %+v", e)
					}
					seen[e.Name] = true
					if c.Mode == ModeLMCache && k == 1 && (e.KVReceiver == nil || e.KVReceiver.Host == "") {
						t.Fatalf("lmcache decode endpoint without a receiver: %+v", e)
					}
				}
			}
			if _, err := json.Marshal(d); err != nil {
				t.Fatal(err)
			}
		}
	})
}
