package wasmbuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writePkg creates a throw-away main package under testdata (inside the
// module, so go list sees it) and removes it when the test ends.
func writePkg(t *testing.T, src string) string {
	t.Helper()
	if _, err := os.Stat("testdata"); os.IsNotExist(err) {
		if err := os.Mkdir("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("testdata") })
	}
	dir, err := os.MkdirTemp("testdata", "pkg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return "./e2e/wasmbuild/" + filepath.ToSlash(dir)
}

func TestCacheKeyFollowsContent(t *testing.T) {
	goCmd, err := goCommand()
	if err != nil {
		t.Skip(err)
	}
	root, err := moduleRoot(goCmd)
	if err != nil {
		t.Fatal(err)
	}
	pkg := writePkg(t, "package main\n\nfunc main() {}\n")
	k1, err := cacheKey(goCmd, root, pkg)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := cacheKey(goCmd, root, pkg)
	if k1 != k2 {
		t.Fatal("the key is not stable")
	}
	dir := filepath.Join(root, strings.TrimPrefix(pkg, "./"))
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println() }\n"), 0o644)
	k3, _ := cacheKey(goCmd, root, pkg)
	if k3 == k1 {
		t.Error("editing the package's own file did not change the key")
	}
	os.WriteFile(filepath.Join(dir, "extra.go"), []byte("package main\n"), 0o644)
	k4, _ := cacheKey(goCmd, root, pkg)
	if k4 == k3 {
		t.Error("adding a file did not change the key")
	}
	os.WriteFile(filepath.Join(dir, "extra_test.go"), []byte("package main\n"), 0o644)
	if k5, _ := cacheKey(goCmd, root, pkg); k5 != k4 {
		t.Error("a test file changed the key of the wasm build")
	}
}

func TestBuildCaches(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("PDROUTE_WASM_CACHE", cache)
	pkg := writePkg(t, "package main\n\n//go:wasmexport ping\nfunc ping() int32 { return 7 }\n\nfunc main() {}\n")
	p1 := ForTest(t, pkg)
	b, err := os.ReadFile(p1)
	if err != nil || !strings.HasPrefix(string(b), "\x00asm") {
		t.Fatalf("not a wasm module: %v", err)
	}
	if filepath.Dir(p1) != cache || !strings.HasPrefix(filepath.Base(p1), "e2e_wasmbuild_testdata_pkg") {
		t.Errorf("built at %s", p1)
	}
	info, _ := os.Stat(p1)
	p2, err := build(pkg) // a second process would take this path: no rebuild
	if err != nil || p2 != p1 {
		t.Fatalf("rebuild: %s %v", p2, err)
	}
	if info2, _ := os.Stat(p2); !info2.ModTime().Equal(info.ModTime()) {
		t.Error("an unchanged package was rebuilt")
	}
	if _, err := Build("./e2e/wasmbuild/testdata/does-not-exist"); err == nil {
		t.Error("building a missing package succeeded")
	}
}

// oldGo is a go command older than the pinned toolchain, for the tests that
// prove the pin holds whatever go comes first on PATH: PDROUTE_OLD_GO, else
// Go 1.22's toolchain module if the module cache has it (.ci/run fetches it
// with GOTOOLCHAIN=go1.22.12 go version).
func oldGo(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PDROUTE_OLD_GO"); p != "" {
		return p
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skip("no go command")
	}
	dirs, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "golang.org", "toolchain@v0.0.1-go1.22.*", "bin", "go"))
	if len(dirs) == 0 {
		t.Skip("no Go 1.22 toolchain in the module cache (GOTOOLCHAIN=go1.22.12 go version fetches one) and no PDROUTE_OLD_GO")
	}
	return dirs[0]
}

// An older go command (here 1.22, which cannot build this module itself)
// still builds with the pinned toolchain: issue 31's make demo failed with
// "go.mod requires go >= 1.24 (running go 1.22.12; GOTOOLCHAIN=local)".
func TestBuildWithOlderGo(t *testing.T) {
	old := oldGo(t)
	t.Setenv("PDROUTE_WASM_CACHE", t.TempDir())
	t.Setenv("GOTOOLCHAIN", "local") // what the caller's environment holds must not matter
	pkg := writePkg(t, "package main\n\nfunc main() {}\n")
	p, err := buildWith(old, pkg)
	if err != nil {
		t.Fatal(err)
	}
	// go version cannot read a wasm module's build info; runtime.Version's
	// string is in its data all the same
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(Toolchain)) {
		t.Errorf("%s does not hold %q: not built by the pinned toolchain", p, Toolchain)
	}
}

func TestGoOlderThan121IsRefused(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "go")
	// a go command that ignores GOTOOLCHAIN, as Go 1.19 does
	os.WriteFile(fake, []byte("#!/bin/sh\necho go1.19.8\n"), 0o755)
	err := checkToolchain(fake)
	if err == nil || !strings.Contains(err.Error(), "Go >= 1.21") {
		t.Errorf("got %v", err)
	}
}

// The Makefile pins the same toolchain as this package.
func TestMakefilePinsToolchain(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "export GOTOOLCHAIN := " + Toolchain + "\n"; !strings.Contains(string(b), want) {
		t.Errorf("the Makefile does not say %q", want)
	}
}
