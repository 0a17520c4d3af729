// Package kube is the companion's Kubernetes discovery source: pods selected
// by label, followed with a client-go informer. Importing it registers the
// "kubernetes" source kind with hostcalls/discovery (the kvbridge binary
// does); it is a package of its own so that nothing else links client-go.
//
// A pod is in a pool when it matches the selector, its role label (default
// llm-d's "llm-d.ai/role") says the pool or "both", it has an IP, it is not
// being deleted, and its Ready condition is True. Per-engine settings come
// from annotations (or labels, for single numbers):
//
//	pdroute.io/port              the engine's API port (else the source's "port")
//	pdroute.io/bootstrap-port    SGLang bootstrap port (sglang prefill)
//	pdroute.io/kv-receiver-host  LMCache receiver host (default: the pod IP)
//	pdroute.io/kv-init-ports     LMCache receiver init ports, "7300,7301"
//	pdroute.io/kv-alloc-ports    LMCache receiver alloc ports, "7400,7401"
//	pdroute.io/metrics-port      where /metrics is served (default: the API port)
//
// A pod whose settings do not parse is left out and logged.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pdroute/pdroute/hostcalls/discovery"
)

// Annotation (and label) names of per-engine settings.
const (
	AnnotationPort           = "pdroute.io/port"
	AnnotationBootstrapPort  = "pdroute.io/bootstrap-port"
	AnnotationKVReceiverHost = "pdroute.io/kv-receiver-host"
	AnnotationKVInitPorts    = "pdroute.io/kv-init-ports"
	AnnotationKVAllocPorts   = "pdroute.io/kv-alloc-ports"
	AnnotationMetricsPort    = "pdroute.io/metrics-port"
	// DefaultRoleLabel is llm-d's role label: prefill, decode or both.
	DefaultRoleLabel = "llm-d.ai/role"
)

func init() {
	discovery.RegisterSource("kubernetes", factory)
}

// Settings are a kubernetes source's:
//
//	{"kubernetes": {"namespace": "llm", "selector": "app=vllm", "port": 8000}}
type Settings struct {
	// Namespace to watch. Default: the companion's own (in a pod), else
	// "default".
	Namespace string `json:"namespace"`
	// Selector is a label selector ("app=vllm,model=llama"). Required.
	Selector string `json:"selector"`
	// RoleLabel names the label holding the pod's role. Default
	// "llm-d.ai/role".
	RoleLabel string `json:"role_label"`
	// Port is the engines' API port unless a pod's pdroute.io/port says
	// otherwise.
	Port int `json:"port"`
	// Kubeconfig is a kubeconfig file to use instead of the in-cluster
	// service account (running outside the cluster).
	Kubeconfig string `json:"kubeconfig"`
	// ResyncMS is the informer's resync period. Default 10 minutes.
	ResyncMS int `json:"resync_ms"`
}

func factory(pool string, raw json.RawMessage, log *slog.Logger) (discovery.Source, error) {
	var s Settings
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	cfg, err := restConfig(s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(pool, s, client, log)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// Source follows the pods of one pool.
type Source struct {
	pool     string
	s        Settings
	selector labels.Selector
	client   kubernetes.Interface
	log      *slog.Logger
}

// New returns the source of pool over client (a fake clientset in tests).
func New(pool string, s Settings, client kubernetes.Interface, log *slog.Logger) (*Source, error) {
	if s.Selector == "" {
		return nil, errors.New("selector: is required")
	}
	sel, err := labels.Parse(s.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector: %v", err)
	}
	if s.Port < 0 || s.Port > 65535 {
		return nil, errors.New("port: must be in 1..65535")
	}
	if s.RoleLabel == "" {
		s.RoleLabel = DefaultRoleLabel
	}
	if s.Namespace == "" {
		s.Namespace = "default"
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			s.Namespace = strings.TrimSpace(string(b))
		}
	}
	if s.ResyncMS == 0 {
		s.ResyncMS = 600_000
	}
	return &Source{pool: pool, s: s, selector: sel, client: client, log: log}, nil
}

// Run implements discovery.Source: it delivers the pool's list once the
// informer has synced, and again after every pod event.
func (k *Source) Run(ctx context.Context, set func([]discovery.Endpoint)) {
	f := informers.NewSharedInformerFactoryWithOptions(k.client, time.Duration(k.s.ResyncMS)*time.Millisecond,
		informers.WithNamespace(k.s.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k.selector.String() }))
	pods := f.Core().V1().Pods()
	inf := pods.Informer()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, n any) { poke(n) },
	}); err != nil {
		k.log.Error("kubernetes informer", "err", err.Error())
		return
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	lister := pods.Lister()
	for {
		list, err := lister.Pods(k.s.Namespace).List(k.selector)
		if err == nil {
			set(k.endpoints(list))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// endpoints are the pool's endpoints among pods, sorted by name.
func (k *Source) endpoints(pods []*corev1.Pod) []discovery.Endpoint {
	var out []discovery.Endpoint
	for _, p := range pods {
		role := p.Labels[k.s.RoleLabel]
		if role != k.pool && role != "both" {
			continue
		}
		if !ready(p) {
			continue
		}
		e, err := k.endpoint(p, role == "both")
		if err != nil {
			k.log.Warn("pod left out", "pod", p.Name, "err", err.Error())
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b discovery.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ready: has an IP, is not being deleted, and its Ready condition is True.
func ready(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (k *Source) endpoint(p *corev1.Pod, both bool) (discovery.Endpoint, error) {
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return discovery.Endpoint{}, fmt.Errorf("pod IP %q: %v", p.Status.PodIP, err)
	}
	setting := func(name string) string {
		if v, ok := p.Annotations[name]; ok {
			return v
		}
		return p.Labels[name]
	}
	port, err := portSetting(setting(AnnotationPort), k.s.Port)
	if err != nil || port == 0 {
		return discovery.Endpoint{}, fmt.Errorf("%s: %v (and the source has no port)", AnnotationPort, err)
	}
	name := p.Name
	if both {
		name += "." + k.pool
	}
	e := discovery.Endpoint{Name: discovery.SafeName(name), Address: netip.AddrPortFrom(ip, uint16(port)).String()}
	// A pod in both pools carries the settings of both roles; each pool
	// takes its own (the filter refuses a bootstrap port on a decoder and a
	// KV receiver on a prefiller).
	if k.pool == "prefill" {
		if e.BootstrapPort, err = portSetting(setting(AnnotationBootstrapPort), 0); err != nil {
			return e, fmt.Errorf("%s: %v", AnnotationBootstrapPort, err)
		}
	}
	if e.MetricsPort, err = portSetting(setting(AnnotationMetricsPort), 0); err != nil {
		return e, fmt.Errorf("%s: %v", AnnotationMetricsPort, err)
	}
	init, alloc := setting(AnnotationKVInitPorts), setting(AnnotationKVAllocPorts)
	if k.pool == "decode" && (init != "" || alloc != "") {
		r := &discovery.KVReceiver{Host: setting(AnnotationKVReceiverHost)}
		if r.InitPorts, err = ports(init); err != nil {
			return e, fmt.Errorf("%s: %v", AnnotationKVInitPorts, err)
		}
		if r.AllocPorts, err = ports(alloc); err != nil {
			return e, fmt.Errorf("%s: %v", AnnotationKVAllocPorts, err)
		}
		if len(r.InitPorts) != len(r.AllocPorts) {
			return e, fmt.Errorf("%d init ports but %d alloc ports", len(r.InitPorts), len(r.AllocPorts))
		}
		e.KVReceiver = r
	}
	return e, nil
}

func portSetting(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port", v)
	}
	return n, nil
}

func ports(v string) ([]int, error) {
	if strings.TrimSpace(v) == "" {
		return nil, errors.New("is required with the other kv port list")
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := portSetting(f, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
