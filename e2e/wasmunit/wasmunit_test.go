// Package wasmunit runs the unit tests of the packages that have code of
// their own for wasm (files built only for GOARCH=wasm) in wasm, under
// wazero, as the filter runs them: the native test run builds the other
// files and cannot see a fault in those.
package wasmunit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// wasmOnly are the packages with files built only for wasm (word_wasm.go:
// loads through a pointer instead of encoding/binary).
var wasmOnly = []string{"./tokenest/internal/jsonraw", "./lb/prefix"}

func TestPackagesInWasm(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the wasm test binaries")
	}
	if testing.Short() {
		t.Skip("-short: skipping wasm builds of unit tests")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(os.TempDir(), "pdroute-wasmunit-cache"))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close(ctx)
	for _, pkg := range wasmOnly {
		t.Run(filepath.Base(pkg), func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "pkg.test.wasm")
			build := exec.Command(goTool, "test", "-c", "-o", bin, pkg)
			build.Dir = root
			build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go test -c %s for wasip1: %v\n%s", pkg, err, out)
			}
			code, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
			defer r.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, r)
			dir := filepath.Join(root, pkg)
			var out bytes.Buffer
			// The test binary reads testdata relative to its package's
			// directory: the host's file system is mounted whole and PWD
			// names the directory, as go_wasip1_wasm_exec does.
			conf := wazero.NewModuleConfig().
				WithArgs("pkg.test", "-test.count=1").
				WithEnv("PWD", dir).
				WithFSConfig(wazero.NewFSConfig().WithDirMount("/", "/")).
				WithStdout(&out).WithStderr(&out).
				WithSysWalltime().WithSysNanotime().WithSysNanosleep()
			_, err = r.InstantiateWithConfig(ctx, code, conf)
			var exit *sys.ExitError
			if errors.As(err, &exit) && exit.ExitCode() == 0 {
				err = nil
			}
			if err != nil {
				t.Fatalf("%s in wasm: %v\n%s", pkg, err, out.String())
			}
			t.Logf("%s in wasm: %s", pkg, bytes.TrimSpace(out.Bytes()))
		})
	}
}
