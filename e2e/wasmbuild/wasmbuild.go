// Package wasmbuild builds a Go package of this module into a proxy-wasm
// module (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared -trimpath), the way the
// Makefile builds build/pdroute.wasm, and caches the result by content so a
// test run builds each plugin at most once.
//
// The cache key hashes the toolchain, go.mod and go.sum, and the
// name and content of every source and embedded file of every package of this
// module the target imports (dependencies from other modules are pinned by
// go.sum).
// Modules are written to build/testplugins/ at the module root, a directory
// make clean removes; PDROUTE_WASM_CACHE overrides it.
//
// Every build runs the pinned toolchain, Toolchain (the Makefile's
// GOTOOLCHAIN): the go command found on PATH (or the running toolchain's)
// only has to be Go 1.21 or later, which fetches the pinned one from the
// module proxy. Modules built here are thus built as build/pdroute.wasm is,
// whatever go a developer has installed, and whether or not the caller was
// built with -trimpath (which leaves runtime.GOROOT empty).
//
// It is test and tooling code: it runs the go command and imports nothing of
// the project.
package wasmbuild

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// entry is one package's build in this process.
type entry struct {
	once sync.Once
	path string
	err  error
}

// Toolchain is the Go toolchain every module is built with; the Makefile's
// `export GOTOOLCHAIN` names the same one (a test checks).
const Toolchain = "go1.24.11"

// toolchainEnv is the environment of every go command run here: the pinned
// toolchain, whatever GOTOOLCHAIN the caller's environment holds.
func toolchainEnv(extra ...string) []string {
	return append(append(os.Environ(), "GOTOOLCHAIN="+Toolchain), extra...)
}

var (
	mu    sync.Mutex
	built = map[string]*entry{}
)

// Build builds pkg, an import path or a path relative to the module root such
// as "./filter", and returns the path of the .wasm file. Calls for the same
// package in one process share one build; an unchanged package is not rebuilt
// across processes either.
func Build(pkg string) (string, error) {
	mu.Lock()
	e := built[pkg]
	if e == nil {
		e = &entry{}
		built[pkg] = e
	}
	mu.Unlock()
	e.once.Do(func() { e.path, e.err = build(pkg) })
	return e.path, e.err
}

// ForTest is Build for tests: it fails t on error and skips when no go
// command can be found.
func ForTest(t testing.TB, pkg string) string {
	t.Helper()
	if _, err := goCommand(); err != nil {
		t.Skipf("wasmbuild: %v", err)
	}
	p, err := Build(pkg)
	if err != nil {
		t.Fatalf("wasmbuild %s: %v", pkg, err)
	}
	return p
}

// goCommand finds a go command to start the pinned toolchain with: the one
// on PATH, as make uses, else the running toolchain's (runtime.GOROOT is
// empty in binaries built with -trimpath). Which one does not matter: with
// GOTOOLCHAIN=Toolchain any Go >= 1.21 runs Toolchain; checkToolchain
// rejects older ones.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	//lint:ignore SA1019 see above
	if root := runtime.GOROOT(); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p, nil
		}
	}
	return "", errors.New("no go command on PATH (Go >= 1.21 is needed to run " + Toolchain + ")")
}

// checkToolchain makes sure goCmd runs Toolchain under toolchainEnv: a go
// command older than 1.21 ignores GOTOOLCHAIN and would build with itself.
func checkToolchain(goCmd string) error {
	cmd := exec.Command(goCmd, "env", "GOVERSION")
	cmd.Env = toolchainEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s env GOVERSION with GOTOOLCHAIN=%s: %v\n%s", goCmd, Toolchain, err, stderr.String())
	}
	if v := strings.TrimSpace(string(b)); v != Toolchain {
		return fmt.Errorf("%s runs %s, not %s: Go >= 1.21 is needed to switch to the pinned toolchain", goCmd, v, Toolchain)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func build(pkg string) (string, error) {
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	return buildWith(goCmd, pkg)
}

// buildWith is build starting the pinned toolchain from goCmd.
func buildWith(goCmd, pkg string) (string, error) {
	if err := checkToolchain(goCmd); err != nil {
		return "", err
	}
	root, err := moduleRoot(goCmd)
	if err != nil {
		return "", err
	}
	key, err := cacheKey(goCmd, root, pkg)
	if err != nil {
		return "", err
	}
	dir := os.Getenv("PDROUTE_WASM_CACHE")
	if dir == "" {
		dir = filepath.Join(root, "build", "testplugins")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := strings.NewReplacer("/", "_", ".", "_").Replace(strings.Trim(path.Clean(pkg), "./"))
	out := filepath.Join(dir, fmt.Sprintf("%s-%s.wasm", name, key[:16]))
	if fileExists(out) {
		return out, nil
	}
	tmp, err := os.CreateTemp(dir, name+"-*.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command(goCmd, "build", "-buildmode=c-shared", "-trimpath", "-o", tmp.Name(), pkg)
	cmd.Dir = root
	cmd.Env = toolchainEnv("GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	// Rename is atomic: concurrent test binaries building the same key agree.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

func moduleRoot(goCmd string) (string, error) {
	cmd := exec.Command(goCmd, "env", "GOMOD")
	cmd.Env = toolchainEnv()
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// cacheKey hashes everything a rebuild of pkg could depend on inside the
// module.
func cacheKey(goCmd, root, pkg string) (string, error) {
	cmd := exec.Command(goCmd, "list", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .GoFiles ","}}{{"\t"}}{{join .EmbedFiles ","}}{{end}}{{end}}`,
		pkg)
	cmd.Dir = root
	cmd.Env = toolchainEnv("GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %v\n%s", pkg, err, stderr.String())
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", Toolchain, pkg)
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, filepath.Join(root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Split(line, "\t")
		if len(fields) != 4 {
			continue
		}
		fmt.Fprintf(h, "pkg %s\n", fields[0])
		for _, list := range fields[2:] {
			for _, f := range strings.Split(list, ",") {
				if f == "" {
					continue
				}
				fmt.Fprintf(h, "file %s\n", f)
				if err := hashFile(h, filepath.Join(fields[1], f)); err != nil {
					return "", err
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(h io.Writer, p string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%d\n", len(b))
	_, err = h.Write(b)
	return err
}
