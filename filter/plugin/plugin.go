// Package plugin is pdroute's proxy-wasm plugin: the thin context glue that
// turns Envoy callbacks into calls of the pure packages — filter/config (the
// configuration and every decision), filter/connector (bodies),
// filter/apierr (error answers), filter/sse (stream conversion), tokenest
// (token estimate) and lb (endpoint choice) — and their results into host
// calls through filter/abi.
//
// One root context per plugin per VM holds the parsed configuration, the
// balancers (state in shared data, so correct across Envoy workers), the
// metrics and the tick-driven work (engine stats scraping; lmcache's KV-ready
// long poll; following the discovery companion, discovery.go). One stream per
// request runs the state machine of stream.go.
//
// Rules of the wasm VM hold here: no goroutines, timers or sleeps (time comes
// from time.Now, work from ticks and http-call answers), no host call outside
// a callback, and bounded memory: a request body is read into the heap once
// to decide, and rewrites go back to Envoy as small edits (abi.EditHttpRequestBody).
package plugin

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
	"github.com/pdroute/pdroute/filter/apierr"
	"github.com/pdroute/pdroute/filter/config"
	"github.com/pdroute/pdroute/filter/internal/idtab"
	"github.com/pdroute/pdroute/lb"
	"github.com/pdroute/pdroute/tokenest"
)

// NewVMContext returns the VM context of the pdroute plugin, for
// abi.SetVMContext (wasm) or proxytest (native tests).
func NewVMContext() types.VMContext { return &vmContext{} }

// PanicReply is the local reply of a stream whose callback panicked, in the
// error shape of every other pdroute answer (for abi.SetPanicReply).
func PanicReply(panicValue any) (uint32, []byte) {
	status, body := apierr.Response(apierr.Internal, panicText(panicValue))
	return uint32(status), body
}

type vmContext struct {
	types.DefaultVMContext
	// owner names this VM in the balancers' shared in-flight counts, the same
	// for every root and configuration of the VM (a new VM draws a new one),
	// so counts of a VM that trapped expire (lb.Balancer.SetOwner).
	owner uint64
}

func (v *vmContext) NewPluginContext(id uint32) types.PluginContext {
	return &rootContext{id: id, vm: v}
}

// rootContext is one plugin configuration on one VM.
type rootContext struct {
	types.DefaultPluginContext
	id  uint32
	vm  *vmContext
	cfg *config.Config
	// method is cfg.TokenMethod parsed once.
	method tokenest.Method
	// tools holds the tool definitions this VM has read, validated, and
	// for the default method their counts, for the requests that repeat
	// them (agents send theirs with every request); at most
	// toolCacheBytes.
	tools *tokenest.Cache
	// toolHits and toolMisses are tools' counts the metrics hold: one
	// reading of them per estimate (Stats) gives what it added.
	toolHits, toolMisses uint64
	// index is where the top-level members of the body being decided are,
	// as the estimate found them, and the working index of a prefill
	// answer's read (one callback at a time uses it; its slice keeps its
	// room between requests)
	index tokenest.Index
	// prefillBody is the buffer nixl/orchestrated prefill bodies are built
	// in (startNIXL), kept between requests where the host copies them.
	prefillBody []byte
	// body is the buffer request bodies are read into (readBody), kept
	// between requests. A body read lives until the next read, in any
	// stream's callback: nothing aliasing it may outlive its callback.
	body []byte
	// edit is the buffer nixl decode edits are built in (onNIXLAnswer),
	// kept between requests: the host copies an edit when it is applied.
	edit []byte
	// answer is the buffer nixl/orchestrated prefill answers are read
	// into (readCallAnswerInto), kept between requests.
	answer []byte
	// prefill and decode balance the pools; their state is in shared data.
	prefill, decode *lb.Balancer
	// store is shared data under cfg.SharedDataPrefix.
	store lb.Store
	// px is the shared prefix index's glue (nil when nothing reads it).
	px *prefixRouting
	// rng is this VM's random source (balancers; seeded from WASI).
	rng *rand.Rand
	// instance identifies this root across VMs (scrape lease owner).
	instance uint64
	m        *metrics
	// streams are the live streams of this root by context id, for
	// tick-driven deadlines: an idtab.Table rather than a map, as in
	// filter/abi (less code per request).
	streams idtab.Table[*stream]
	// free are ended streams kept for reuse (newStream, recycle).
	free   []*stream
	scrape scraper
	kv     *kvWaiter
	// tickPeriod is the tick the root asked for (ms).
	tickPeriod uint32
	// known is what this proxy's Envoy does with the body of a request
	// whose headers a filter paused (way.go).
	known bodyWay
	// disc follows the discovery companion (cfg.Discovery set), else nil.
	disc *follower
}

func (r *rootContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := abi.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		abi.LogCriticalf("pdroute: read plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := config.Parse(data)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				abi.LogCriticalf("pdroute: invalid configuration: %s", p)
			}
		} else {
			abi.LogCriticalf("pdroute: invalid configuration: %v", err)
		}
		return types.OnPluginStartStatusFailed
	}
	if err := r.start(cfg); err != nil {
		abi.LogCriticalf("pdroute: start: %v", err)
		return types.OnPluginStartStatusFailed
	}
	for _, w := range cfg.Warnings() {
		abi.LogWarnf("pdroute: configuration: %s", w)
	}
	abi.LogInfof("pdroute: configured: mode %s, threshold %d tokens, %d prefill and %d decode endpoints, route_at %s",
		cfg.Mode, cfg.ThresholdTokens, len(cfg.Prefill.Endpoints), len(cfg.Decode.Endpoints), cfg.RouteAt)
	if cfg.RouteAt == config.RouteAtHeaders {
		for _, l := range cfg.HeadersWayLimits() {
			abi.LogInfof("pdroute: route_at headers: %s", l)
		}
	}
	return types.OnPluginStartStatusOK
}

// toolCacheBytes bounds each root's cache of tool definitions (their bytes
// and ~100 bytes each besides): the 29 definitions of tokenest's agent
// benchmark body take 12.8 KB. Wasm memory never shrinks, so the bound is
// what a VM keeps at most; a definition that does not fit empties the
// cache (see tokenest.Cache).
const toolCacheBytes = 256 << 10

// start builds everything a configuration needs. It runs in
// proxy_on_configure, where host calls (shared data, metrics, random) are
// allowed.
func (r *rootContext) start(cfg *config.Config) error {
	method, err := tokenest.ParseMethod(cfg.TokenMethod)
	if err != nil {
		return err
	}
	var seed [24]byte
	if err := abi.RandomBytes(seed[:]); err != nil {
		return err
	}
	r.rng = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:16])))
	r.instance = binary.LittleEndian.Uint64(seed[16:]) | 1
	r.store = newSharedData(cfg.SharedDataPrefix)
	if cfg.Discovery != nil {
		if err := r.newDynamicBalancers(cfg); err != nil {
			return err
		}
	} else {
		r.prefill, err = lb.New("prefill", cfg.Prefill.Balancing(), r.store, r.rng)
		if err != nil {
			return err
		}
		r.decode, err = lb.New("decode", cfg.Decode.Balancing(), r.store, r.rng)
		if err != nil {
			return err
		}
	}
	if r.vm != nil {
		if r.vm.owner == 0 {
			r.vm.owner = r.rng.Uint64() | 1
		}
		r.prefill.SetOwner(r.vm.owner, lb.DefaultOwnerTTL)
		r.decode.SetOwner(r.vm.owner, lb.DefaultOwnerTTL)
	}
	if r.px, err = newPrefixRouting(cfg, r.store); err != nil {
		return err
	}
	r.cfg, r.method = cfg, method
	if cfg.Discovery != nil {
		r.disc = newFollower(cfg)
		r.disc.refresh(r)
	}
	r.tools, r.toolHits, r.toolMisses = tokenest.NewCache(toolCacheBytes), 0, 0
	r.m = defineMetrics(cfg.Mode)
	r.scrape = newScraper(cfg)
	if cfg.Mode == config.ModeLMCache {
		r.kv = newKVWaiter(r)
	}
	return r.setTick()
}

// setTick asks for the tick the work needs: 100 ms in lmcache mode (KV-wait
// deadlines), while route_at auto has yet to learn the request way (its
// first requests wait probeAfter at most) and while requests paused before
// the body was found withheld still wait (the next tick continues them),
// else 1 s (scrapes, the body watchdog).
func (r *rootContext) setTick() error {
	period := uint32(1000)
	if r.kv != nil || r.disc != nil || (r.cfg.RouteAt == config.RouteAtAuto && r.known == wayUnknown) ||
		(r.known == wayWithheld && r.awaitingBody()) {
		period = 100
	}
	if period == r.tickPeriod {
		return nil
	}
	r.tickPeriod = period
	return abi.SetTickPeriodMilliSeconds(period)
}

func (r *rootContext) OnTick() {
	now := time.Now()
	// Keep this VM's in-flight counts alive and drop those of VMs that
	// stopped (one read per pool; a write every DefaultOwnerTTL/4 at most).
	for _, b := range [2]*lb.Balancer{r.prefill, r.decode} {
		if err := b.Heartbeat(now); err != nil {
			abi.LogDebugf("pdroute: in-flight heartbeat: %v", err)
		}
	}
	if r.disc != nil {
		r.disc.tick(r, now)
	}
	r.scrape.tick(r, now)
	if r.kv != nil {
		r.kv.tick(now)
	}
	_ = r.refreshWay() // learn what another VM found
	// A stream may end inside a host call of the walk (Each allows that;
	// one visited twice then decides the same again).
	r.streams.Each(func(_ uint32, s *stream) {
		if s.awaitingBody {
			r.asStream(s, func() { s.checkBodyWait(now) })
		}
	})
	_ = r.setTick() // back to 1 s once no request waits for a withheld body
}

// awaitingBody reports whether some stream is paused for its body.
func (r *rootContext) awaitingBody() bool {
	found := false
	r.streams.Each(func(_ uint32, s *stream) { found = found || s.awaitingBody })
	return found
}

func (r *rootContext) NewHttpContext(id uint32) types.HttpContext {
	if r.cfg == nil {
		return nil // not configured: Envoy rejected the config already
	}
	if r.disc != nil {
		r.disc.refresh(r)
	}
	s := r.newStream(id)
	r.streams.Put(id, s)
	return s
}

// forget removes stream s from the live streams (OnHttpStreamDone).
func (r *rootContext) forget(s *stream) {
	if x, _ := r.streams.Get(s.id); x == s {
		r.streams.Delete(s.id)
	}
}

// sharedData is lb.Store over proxy-wasm shared data, its keys under
// prefix: lb.WithPrefix's layout (prefix + "/" + key, none for an empty
// prefix), the keys joined by abi rather than concatenated on every access.
type sharedData struct{ prefix string }

// newSharedData returns a pointer: the methods of a value type in an
// interface run through a generated wrapper, one more function per access.
func newSharedData(prefix string) *sharedData {
	if prefix == "" {
		return &sharedData{}
	}
	return &sharedData{prefix: prefix + "/"}
}

func (d *sharedData) Get(key string) ([]byte, uint32, error) {
	v, cas, err := abi.GetSharedDataUnder(d.prefix, key)
	// abi returns the status errors themselves: == spares errors.Is
	if err != nil && (err == types.ErrorStatusNotFound || errors.Is(err, types.ErrorStatusNotFound)) {
		return nil, 0, lb.ErrNotFound
	}
	return v, cas, err
}

// GetInto is Get into dst's room (lb.IntoStore).
func (d *sharedData) GetInto(dst []byte, key string) ([]byte, uint32, error) {
	v, cas, err := abi.GetSharedDataUnderInto(dst, d.prefix, key)
	if err != nil && (err == types.ErrorStatusNotFound || errors.Is(err, types.ErrorStatusNotFound)) {
		return nil, 0, lb.ErrNotFound
	}
	return v, cas, err
}

func (d *sharedData) Set(key string, value []byte, cas uint32) error {
	err := abi.SetSharedDataUnder(d.prefix, key, value, cas)
	if err != nil && (err == types.ErrorStatusCasMismatch || errors.Is(err, types.ErrorStatusCasMismatch)) {
		return lb.ErrCasMismatch
	}
	return err
}

// overwrite sets key to value whatever it holds. It passes the current cas
// rather than 0: Envoy accepts cas 0 on an existing key, the SDK's proxytest
// emulator does not, and the cas read here works on both.
func overwrite(store lb.Store, key string, value []byte) error {
	var err error
	for range 4 {
		_, cas, gerr := store.Get(key)
		if gerr != nil && !errors.Is(gerr, lb.ErrNotFound) {
			return gerr
		}
		if err = store.Set(key, value, cas); !errors.Is(err, lb.ErrCasMismatch) {
			return err
		}
	}
	return err
}
