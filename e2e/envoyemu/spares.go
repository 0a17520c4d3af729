package envoyemu

// spares is a VM's free list of byte buffers: the Driver's buffered request
// bodies and the copies of proxy_http_call bodies come from it and go back
// to it once nothing can read them (the stream completed, the answered call
// forgotten). Envoy keeps bodies in malloc'd slices that are neither zeroed
// nor traced by a collector; without the list, every request of a benchmark
// would allocate (and zero, and later collect) about twice its body in Go
// memory, which at 128k tokens costs more than the plugin's own work.
//
// A VM runs on one goroutine (the worker's or the Driver's caller's), and so
// does every use of its spares: no lock.
type spares struct {
	bufs [][]byte
}

// maxSpares bounds the buffers a VM keeps: a stream's body and a call's
// body per request in flight, for the few a test keeps open at once.
const maxSpares = 4

// get returns an empty buffer with room for n bytes; its contents beyond
// its length are whatever was there (callers overwrite before they read).
func (p *spares) get(n int) []byte {
	best := -1
	for i, b := range p.bufs {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.bufs[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]byte, 0, n)
	}
	b := p.bufs[best]
	last := len(p.bufs) - 1
	p.bufs[best] = p.bufs[last]
	p.bufs[last] = nil
	p.bufs = p.bufs[:last]
	return b[:0]
}

// put gives b back for a later get. The caller must hold the only
// reference to b's array: nothing may read or write it afterwards.
func (p *spares) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	if len(p.bufs) < maxSpares {
		p.bufs = append(p.bufs, b[:0])
		return
	}
	small := 0
	for i := range p.bufs {
		if cap(p.bufs[i]) < cap(p.bufs[small]) {
			small = i
		}
	}
	if cap(p.bufs[small]) < cap(b) {
		p.bufs[small] = b[:0]
	}
}
