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
	"path"
	"path/filepath"
	"strings"
)

// Layout reads one file of an OCI image layout by its slash-separated path inside the
// layout ("index.json", "blobs/sha256/<hex>").
type Layout func(name string) ([]byte, error)

// DirLayout reads a layout directory.
func DirLayout(dir string) Layout {
	return func(name string) ([]byte, error) {
		if !fsPathOK(name) {
			return nil, fmt.Errorf("oci: bad path %q", name)
		}
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	}
}

// TarLayout reads a layout archive (what WriteTar and `skopeo copy ... oci-archive:`
// write), holding at most MaxWasmBytes in memory per file.
func TarLayout(r io.Reader) (Layout, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("oci: reading archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, MaxWasmBytes+1))
		if err != nil {
			return nil, fmt.Errorf("oci: reading %s: %w", h.Name, err)
		}
		if len(b) > MaxWasmBytes {
			return nil, fmt.Errorf("oci: %s is over %d bytes", h.Name, MaxWasmBytes)
		}
		files[path.Clean(strings.TrimPrefix(h.Name, "./"))] = b
	}
	return func(name string) ([]byte, error) {
		b, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("oci: %s: %w", name, os.ErrNotExist)
		}
		return b, nil
	}, nil
}

func fsPathOK(name string) bool {
	return name != "" && !path.IsAbs(name) && path.Clean(name) == name && !strings.HasPrefix(name, "..")
}

// blob reads a blob and checks it against its descriptor's digest and size.
func (l Layout) blob(d Descriptor) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexDigest) != 64 {
		return nil, fmt.Errorf("oci: unsupported digest %q", d.Digest)
	}
	if _, err := hex.DecodeString(hexDigest); err != nil {
		return nil, fmt.Errorf("oci: bad digest %q", d.Digest)
	}
	if d.Size < 0 || d.Size > MaxWasmBytes {
		return nil, fmt.Errorf("oci: blob %s size %d out of range", d.Digest, d.Size)
	}
	b, err := l("blobs/sha256/" + hexDigest)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("oci: blob %s has %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest {
		return nil, fmt.Errorf("oci: blob %s does not match its digest", d.Digest)
	}
	return b, nil
}

// Extract returns the module of the image tagged ref in the layout (ref "" takes the only
// image) and the manifest's digest, reading the image the way Istio and Envoy Gateway do
// after they pulled it. Every blob it reads is checked against its digest and size.
//
// The pullers' rules, in their order: a Docker schema 2 manifest must have a Docker
// tar+gzip last layer; otherwise a last layer of type OCI tar+gzip is the compat variant;
// otherwise exactly two layers, one of type application/vnd.module.wasm.content.layer.v1+wasm
// holding the raw module, are the oci variant. In a tar layer the module is the first
// entry whose base name is plugin.wasm.
func Extract(l Layout, ref string) (wasm []byte, manifestDigest string, err error) {
	layoutFile, err := l("oci-layout")
	if err != nil {
		return nil, "", fmt.Errorf("oci: not an image layout: %w", err)
	}
	var lay struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(layoutFile, &lay); err != nil || lay.Version != "1.0.0" {
		return nil, "", fmt.Errorf("oci: oci-layout: want imageLayoutVersion 1.0.0")
	}
	indexJSON, err := l("index.json")
	if err != nil {
		return nil, "", err
	}
	var idx Index
	if err := json.Unmarshal(indexJSON, &idx); err != nil {
		return nil, "", fmt.Errorf("oci: index.json: %w", err)
	}
	desc, err := pick(idx, ref)
	if err != nil {
		return nil, "", err
	}
	if desc.MediaType != MediaTypeManifest && desc.MediaType != MediaTypeDockerManifest {
		// An index here would be resolved by platform (linux/amd64) and fail: the tag must
		// name the image manifest itself.
		return nil, "", fmt.Errorf("oci: %s names a %s, not an image manifest", refName(ref), desc.MediaType)
	}
	manJSON, err := l.blob(desc)
	if err != nil {
		return nil, "", err
	}
	var man Manifest
	if err := json.Unmarshal(manJSON, &man); err != nil {
		return nil, "", fmt.Errorf("oci: manifest: %w", err)
	}
	wasm, err = extractModule(l, man)
	return wasm, desc.Digest, err
}

func refName(ref string) string {
	if ref == "" {
		return "the index"
	}
	return "tag " + ref
}

func pick(idx Index, ref string) (Descriptor, error) {
	if ref == "" {
		if len(idx.Manifests) != 1 {
			return Descriptor{}, fmt.Errorf("oci: index has %d manifests; name a tag", len(idx.Manifests))
		}
		return idx.Manifests[0], nil
	}
	for _, m := range idx.Manifests {
		if m.Annotations[RefNameAnnotation] == ref {
			return m, nil
		}
	}
	return Descriptor{}, fmt.Errorf("oci: no manifest tagged %q", ref)
}

func extractModule(l Layout, man Manifest) ([]byte, error) {
	if len(man.Layers) == 0 {
		return nil, errors.New("oci: number of layers must be greater than zero")
	}
	last := man.Layers[len(man.Layers)-1]
	if man.MediaType == MediaTypeDockerManifest {
		if last.MediaType != MediaTypeDockerLayer {
			return nil, fmt.Errorf("oci: docker image: invalid layer media type %s (expect %s)", last.MediaType, MediaTypeDockerLayer)
		}
		return layerModule(l, last)
	}
	if last.MediaType == MediaTypeLayer {
		return layerModule(l, last)
	}
	if len(man.Layers) != 2 {
		return nil, fmt.Errorf("oci: compat variant needs a last layer of type %s; oci variant needs 2 layers, got %d",
			MediaTypeLayer, len(man.Layers))
	}
	for _, d := range man.Layers {
		if d.MediaType == MediaTypeWasmLayer {
			return l.blob(d)
		}
	}
	return nil, fmt.Errorf("oci: could not find the layer of type %s", MediaTypeWasmLayer)
}

// layerModule finds plugin.wasm in a tar+gzip layer.
func layerModule(l Layout, d Descriptor) ([]byte, error) {
	b, err := l.blob(d)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("oci: layer is not gzip: %w", err)
	}
	tr := tar.NewReader(io.LimitReader(zr, MaxWasmBytes))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("oci: %s not found in the layer", WasmFileName)
		}
		if err != nil {
			return nil, fmt.Errorf("oci: layer tar: %w", err)
		}
		if path.Base(h.Name) != WasmFileName {
			continue
		}
		if h.Size < 0 || h.Size > MaxWasmBytes {
			return nil, fmt.Errorf("oci: %s size %d out of range", WasmFileName, h.Size)
		}
		wasm := make([]byte, h.Size)
		if _, err := io.ReadFull(tr, wasm); err != nil {
			return nil, fmt.Errorf("oci: reading %s: %w", WasmFileName, err)
		}
		return wasm, nil
	}
}
