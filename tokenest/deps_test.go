package tokenest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestImports checks the import graph the wasm filter links: the standard
// library and tokenest's own packages only, so no tokenizer vocabulary
// (tiktoken) and no proxy-wasm package can slip in, for the native and the
// wasip1 build.
func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	for _, env := range [][]string{nil, {"GOOS=wasip1", "GOARCH=wasm"}} {
		cmd := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", env, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if pkg != "github.com/pdroute/pdroute/tokenest" && !strings.HasPrefix(pkg, "github.com/pdroute/pdroute/tokenest/internal/") {
				t.Errorf("%v: tokenest depends on %s", env, pkg)
			}
			if strings.HasPrefix(pkg, "github.com/pdroute/pdroute/tokenest/internal/calib") {
				t.Errorf("%v: tokenest depends on the calibration package %s", env, pkg)
			}
		}
	}
}
