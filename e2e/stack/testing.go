package stack

import (
	"context"
	"testing"
)

// StartT starts a stack for a test and closes it at the test's end. When
// the test failed, the proxy's recent log lines are logged first.
func StartT(t testing.TB, topo Topology) *Stack {
	t.Helper()
	s, err := Start(context.Background(), topo)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy (%s) log, last lines:\n%s", s.ProxyName(), s.Logs())
		}
		if err := s.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
	})
	return s
}
