package envoyemu

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// worker is an Envoy worker thread: one goroutine running an event loop. It
// owns one VM per plugin and every stream of the connections assigned to it
// (connections are spread over workers round robin, as the kernel spreads
// accepts over Envoy's workers). Everything that touches a VM or a stream
// runs as a task on this loop, so a VM is never called from two goroutines.
type worker struct {
	id    int
	name  string
	host  *Host
	mu    sync.Mutex
	queue []func()
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
	vms   map[*pluginRuntime]*workerPlugin
}

func newWorker(h *Host, id int) *worker {
	w := &worker{
		id: id, name: "worker_" + strconv.Itoa(id), host: h,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		vms: map[*pluginRuntime]*workerPlugin{},
	}
	go w.loop()
	return w
}

// post queues f on the loop; it never blocks.
func (w *worker) post(f func()) {
	w.mu.Lock()
	w.queue = append(w.queue, f)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run posts f and waits for it to finish.
func (w *worker) run(f func()) {
	done := make(chan struct{})
	w.post(func() {
		defer close(done)
		f()
	})
	select {
	case <-done:
	case <-w.done:
	}
}

func (w *worker) loop() {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			return
		}
		for {
			w.mu.Lock()
			q := w.queue
			w.queue = nil
			w.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, f := range q {
				f()
			}
		}
	}
}

func (w *worker) stop() {
	close(w.quit)
	<-w.done
}

// after runs f on the loop after d; cancel prevents it if it has not started.
func (w *worker) after(d time.Duration, f func()) (cancel func()) {
	var mu sync.Mutex
	cancelled := false
	t := time.AfterFunc(d, func() {
		w.post(func() {
			mu.Lock()
			c := cancelled
			mu.Unlock()
			if !c {
				f()
			}
		})
	})
	return func() {
		mu.Lock()
		cancelled = true
		mu.Unlock()
		t.Stop()
	}
}

// workerEnv is the vmEnv of a worker's VMs.
type workerEnv struct{ w *worker }

func (e workerEnv) post(f func())                                   { e.w.post(f) }
func (e workerEnv) after(d time.Duration, f func()) (cancel func()) { return e.w.after(d, f) }
func (e workerEnv) dispatch(v *vm, co *callout)                     { e.w.host.dispatchCallout(e.w, v, co) }

// workerPlugin is a plugin's thread-local VM on one worker, with Envoy's
// FAIL_RELOAD bookkeeping (PluginConfig::maybeReloadHandleIfNeeded).
type workerPlugin struct {
	p        *pluginRuntime
	w        *worker
	cur      *vm
	lastLoad time.Time
	streams  map[*vm]int
}

// load creates a VM on this worker and starts the plugin in it.
func (wp *workerPlugin) load() (*vm, error) {
	v, err := newVM(wp.p.mod, wp.p.spec, wp.w.host.proc, workerEnv{wp.w}, wp.w.name)
	if err != nil {
		return nil, err
	}
	if err := v.startPlugin(); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

// vm returns the VM new streams use, reloading a failed one under
// FAIL_RELOAD once the jittered backoff since the last load has passed.
func (wp *workerPlugin) vm() *vm {
	v := wp.cur
	if v == nil || v.failed == "" || wp.p.spec.FailurePolicy != FailReload {
		return v
	}
	base := wp.p.spec.ReloadBackoff
	backoff := base + time.Duration(rand.Int64N(int64(base)/2+1))
	now := time.Now()
	if now.Sub(wp.lastLoad) < backoff {
		wp.p.reloadBackoffs.Add(1)
		return v
	}
	wp.lastLoad = now
	nv, err := wp.load()
	if err != nil {
		wp.p.reloadFailures.Add(1)
		wp.w.host.proc.logf(LevelError, wp.w.name, "wasm: reload of plugin %q failed: %v", wp.p.spec.Name, err)
		return v
	}
	wp.p.reloads.Add(1)
	wp.p.retire(v)
	wp.retireIfIdle(v)
	wp.cur = nv
	return nv
}

// streamStarted and streamEnded count a VM's streams so a replaced VM is
// closed once its last stream is done.
func (wp *workerPlugin) streamStarted(v *vm) { wp.streams[v]++ }

func (wp *workerPlugin) streamEnded(v *vm) {
	wp.streams[v]--
	if wp.streams[v] <= 0 {
		delete(wp.streams, v)
		if v != wp.cur {
			v.close()
		}
	}
}

func (wp *workerPlugin) retireIfIdle(v *vm) {
	if wp.streams[v] == 0 {
		v.close()
	}
}
