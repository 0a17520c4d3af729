package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdroute/pdroute/e2e/envoy/oci"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	wasmPath := filepath.Join(dir, "pdroute.wasm")
	wasm := append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte{7}, 1000)...)
	if err := os.WriteFile(wasmPath, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := oci.Build(wasm, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	out, tarPath := filepath.Join(dir, "oci"), filepath.Join(dir, "pdroute-oci.tar")
	var stdout bytes.Buffer
	if err := run(&stdout, wasmPath, out, tarPath, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"manifest digest: " + img.Manifest.Digest + "\n",
		"module sha256:   " + img.WasmSHA256 + "\n",
		"skopeo copy oci:" + out + ":v0.1.0 docker://",
		"skopeo copy oci-archive:" + tarPath + ":v0.1.0 docker://",
		"http_uri.uri: oci://REGISTRY/pdroute/pdroute-wasm@" + img.Manifest.Digest,
		"code.image.sha256: " + img.Manifest.Digest[len("sha256:"):],
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := oci.TarLayout(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := oci.Extract(l, "v0.1.0"); err != nil || !bytes.Equal(got, wasm) {
		t.Errorf("archive reads back %d bytes, %v", len(got), err)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "x.wasm")
	os.WriteFile(notWasm, []byte("text"), 0o644)
	tests := []struct{ name, wasm, out, tar, want string }{
		{"no output", notWasm, "", "", "give -out and/or -tar"},
		{"missing module", filepath.Join(dir, "nope.wasm"), filepath.Join(dir, "o"), "", "no such file"},
		{"not wasm", notWasm, filepath.Join(dir, "o"), "", "not a wasm module"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(&bytes.Buffer{}, tt.wasm, tt.out, tt.tar, "v1")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
