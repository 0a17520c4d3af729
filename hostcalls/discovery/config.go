package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
)

// Source delivers one pool's complete endpoint list whenever it changes,
// until ctx ends. A source that cannot read its origin keeps quiet (the
// registry keeps its last list) and logs.
type Source interface {
	Run(ctx context.Context, set func([]Endpoint))
}

// Factory builds a source for pool ("prefill" or "decode") from its JSON
// settings.
type Factory func(pool string, settings json.RawMessage, log *slog.Logger) (Source, error)

var (
	factoriesMu sync.Mutex
	factories   = map[string]Factory{}
)

// RegisterSource makes a source kind available to configurations (the kube
// subpackage registers "kubernetes" in its init).
func RegisterSource(kind string, f Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories[kind] = f
}

func init() {
	RegisterSource("static", newStatic)
	RegisterSource("file", newFile)
	RegisterSource("dns", newDNS)
}

// Config chooses each pool's source: a JSON object
//
//	{"prefill": {"file": {"path": "/etc/pdroute/pools.json"}},
//	 "decode":  {"dns": {"name": "decode.llm.svc.cluster.local", "port": 8000}}}
//
// where each pool names exactly one source kind with its settings.
type Config struct {
	Prefill, Decode map[string]json.RawMessage
}

// ParseConfig reads a discovery configuration.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw struct {
		Prefill map[string]json.RawMessage `json:"prefill"`
		Decode  map[string]json.RawMessage `json:"decode"`
	}
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("discovery configuration: %w", err)
	}
	c := &Config{Prefill: raw.Prefill, Decode: raw.Decode}
	for i, m := range []map[string]json.RawMessage{c.Prefill, c.Decode} {
		if len(m) != 1 {
			return nil, fmt.Errorf("discovery configuration: %s: name exactly one source (%s)", Pools[i], kinds())
		}
		for k := range m {
			if _, ok := lookup(k); !ok {
				return nil, fmt.Errorf("discovery configuration: %s: unknown source %q (%s)", Pools[i], k, kinds())
			}
		}
	}
	return c, nil
}

// LoadConfig reads a discovery configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(data)
}

func lookup(kind string) (Factory, bool) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	f, ok := factories[kind]
	return f, ok
}

func kinds() string {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	var ks []string
	for k := range factories {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return fmt.Sprint(ks)
}

// Sources builds the configured sources, prefill first.
func (c *Config) Sources(log *slog.Logger) ([2]Source, error) {
	var out [2]Source
	for i, m := range []map[string]json.RawMessage{c.Prefill, c.Decode} {
		for kind, settings := range m {
			f, _ := lookup(kind)
			s, err := f(Pools[i], settings, log.With("pool", Pools[i], "source", kind))
			if err != nil {
				return out, fmt.Errorf("discovery: %s: %s: %w", Pools[i], kind, err)
			}
			out[i] = s
		}
	}
	return out, nil
}

// Run runs the sources into the registry until ctx ends.
func Run(ctx context.Context, reg *Registry, sources [2]Source, log *slog.Logger) {
	var wg sync.WaitGroup
	for i, s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Run(ctx, func(list []Endpoint) {
				for _, p := range reg.Set(i, list) {
					log.Warn("discovered endpoint left out", "pool", Pools[i], "problem", p)
				}
			})
		}()
	}
	wg.Wait()
}

// strict decodes settings into v, unknown fields being errors.
func strict(settings json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
