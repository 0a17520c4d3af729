package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// module is a small valid-looking wasm module: the magic, version 1, and padding that
// makes compression matter.
func module(n int) []byte {
	return append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte("pdroute "), n)...)
}

func mustBuild(t *testing.T, wasm []byte, tag string) *Image {
	t.Helper()
	img, err := Build(wasm, tag)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestLayoutIsValid walks index → manifest → config and layer in a written directory and
// checks media types, digests, sizes and contents.
func TestLayoutIsValid(t *testing.T) {
	wasm := module(1000)
	img := mustBuild(t, wasm, "v0.1.0")
	dir := filepath.Join(t.TempDir(), "oci")
	if err := img.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	blob := func(d Descriptor, mediaType string) []byte {
		t.Helper()
		if d.MediaType != mediaType {
			t.Errorf("media type %q, want %q", d.MediaType, mediaType)
		}
		b := read("blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:"))
		if "sha256:"+sha(b) != d.Digest || int64(len(b)) != d.Size {
			t.Errorf("blob %s: digest/size mismatch (%d bytes, sha256:%s)", d.Digest, len(b), sha(b))
		}
		return b
	}
	if got := string(read("oci-layout")); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", got)
	}
	var idx Index
	if err := json.Unmarshal(read("index.json"), &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index = %+v", idx)
	}
	if got := idx.Manifests[0].Annotations[RefNameAnnotation]; got != "v0.1.0" {
		t.Errorf("ref name = %q", got)
	}
	if idx.Manifests[0].Digest != img.Manifest.Digest {
		t.Errorf("index names %s, Image.Manifest is %s", idx.Manifests[0].Digest, img.Manifest.Digest)
	}
	var man Manifest
	if err := json.Unmarshal(blob(idx.Manifests[0], MediaTypeManifest), &man); err != nil {
		t.Fatal(err)
	}
	if man.SchemaVersion != 2 || man.MediaType != MediaTypeManifest || len(man.Layers) != 1 {
		t.Fatalf("manifest = %+v", man)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(man.Config, MediaTypeConfig), &cfg); err != nil {
		t.Fatal(err)
	}
	layer := blob(man.Layers[0], MediaTypeLayer)
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has time %v name %q; want neither", zr.ModTime, zr.Name)
	}
	var layerTar bytes.Buffer
	if _, err := layerTar.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	if want := []string{"sha256:" + sha(layerTar.Bytes())}; cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != want[0] {
		t.Errorf("config rootfs = %+v, want diff_ids %v", cfg.RootFS, want)
	}
	tr := tar.NewReader(&layerTar)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != WasmFileName || h.Mode != 0o644 || h.Uid != 0 || h.ModTime.Unix() != 0 || h.Size != int64(len(wasm)) {
		t.Errorf("layer entry = %+v", h)
	}
	if _, err := tr.Next(); err == nil {
		t.Error("layer has more than one entry")
	}
	if img.WasmSHA256 != sha(wasm) {
		t.Errorf("WasmSHA256 = %s, want %s", img.WasmSHA256, sha(wasm))
	}
}

// TestDeterministic: the same module and tag give byte-identical layouts and archives;
// a different module or tag changes the manifest digest or index.
func TestDeterministic(t *testing.T) {
	a, b := mustBuild(t, module(300), "v1"), mustBuild(t, module(300), "v1")
	if a.Manifest.Digest != b.Manifest.Digest || a.Manifest.Size != b.Manifest.Size {
		t.Errorf("manifest descriptors differ: %+v vs %+v", a.Manifest, b.Manifest)
	}
	var ta, tb bytes.Buffer
	if err := a.WriteTar(&ta); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteTar(&tb); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta.Bytes(), tb.Bytes()) {
		t.Error("archives differ")
	}
	da, db := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if err := a.WriteDir(da); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteDir(db); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"oci-layout", "index.json", "blobs/sha256/" + a.Manifest.Digest[7:]} {
		x, _ := os.ReadFile(filepath.Join(da, name))
		y, _ := os.ReadFile(filepath.Join(db, name))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs or is empty", name)
		}
	}
	if c := mustBuild(t, module(301), "v1"); c.Manifest.Digest == a.Manifest.Digest {
		t.Error("a different module kept the manifest digest")
	}
	if d := mustBuild(t, module(300), "v2"); d.Manifest.Digest != a.Manifest.Digest || bytes.Equal(d.index, a.index) {
		t.Error("the tag must change index.json only")
	}
}

// TestExtractRoundTrip reads the written layout back with Istio's extraction rules, from
// the directory and from the archive.
func TestExtractRoundTrip(t *testing.T) {
	wasm := module(5000)
	img := mustBuild(t, wasm, "v0.1.0")
	dir := filepath.Join(t.TempDir(), "oci")
	if err := img.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := img.WriteTar(&archive); err != nil {
		t.Fatal(err)
	}
	tl, err := TarLayout(&archive)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]Layout{"dir": DirLayout(dir), "tar": tl} {
		for _, ref := range []string{"v0.1.0", ""} {
			got, digest, err := Extract(l, ref)
			if err != nil {
				t.Fatalf("%s %q: %v", name, ref, err)
			}
			if !bytes.Equal(got, wasm) || digest != img.Manifest.Digest {
				t.Errorf("%s %q: got %d bytes, digest %s", name, ref, len(got), digest)
			}
		}
		if _, _, err := Extract(l, "v9"); err == nil || !strings.Contains(err.Error(), `no manifest tagged "v9"`) {
			t.Errorf("%s: unknown tag: err = %v", name, err)
		}
	}
}

// layout builds a hand-made layout for the extraction rule tests.
type layout map[string][]byte

func (l layout) add(mediaType string, b []byte) Descriptor {
	d := Descriptor{MediaType: mediaType, Digest: "sha256:" + sha(b), Size: int64(len(b))}
	l["blobs/sha256/"+sha(b)] = b
	return d
}

func (l layout) read(name string) ([]byte, error) {
	b, ok := l[name]
	if !ok {
		return nil, os.ErrNotExist
	}
	return b, nil
}

func (l layout) withManifest(t *testing.T, manifestType string, layers ...Descriptor) Layout {
	t.Helper()
	m, _ := json.Marshal(Manifest{SchemaVersion: 2, MediaType: manifestType,
		Config: l.add(MediaTypeConfig, []byte("{}")), Layers: layers})
	d := l.add(manifestType, m)
	d.Annotations = map[string]string{RefNameAnnotation: "t"}
	l["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	l["index.json"], _ = json.Marshal(Index{SchemaVersion: 2, Manifests: []Descriptor{d}})
	return l.read
}

func tgz(t testing.TB, entries ...string) []byte {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for i := 0; i+1 < len(entries); i += 2 {
		if err := tw.WriteHeader(&tar.Header{Name: entries[i], Mode: 0o644, Size: int64(len(entries[i+1]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(entries[i+1]))
	}
	tw.Close()
	z, err := gzipBytes(tb.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// TestExtractRules covers the pullers' three image shapes and their failure modes.
func TestExtractRules(t *testing.T) {
	tests := []struct {
		name    string
		build   func(t *testing.T, l layout) Layout
		want    string // module content, or "" when an error is expected
		wantErr string
	}{
		{"compat: plugin.wasm in a subdirectory, last layer wins", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeManifest,
				l.add(MediaTypeLayer, tgz(t, "plugin.wasm", "old")),
				l.add(MediaTypeLayer, tgz(t, "etc/x", "y", "opt/plugin.wasm", "new")))
		}, "new", ""},
		{"compat: no plugin.wasm", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeManifest, l.add(MediaTypeLayer, tgz(t, "main.wasm", "x")))
		}, "", "plugin.wasm not found in the layer"},
		{"docker manifest with docker layer", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeDockerManifest, l.add(MediaTypeDockerLayer, tgz(t, "plugin.wasm", "dock")))
		}, "dock", ""},
		{"docker manifest with an OCI layer", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeDockerManifest, l.add(MediaTypeLayer, tgz(t, "plugin.wasm", "x")))
		}, "", "docker image: invalid layer media type"},
		{"oci variant: two layers, raw module", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeManifest,
				l.add("application/vnd.module.wasm.content.layer.v1+tar", []byte("t")),
				l.add(MediaTypeWasmLayer, []byte("raw")))
		}, "raw", ""},
		{"oci variant with one layer is rejected", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeManifest, l.add(MediaTypeWasmLayer, []byte("raw")))
		}, "", "oci variant needs 2 layers, got 1"},
		{"no layers", func(t *testing.T, l layout) Layout {
			return l.withManifest(t, MediaTypeManifest)
		}, "", "number of layers must be greater than zero"},
		{"blob altered after writing", func(t *testing.T, l layout) Layout {
			d := l.add(MediaTypeLayer, tgz(t, "plugin.wasm", "x"))
			r := l.withManifest(t, MediaTypeManifest, d)
			altered := bytes.Clone(l["blobs/sha256/"+d.Digest[7:]])
			altered[len(altered)-1] ^= 0xff // same size, different content
			l["blobs/sha256/"+d.Digest[7:]] = altered
			return r
		}, "", "does not match its digest"},
		{"index pointing at an index", func(t *testing.T, l layout) Layout {
			d := l.add(MediaTypeIndex, []byte(`{"schemaVersion":2,"manifests":[]}`))
			d.Annotations = map[string]string{RefNameAnnotation: "t"}
			l["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
			l["index.json"], _ = json.Marshal(Index{SchemaVersion: 2, Manifests: []Descriptor{d}})
			return l.read
		}, "", "names a application/vnd.oci.image.index.v1+json, not an image manifest"},
		{"not a layout", func(t *testing.T, l layout) Layout { return l.read }, "", "not an image layout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Extract(tt.build(t, layout{}), "t")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestBuildRejectsNonWasm(t *testing.T) {
	for _, in := range [][]byte{nil, []byte("MZ\x90\x00"), []byte("\x00as")} {
		if _, err := Build(in, "v1"); err == nil || !strings.Contains(err.Error(), "not a wasm module") {
			t.Errorf("Build(%q): err = %v", in, err)
		}
	}
}

func TestWriteDirRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := mustBuild(t, module(1), "v1").WriteDir(dir)
	if err == nil || !strings.Contains(err.Error(), "not empty and not an OCI layout") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "keep" {
		t.Error("foreign file changed")
	}
	// Rewriting a layout replaces its blobs: no stale blob of the old image stays.
	lay := filepath.Join(t.TempDir(), "oci")
	old := mustBuild(t, module(1), "v1")
	if err := old.WriteDir(lay); err != nil {
		t.Fatal(err)
	}
	if err := mustBuild(t, module(2), "v1").WriteDir(lay); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(lay, "blobs/sha256", old.Manifest.Digest[7:])); !os.IsNotExist(err) {
		t.Errorf("old manifest blob still there: %v", err)
	}
}

// FuzzExtract feeds arbitrary layer bytes and layout files to the reader, which parses
// registry content: it must return an error or a module, never panic or over-allocate.
func FuzzExtract(f *testing.F) {
	img, _ := Build(module(10), "t")
	var archive bytes.Buffer
	img.WriteTar(&archive)
	f.Add(archive.Bytes(), []byte(nil))
	f.Add([]byte(nil), tgz(f, "plugin.wasm", "x"))
	f.Add([]byte("not a tar"), []byte("\x1f\x8bnot gzip"))
	f.Fuzz(func(t *testing.T, archiveBytes, layerBytes []byte) {
		if l, err := TarLayout(bytes.NewReader(archiveBytes)); err == nil {
			Extract(l, "")
		}
		l := layout{}
		Extract(l.withManifest(t, MediaTypeManifest, l.add(MediaTypeLayer, layerBytes)), "t")
	})
}

// BenchmarkBuild packages a 3 MiB module (a pdroute build's size) of seeded random bytes:
// incompressible, so gzip's worst case.
func BenchmarkBuild(b *testing.B) {
	wasm := append([]byte("\x00asm\x01\x00\x00\x00"), make([]byte, 3<<20)...)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 8; i < len(wasm); i++ {
		wasm[i] = byte(r.Uint32())
	}
	b.SetBytes(int64(len(wasm)))
	for i := 0; i < b.N; i++ {
		if _, err := Build(wasm, "v1"); err != nil {
			b.Fatal(err)
		}
	}
}
