package kube

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pdroute/pdroute/hostcalls/discovery"
)

func pod(name, role, ip string, ready bool, ann map[string]string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Labels: map[string]string{"app": "vllm", DefaultRoleLabel: role}, Annotations: ann},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// lists collects what the sources deliver.
type lists struct {
	mu   sync.Mutex
	last [2]string
	eps  [2][]discovery.Endpoint
}

func (l *lists) set(i int) func([]discovery.Endpoint) {
	return func(eps []discovery.Endpoint) {
		var parts []string
		for _, e := range eps {
			parts = append(parts, e.Name+"@"+e.Address)
		}
		l.mu.Lock()
		l.last[i], l.eps[i] = strings.Join(parts, " "), eps
		l.mu.Unlock()
	}
}

func (l *lists) wait(t *testing.T, i int, want string) []discovery.Endpoint {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		got, eps := l.last[i], l.eps[i]
		l.mu.Unlock()
		if got == want {
			return eps
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("pool %d: %q, want %q", i, l.last[i], want)
	return nil
}

func TestPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewSimpleClientset(
		pod("p0", "prefill", "10.0.0.1", true, map[string]string{AnnotationBootstrapPort: "8998"}),
		pod("d0", "decode", "10.0.0.2", true, map[string]string{AnnotationKVInitPorts: "7300,7301", AnnotationKVAllocPorts: "7400,7401", AnnotationMetricsPort: "9090"}),
		pod("b0", "both", "10.0.0.3", true, map[string]string{AnnotationPort: "8100", AnnotationBootstrapPort: "8998",
			AnnotationKVInitPorts: "7300", AnnotationKVAllocPorts: "7400"}),
		pod("p-starting", "prefill", "10.0.0.4", false, nil),
		pod("p-bad", "prefill", "10.0.0.5", true, map[string]string{AnnotationBootstrapPort: "many"}),
		pod("other", "router", "10.0.0.6", true, nil),
	)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got lists
	for i, pool := range discovery.Pools {
		src, err := New(pool, Settings{Namespace: "llm", Selector: "app=vllm", Port: 8000}, client, log)
		if err != nil {
			t.Fatal(err)
		}
		go src.Run(ctx, got.set(i))
	}
	pre := got.wait(t, 0, "b0.prefill@10.0.0.3:8100 p0@10.0.0.1:8000")
	if pre[1].BootstrapPort != 8998 || pre[0].BootstrapPort != 8998 || pre[0].KVReceiver != nil {
		t.Errorf("prefill settings %+v", pre)
	}
	dec := got.wait(t, 1, "b0.decode@10.0.0.3:8100 d0@10.0.0.2:8000")
	if r := dec[1].KVReceiver; r == nil || len(r.InitPorts) != 2 || r.AllocPorts[1] != 7401 || dec[1].MetricsPort != 9090 {
		t.Errorf("d0 %+v", dec[1])
	}
	if dec[0].BootstrapPort != 0 || dec[0].KVReceiver == nil {
		t.Errorf("b0 as a decoder %+v", dec[0])
	}

	pods := client.CoreV1().Pods("llm")
	// p0 turns NotReady: out. p-starting becomes Ready: in.
	p0, _ := pods.Get(ctx, "p0", metav1.GetOptions{})
	p0.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := pods.UpdateStatus(ctx, p0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 0, "b0.prefill@10.0.0.3:8100")
	ps, _ := pods.Get(ctx, "p-starting", metav1.GetOptions{})
	ps.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := pods.UpdateStatus(ctx, ps, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 0, "b0.prefill@10.0.0.3:8100 p-starting@10.0.0.4:8000")
	// d0 is deleted; a new decoder is scheduled.
	if err := pods.Delete(ctx, "d0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("d1", "decode", "10.0.0.7", true, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 1, "b0.decode@10.0.0.3:8100 d1@10.0.0.7:8000")
}

func TestSettings(t *testing.T) {
	client := fake.NewSimpleClientset()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := New("decode", Settings{}, client, log); err == nil {
		t.Error("no selector accepted")
	}
	if _, err := New("decode", Settings{Selector: "app in (("}, client, log); err == nil {
		t.Error("bad selector accepted")
	}
	if _, err := discovery.ParseConfig([]byte(`{"prefill":{"kubernetes":{"selector":"a=b"}},"decode":{"kubernetes":{"selector":"a=b"}}}`)); err != nil {
		t.Errorf("kubernetes kind not registered: %v", err)
	}
	s, _ := New("decode", Settings{Selector: "a=b"}, client, log)
	if _, err := s.endpoint(pod("x", "decode", "10.0.0.1", true, nil), false); err == nil {
		t.Error("a pod without a port accepted")
	}
	if _, err := s.endpoint(pod("x", "decode", "10.0.0.1", true, map[string]string{AnnotationPort: "80", AnnotationKVInitPorts: "1,2", AnnotationKVAllocPorts: "3"}), false); err == nil {
		t.Error("mismatched kv ports accepted")
	}
}
