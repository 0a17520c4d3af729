package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"
)

// static is a fixed list: {"static": [endpoint, ...]}.
type static struct{ list []Endpoint }

func newStatic(_ string, settings json.RawMessage, _ *slog.Logger) (Source, error) {
	var list []Endpoint
	if err := strict(settings, &list); err != nil {
		return nil, err
	}
	return static{list}, nil
}

func (s static) Run(ctx context.Context, set func([]Endpoint)) {
	set(s.list)
	<-ctx.Done()
}

// FileSettings are a file source's: {"file": {"path": "...", "interval_ms": 250}}.
type FileSettings struct {
	// Path is a JSON file {"prefill": [endpoint…], "decode": [endpoint…]};
	// the pool reads its own key.
	Path string `json:"path"`
	// IntervalMS is how often the file is read and compared with the last
	// read (it is small; a rename over it, as editors and ConfigMap updates
	// do, is seen like a write). Default 250.
	IntervalMS int `json:"interval_ms"`
}

type file struct {
	pool     string
	path     string
	interval time.Duration
	log      *slog.Logger
}

func newFile(pool string, settings json.RawMessage, log *slog.Logger) (Source, error) {
	var s FileSettings
	if err := strict(settings, &s); err != nil {
		return nil, err
	}
	if s.Path == "" {
		return nil, errors.New("path: is required")
	}
	if s.IntervalMS == 0 {
		s.IntervalMS = 250
	}
	if s.IntervalMS < 10 {
		return nil, errors.New("interval_ms: must be at least 10")
	}
	return &file{pool: pool, path: s.Path, interval: time.Duration(s.IntervalMS) * time.Millisecond, log: log}, nil
}

// ParsePoolsFile reads the file source's document.
func ParsePoolsFile(data []byte) (map[string][]Endpoint, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var doc struct {
		Prefill *[]Endpoint `json:"prefill"`
		Decode  *[]Endpoint `json:"decode"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	out := map[string][]Endpoint{}
	if doc.Prefill != nil {
		out["prefill"] = *doc.Prefill
	}
	if doc.Decode != nil {
		out["decode"] = *doc.Decode
	}
	return out, nil
}

func (f *file) Run(ctx context.Context, set func([]Endpoint)) {
	var last []byte
	var lastErr string
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		data, err := os.ReadFile(f.path)
		if err == nil && !bytes.Equal(data, last) {
			var doc map[string][]Endpoint
			if doc, err = ParsePoolsFile(data); err == nil {
				list, ok := doc[f.pool]
				if !ok {
					err = fmt.Errorf("no %q list", f.pool)
				} else {
					last = slices.Clone(data)
					set(list)
				}
			}
		}
		if err != nil && err.Error() != lastErr {
			f.log.Warn("pools file unreadable, keeping the last list", "path", f.path, "err", err.Error())
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DNSSettings are a dns source's: {"dns": {"name": "...", "port": 8000}}.
type DNSSettings struct {
	// Name is a headless Service's name (or any name with one A/AAAA record
	// per engine).
	Name string `json:"name"`
	// Port is the engines' API port.
	Port int `json:"port"`
	// IntervalMS is how often the name is resolved again. Default 5000.
	IntervalMS int `json:"interval_ms"`
	// Server, when set, is the DNS server (IP:port) to ask instead of the
	// system's resolver configuration.
	Server string `json:"server"`
	// BootstrapPort and KVReceiver are laid on every endpoint found
	// (per-engine settings that are the same for the whole pool).
	BootstrapPort int         `json:"bootstrap_port"`
	KVReceiver    *KVReceiver `json:"kv_receiver"`
}

type dnsSource struct {
	pool     string
	s        DNSSettings
	interval time.Duration
	resolver *net.Resolver
	log      *slog.Logger
}

func newDNS(pool string, settings json.RawMessage, log *slog.Logger) (Source, error) {
	var s DNSSettings
	if err := strict(settings, &s); err != nil {
		return nil, err
	}
	if s.Name == "" {
		return nil, errors.New("name: is required")
	}
	if s.Port < 1 || s.Port > 65535 {
		return nil, errors.New("port: must be in 1..65535")
	}
	if s.IntervalMS == 0 {
		s.IntervalMS = 5000
	}
	if s.IntervalMS < 100 {
		return nil, errors.New("interval_ms: must be at least 100")
	}
	r := net.DefaultResolver
	if s.Server != "" {
		if _, err := netip.ParseAddrPort(s.Server); err != nil {
			return nil, fmt.Errorf("server: %v", err)
		}
		server := s.Server
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return &dnsSource{pool: pool, s: s, interval: time.Duration(s.IntervalMS) * time.Millisecond, resolver: r, log: log}, nil
}

func (d *dnsSource) Run(ctx context.Context, set func([]Endpoint)) {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		if list, err := d.resolve(ctx); err != nil {
			d.log.Warn("resolve failed, keeping the last list", "name", d.s.Name, "err", err.Error())
		} else {
			set(list)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *dnsSource) resolve(ctx context.Context) ([]Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, max(d.interval, 2*time.Second))
	defer cancel()
	addrs, err := d.resolver.LookupNetIP(ctx, "ip", d.s.Name)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return []Endpoint{}, nil // the Service has no ready pod: an empty pool
	}
	if err != nil {
		return nil, err
	}
	list := make([]Endpoint, 0, len(addrs))
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(d.s.Port))
		e := Endpoint{Name: AddrName(d.pool, ap), Address: ap.String(), BootstrapPort: d.s.BootstrapPort}
		if d.s.KVReceiver != nil {
			r := *d.s.KVReceiver
			e.KVReceiver = &r
		}
		list = append(list, e)
	}
	return list, nil
}
