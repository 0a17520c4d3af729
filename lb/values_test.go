package lb

import (
	"bytes"
	"encoding/hex"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// goldenValues builds one value of each kind; their bytes are pinned in
// testdata/values so that a layout change (which VMs of two pdroute versions would
// read as garbage) is always deliberate.
func goldenValues() map[string][]byte {
	inflight := newInflight(nil, 3)
	inflight.inc(1)
	inflight.inc(1)
	inflight.inc(1)
	inflight.inc(2)

	health := appendHealth(nil, []healthEntry{
		{},
		{failures: 2},
		{failures: 3, state: healthOpen, at: at(10 * time.Second).UnixNano()},
		{failures: 4, state: healthProbing, at: t0.UnixNano()},
	})

	stats := newStats(nil, 2)
	stats.set(0, EngineStats{Running: 3, Waiting: 1, KVCacheUsage: 0.5}, t0.UnixNano())

	second := int64(time.Second)
	qps := newQPS(nil, 2, second, t0.UnixNano()/second)
	qps.record(0)
	qps.record(0)
	qps.record(1)
	qps.advance(t0.UnixNano()/second + 1)
	qps.record(1)

	return map[string][]byte{
		"rotation": appendRotation(nil, 258),
		"inflight": inflight,
		"health":   health,
		"stats":    stats,
		"qps":      qps,
	}
}

func TestValueGolden(t *testing.T) {
	for name, v := range goldenValues() {
		path := filepath.Join("testdata", "values", name+".hex")
		got := hex.Dump(v)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestValueGolden -update)", err)
		}
		if got != string(want) {
			t.Errorf("%s value layout changed:\n got:\n%s want:\n%s", name, got, want)
		}
	}
}

func TestValueDecodersRejectGarbage(t *testing.T) {
	good := goldenValues()
	variants := func(v []byte) map[string][]byte {
		wrongVersion := bytes.Clone(v)
		wrongVersion[0] = valueVersion + 1
		return map[string][]byte{
			"empty":         {},
			"truncated":     v[:len(v)-1],
			"extended":      append(bytes.Clone(v), 0),
			"wrong version": wrongVersion,
			"header only":   v[:2],
		}
	}
	for kind, v := range good {
		for name, bad := range variants(v) {
			var ok bool
			switch kind {
			case "rotation":
				_, ok = parseRotation(bad)
			case "inflight":
				_, ok = parseInflight(bad)
			case "health":
				ok = parseHealth(bad, make([]healthEntry, 4))
			case "stats":
				_, ok = parseStats(bad)
			case "qps":
				_, ok = parseQPS(bad)
			}
			if ok {
				t.Errorf("%s %s: accepted % x", kind, name, bad)
			}
		}
	}
	// Kinds are not interchangeable even at a plausible length.
	if _, ok := parseInflight(good["stats"]); ok {
		t.Error("stats value parsed as in-flight")
	}
	// Contents out of range.
	negative := bytes.Clone(good["stats"])
	le.PutUint32(negative[statsHeader+8:], math.Float32bits(-1))
	nan := bytes.Clone(good["stats"])
	le.PutUint32(nan[statsHeader+12:], math.Float32bits(float32(math.NaN())))
	for name, v := range map[string][]byte{"negative": negative, "NaN": nan} {
		if _, ok := parseStats(v); ok {
			t.Errorf("stats with %s value accepted", name)
		}
	}
	unsorted := appendHealth(nil, []healthEntry{{failures: 1}, {failures: 2}})
	le.PutUint16(unsorted[healthHeader:], 1) // both entries now claim index 1
	zeroWidth := bytes.Clone(good["qps"])
	le.PutUint64(zeroWidth[5:], 0)
	if parseHealth(unsorted, make([]healthEntry, 2)) {
		t.Error("health with duplicate indexes accepted")
	}
	if _, ok := parseQPS(zeroWidth); ok {
		t.Error("qps with zero width accepted")
	}
}

func TestQPSAdvance(t *testing.T) {
	q := newQPS(nil, 2, 1, 100)
	for range 3 {
		q.record(0)
	}
	q.advance(105) // bucket 100 still in the window (96..105)
	q.record(1)
	if q.total(0) != 3 || q.total(1) != 1 {
		t.Fatalf("totals after 5 buckets = %d, %d; want 3, 1", q.total(0), q.total(1))
	}
	q.advance(110) // 100 falls out, 105 stays
	if q.total(0) != 0 || q.total(1) != 1 {
		t.Fatalf("totals after 10 buckets = %d, %d; want 0, 1", q.total(0), q.total(1))
	}
	q.advance(1 << 40) // far jump clears everything
	if q.total(1) != 0 || q.head() != 1<<40 {
		t.Fatalf("after far jump total %d head %d", q.total(1), q.head())
	}
	q.advance(3) // going back does nothing
	if q.head() != 1<<40 {
		t.Fatalf("head moved back to %d", q.head())
	}
}

func FuzzParseRotation(f *testing.F) {
	f.Add(goldenValues()["rotation"])
	f.Add([]byte{valueVersion, kindRotation, 1})
	f.Fuzz(func(t *testing.T, v []byte) {
		c, ok := parseRotation(v)
		if ok && !bytes.Equal(appendRotation(nil, c), v) {
			t.Fatalf("re-encoding % x gives another value", v)
		}
	})
}

func FuzzParseInflight(f *testing.F) {
	f.Add(goldenValues()["inflight"])
	f.Add([]byte{valueVersion, kindInflight, 1, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		iv, ok := parseInflight(v)
		if !ok {
			return
		}
		for i := range iv.len() {
			c := iv.get(i)
			iv.inc(i)
			iv.sub(i, 2)
			if want := max(min(uint64(c)+1, math.MaxUint32), 2) - 2; uint64(iv.get(i)) != want {
				t.Fatalf("inc then sub 2 of %d = %d, want %d", c, iv.get(i), want)
			}
		}
		if _, ok := parseInflight(iv); !ok {
			t.Fatal("modified value no longer parses")
		}
	})
}

func FuzzParseHealth(f *testing.F) {
	f.Add(goldenValues()["health"])
	f.Add(appendHealth(nil, make([]healthEntry, 3)))
	f.Fuzz(func(t *testing.T, v []byte) {
		n := 4
		if len(v) >= 4 {
			n = int(le.Uint16(v[2:])) // the size the value claims
		}
		dense := make([]healthEntry, n)
		if !parseHealth(v, dense) {
			if slices.ContainsFunc(dense, func(e healthEntry) bool { return e != (healthEntry{}) }) {
				t.Fatal("rejected value left entries behind")
			}
			return
		}
		if got := appendHealth(nil, dense); !bytes.Equal(got, v) {
			t.Fatalf("re-encoding % x gives % x", v, got)
		}
	})
}

func FuzzParseStats(f *testing.F) {
	f.Add([]byte(goldenValues()["stats"]))
	f.Fuzz(func(t *testing.T, v []byte) {
		sv, ok := parseStats(v)
		if !ok {
			return
		}
		before := bytes.Clone(v)
		for i := range sv.len() {
			s, observed := sv.get(i)
			for _, x := range [3]float64{s.Running, s.Waiting, s.KVCacheUsage} {
				if !(x >= 0) || math.IsInf(x, 0) {
					t.Fatalf("endpoint %d: value %v accepted", i, x)
				}
			}
			sv.set(i, s, observed)
		}
		if !bytes.Equal(before, v) {
			t.Fatalf("get/set round trip changed % x into % x", before, v)
		}
	})
}

func FuzzParseQPS(f *testing.F) {
	f.Add([]byte(goldenValues()["qps"]), uint8(1), uint16(0))
	f.Add([]byte(newQPS(nil, 1, 1, -5)), uint8(20), uint16(3))
	f.Fuzz(func(t *testing.T, v []byte, steps uint8, endpoint uint16) {
		q, ok := parseQPS(v)
		if !ok {
			return
		}
		head := q.head()
		q.advance(head + int64(steps))
		if q.head() != head {
			for i := range q.len() {
				var sum uint32
				for b := range int64(qpsBuckets) {
					sum += uint32(le.Uint16(q[q.slotOffset(b, i):]))
				}
				if sum != q.total(i) {
					t.Fatalf("endpoint %d: total %d, buckets sum to %d", i, q.total(i), sum)
				}
			}
		}
		if q.len() > 0 {
			q.record(int(endpoint) % q.len())
		}
		if _, ok := parseQPS(q); !ok {
			t.Fatal("modified value no longer parses")
		}
	})
}
