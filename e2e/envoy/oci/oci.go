// Package oci packages a Wasm module as an OCI image that Istio's agent (an oci:// module
// URL, e2e/envoy/istio/filter-*.yaml) and Envoy Gateway (EnvoyExtensionPolicy code type
// Image) can pull, without a container daemon: it writes an OCI image layout (a directory,
// or the same as a tar archive) that oras, skopeo or crane then push to any registry.
//
// The image is the "compat" variant of the Wasm image spec that both pullers accept
// (istio pkg/wasm/imagefetcher.go and envoyproxy/gateway internal/wasm/imagefetcher.go
// share one extraction logic):
//
//	manifest  application/vnd.oci.image.manifest.v1+json
//	config    application/vnd.oci.image.config.v1+json   (a minimal image config)
//	layer     application/vnd.oci.image.layer.v1.tar+gzip (a tar holding plugin.wasm)
//
// Both take the last layer, require exactly that media type, and return the first tar
// entry whose base name is plugin.wasm. The other variant they read, the "oci" artifact
// variant (layer application/vnd.module.wasm.content.layer.v1+wasm), must have exactly two
// layers, so a single raw-.wasm layer is rejected by both; see RATIONALE.md (deployment artefacts).
//
// Output is deterministic: the same module and tag give the same bytes and digests (no
// timestamps, fixed tar header, fixed gzip header). The package is native tooling and must
// not be imported by the wasm module.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Media types and names of the image, as the pullers expect them.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// MediaTypeDockerManifest and MediaTypeDockerLayer are the Docker schema 2 types a
	// `docker build` image has; Extract accepts them as the pullers do.
	MediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	MediaTypeDockerLayer    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	// MediaTypeWasmLayer is the raw-module layer of the "oci" artifact variant.
	MediaTypeWasmLayer = "application/vnd.module.wasm.content.layer.v1+wasm"
	// WasmFileName is the file the pullers look for in the layer.
	WasmFileName = "plugin.wasm"
	// RefNameAnnotation tags a manifest in index.json (skopeo's oci:DIR:TAG, oras's DIR:TAG).
	RefNameAnnotation = "org.opencontainers.image.ref.name"
)

// MaxWasmBytes bounds what Extract reads: 256 MiB, the cap both pullers apply.
const MaxWasmBytes = 256 << 20

// Descriptor points at a blob (OCI image-spec descriptor).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (the layout's index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []Descriptor `json:"manifests"`
}

// imageConfig is the minimal image config: registries and tools expect a valid one, the
// pullers ignore it. diff_ids name the uncompressed layer, as the image spec requires.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// Image is a built image: its blobs by digest and the layout's index.json.
type Image struct {
	// Manifest describes the image manifest; its Digest is what a registry reports, what
	// the sha256 of Istio's remote module source and Envoy Gateway's code.image.sha256 must
	// equal, and what an oci://...@sha256: URL names.
	Manifest Descriptor
	// WasmSHA256 is the hex sha256 of the module itself: what Envoy verifies, and what
	// Envoy Gateway's code.http.sha256 must equal for the HTTP code source.
	WasmSHA256 string
	index      []byte
	blobs      map[string][]byte // digest → content
}

// Build packages wasm as an image tagged tag (the index.json ref name; empty means
// "latest"). It fails on an empty module or one without the wasm magic number.
func Build(wasm []byte, tag string) (*Image, error) {
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return nil, errors.New("oci: not a wasm module (no \\0asm magic)")
	}
	if tag == "" {
		tag = "latest"
	}
	img := &Image{blobs: map[string][]byte{}}
	sum := sha256.Sum256(wasm)
	img.WasmSHA256 = hex.EncodeToString(sum[:])

	layerTar, err := tarFile(WasmFileName, wasm)
	if err != nil {
		return nil, err
	}
	layer, err := gzipBytes(layerTar)
	if err != nil {
		return nil, err
	}
	var cfg imageConfig
	cfg.Architecture, cfg.OS = "wasm", "wasip1"
	cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{digestOf(layerTar)}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	man := Manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        img.add(MediaTypeConfig, cfgJSON),
		Layers:        []Descriptor{img.add(MediaTypeLayer, layer)},
	}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return nil, err
	}
	img.Manifest = img.add(MediaTypeManifest, manJSON)
	tagged := img.Manifest
	tagged.Annotations = map[string]string{RefNameAnnotation: tag}
	img.index, err = json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{tagged}})
	return img, err
}

func (img *Image) add(mediaType string, b []byte) Descriptor {
	d := Descriptor{MediaType: mediaType, Digest: digestOf(b), Size: int64(len(b))}
	img.blobs[d.Digest] = b
	return d
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// epoch is the fixed modification time of every archive entry (reproducible builds use
// 1970-01-01 as well).
var epoch = time.Unix(0, 0).UTC()

// tarFile is a one-entry tar archive with a fixed header.
func tarFile(name string, content []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content)),
		ModTime: epoch, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses with a header that has no name and no time, so equal input gives
// equal output (for a given Go release: compress/flate's output is not promised across
// releases; the module itself changes with the toolchain anyway).
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// files lists the layout's files, path → content, blobs in digest order.
func (img *Image) files() (names []string, content map[string][]byte) {
	content = map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": img.index,
	}
	names = []string{"oci-layout", "index.json"}
	var digests []string
	for d := range img.blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		name := "blobs/sha256/" + d[len("sha256:"):]
		names = append(names, name)
		content[name] = img.blobs[d]
	}
	return names, content
}

// WriteDir writes the image as an OCI image layout directory. An existing layout at dir
// (a directory holding an oci-layout file) is replaced; any other non-empty directory is
// refused, so a mistyped path never loses files.
func (img *Image) WriteDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("oci: %s is not empty and not an OCI layout; refusing to write into it", dir)
		}
		if err := os.RemoveAll(filepath.Join(dir, "blobs")); err != nil {
			return err
		}
	}
	names, content := img.files()
	for _, name := range names {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, content[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteTar writes the same layout as a tar archive (skopeo's oci-archive: format), with
// fixed headers so equal images give equal archives.
func (img *Image) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	names, content := img.files()
	dirs := []string{"blobs/", "blobs/sha256/"}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
	}
	for _, name := range names {
		b := content[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return tw.Close()
}
