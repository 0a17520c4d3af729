package scenarios

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/pdroute/pdroute/e2e/envoyemu"
	"github.com/pdroute/pdroute/e2e/stack"
)

// TestWasmProfile writes where the filter's time goes inside the VM on a
// disaggregated nixl request (as BenchmarkFilterCPU drives it), function by
// function: PDROUTE_WASMPROF=1k,8k,128k go test ./e2e/scenarios -run
// TestWasmProfile -v. A function listener sees every call into and within
// the module and charges the time between two calls or returns to the
// function on top of the stack, leaving out its own bookkeeping; what is left
// of the listener's cost per call (the exit from machine code) is estimated
// from a run without the listener and taken off by calls. The figures are
// shares, not Envoy's times.
func TestWasmProfile(t *testing.T) {
	sizes := os.Getenv("PDROUTE_WASMPROF")
	if sizes == "" {
		t.Skip("set PDROUTE_WASMPROF=1k,8k,... to profile")
	}
	code := pluginCode(t)
	// Times are this thread's CPU time: wall time on a shared machine
	// lands the OS's preemptions on whatever function runs.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// One profiler for every size: wazero keeps the module compiled with
	// the first listeners in the process's compilation cache.
	p := newWasmProfiler()
	probe := text(64 << 10)
	perChar := float64(estimate(t, chat(probe, nil), "/v1/chat/completions")) / float64(len(probe))
	for _, size := range strings.Split(sizes, ",") {
		var k int
		if _, err := fmt.Sscanf(size, "%dk", &k); err != nil {
			t.Fatal(err)
		}
		tokens := k << 10
		body := chat(text(int(float64(tokens)/perChar)), nil)
		answer := prefillAnswer(tokens)
		// round_robin, as BenchmarkFilterCPU: the fixed cost without the prefix index.
		plugin := []byte(`{"mode":"nixl","threshold_tokens":0,` +
			`"prefill":{"strategy":"round_robin","endpoints":[{"name":"p","address":"10.0.0.1:8000"}]},` +
			`"decode":{"strategy":"round_robin","endpoints":[{"name":"d","address":"10.0.0.2:8000"}]}}`)
		warm, n := 1000, 200 // warm: the VM's memory has grown (~600 requests)
		if k >= 32 {
			warm, n = 100, 50
		}
		run := func(l experimental.FunctionListenerFactory, p *wasmProfiler) time.Duration {
			d, err := envoyemu.NewDriver(code, envoyemu.DriverOptions{
				Name: stack.PluginName, VMID: stack.PluginName, PluginConfig: plugin,
				AllowOnHeadersStopIteration: true, BufferLimit: stack.BufferLimitBytes, Listener: l,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if !d.StartVM() || !d.StartPlugin() {
				t.Fatal("plugin did not start")
			}
			b := &testing.B{}
			for range warm {
				driveRequest(b, d, body, true, answer)
			}
			if p != nil {
				p.reset()
			}
			t0 := processCPU()
			for range n {
				driveRequest(b, d, body, true, answer)
			}
			return (processCPU() - t0) / time.Duration(n)
		}
		plain := run(nil, nil)
		profiled := run(p, p)
		p.report(t, size, n, plain, profiled)
	}
}

// wasmProfiler is a calling-context tree of the guest's calls with the time
// spent in each node's own code.
type wasmProfiler struct {
	root, cur *profNode
	last      time.Duration
	events    int64
}

type profNode struct {
	name   string
	parent *profNode
	kids   map[string]*profNode
	self   time.Duration
	calls  int64
}

func newWasmProfiler() *wasmProfiler {
	root := &profNode{name: "(host)", kids: map[string]*profNode{}}
	return &wasmProfiler{root: root, cur: root, last: threadCPU()}
}

func (p *wasmProfiler) reset() {
	p.root = &profNode{name: "(host)", kids: map[string]*profNode{}}
	p.cur, p.events, p.last = p.root, 0, threadCPU()
}

// profiled are the functions listened to (PDROUTE_WASMPROF_FUNCS
// overrides): the exports, host functions, pdroute's packages but for
// tokenest's inner loops, and the runtime's allocation, GC and
// memory growth. A call costs ~1.5 µs listened to, so the small functions
// called thousands of times per request are left to their callers, whose
// time they then count in.
var profiled = regexp.MustCompile(`^(host:|\.proxy_|\.github\.com_pdroute_pdroute_(filter|lb|config|tokenest\.)|` +
	`\.runtime\.(mallocgc|gcAssistAlloc|growMemory|gcStart|gcBgMarkWorker|bgsweep|mallocgcLarge|memmove|memclrNoHeapPointers|growslice|mapassign.*|mapaccess.*|concatstrings|slicebytetostring)$)`)

func (p *wasmProfiler) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	name := def.DebugName()
	if def.GoFunction() != nil {
		name = "host:" + name
	}
	re := profiled
	if s := os.Getenv("PDROUTE_WASMPROF_FUNCS"); s != "" {
		re = regexp.MustCompile(s)
	}
	if !re.MatchString(name) {
		return nil
	}
	return &profListener{p: p, name: name}
}

type profListener struct {
	p    *wasmProfiler
	name string
}

func (l *profListener) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	p := l.p
	p.cur.self += threadCPU() - p.last
	k := p.cur.kids[l.name]
	if k == nil {
		k = &profNode{name: l.name, parent: p.cur, kids: map[string]*profNode{}}
		p.cur.kids[l.name] = k
	}
	k.calls++
	p.cur = k
	p.events++
	p.last = threadCPU()
}

func (l *profListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {
	l.pop()
}

func (l *profListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {
	l.pop()
}

func (l *profListener) pop() {
	p := l.p
	p.cur.self += threadCPU() - p.last
	if p.cur.parent != nil {
		p.cur = p.cur.parent
	}
	p.events++
	p.last = threadCPU()
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// report logs the functions by own time and by time including callees
// (each function counted once per stack), per request. The listener's
// residual cost r per event (leaving and re-entering machine code, outside
// its clock readings) is estimated as the time measured beyond the plain
// run's, spread over the events; a call charges r to the callee (entry and
// exit) and r to the caller, so each node's own time loses r × (its calls +
// its callees' calls).
func (p *wasmProfiler) report(t *testing.T, size string, n int, plain, profiled time.Duration) {
	type agg struct {
		self, cum time.Duration
		calls     int64
	}
	var total time.Duration
	var calls int64
	var sum func(nd *profNode)
	sum = func(nd *profNode) {
		total += nd.self
		calls += nd.calls
		for _, k := range nd.kids {
			sum(k)
		}
	}
	sum(p.root)
	r := time.Duration(0)
	if calls > 0 {
		r = max(0, (total-plain*time.Duration(n))/time.Duration(2*calls))
	}
	fns := map[string]*agg{}
	// own returns nd's subtree time after the residual, adding each node's
	// own time to its function and the subtree to each distinct function
	// on the stack.
	var own func(nd *profNode, onStack map[string]bool) time.Duration
	own = func(nd *profNode, onStack map[string]bool) time.Duration {
		a := fns[nd.name]
		if a == nil {
			a = &agg{}
			fns[nd.name] = a
		}
		kidCalls := int64(0)
		for _, k := range nd.kids {
			kidCalls += k.calls
		}
		self := nd.self - r*time.Duration(nd.calls+kidCalls)
		a.self += self
		a.calls += nd.calls
		sub := self
		first := !onStack[nd.name]
		onStack[nd.name] = true
		for _, k := range nd.kids {
			sub += own(k, onStack)
		}
		if first {
			delete(onStack, nd.name)
			a.cum += sub
		}
		return sub
	}
	guest := own(p.root, map[string]bool{}) - fns["(host)"].self
	us := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e3 }
	t.Logf("%s: CPU per request %.1f µs plain (process), %.1f µs profiled (thread); %d guest calls per request; residual %.0f ns per event; "+
		"after it: host (outside the VM) %.1f µs, guest %.1f µs",
		size, float64(plain)/1e3, float64(profiled)/1e3, calls/int64(n), float64(r), us(fns["(host)"].self), us(guest))
	names := make([]string, 0, len(fns))
	for k := range fns {
		names = append(names, k)
	}
	var sb strings.Builder
	sort.Slice(names, func(i, j int) bool { return fns[names[i]].self > fns[names[j]].self })
	fmt.Fprintf(&sb, "%s: own time, µs per request (calls per request)\n", size)
	for _, k := range names[:min(45, len(names))] {
		a := fns[k]
		fmt.Fprintf(&sb, "  %8.2f %8.1f  %s\n", us(a.self), float64(a.calls)/float64(n), k)
	}
	sort.Slice(names, func(i, j int) bool { return fns[names[i]].cum > fns[names[j]].cum })
	fmt.Fprintf(&sb, "%s: with callees, µs per request (calls per request)\n", size)
	for _, k := range names[:min(90, len(names))] {
		a := fns[k]
		fmt.Fprintf(&sb, "  %8.2f %8.1f  %s\n", us(a.cum), float64(a.calls)/float64(n), k)
	}
	// who allocates: runtime.mallocgc's callers (growslice, makeslice and
	// the like are listed when listened to)
	callers := map[string]*agg{}
	var walkAlloc func(nd *profNode)
	walkAlloc = func(nd *profNode) {
		for _, k := range nd.kids {
			if k.name == ".runtime.mallocgc" {
				a := callers[nd.name]
				if a == nil {
					a = &agg{}
					callers[nd.name] = a
				}
				a.calls += k.calls
			}
			walkAlloc(k)
		}
	}
	walkAlloc(p.root)
	names = names[:0]
	for k := range callers {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return callers[names[i]].calls > callers[names[j]].calls })
	fmt.Fprintf(&sb, "%s: runtime.mallocgc's callers (calls per request)\n", size)
	for _, k := range names {
		fmt.Fprintf(&sb, "  %8.1f  %s\n", float64(callers[k].calls)/float64(n), k)
	}
	t.Log(strings.ReplaceAll(sb.String(), "github.com_pdroute_pdroute_", ""))
}
