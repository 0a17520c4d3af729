package envoyemu

import (
	"maps"
	"slices"
)

// SharedDataKeys lists the shared-data keys of vmID, sorted: what a leak check compares
// before and after (the fault matrix and the soak in e2e/scenarios).
func (h *Host) SharedDataKeys(vmID string) []string {
	d := &h.proc.shared
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.data[vmID]))
}
