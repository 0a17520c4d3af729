// Command wasm-oci packages build/pdroute.wasm as an OCI image that Istio and Envoy
// Gateway pull, without a container daemon:
//
//	wasm-oci -wasm build/pdroute.wasm -out build/oci [-tar build/pdroute-oci.tar] [-tag v0.1.0]
//
// It writes an OCI image layout directory (-out) and/or the same layout as a tar archive
// (-tar), reads the result back the way the pullers do to check it, and prints the
// digests to put in manifests and the commands that push the image. See package
// github.com/pdroute/pdroute/e2e/envoy/oci for the image format.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/pdroute/pdroute/e2e/envoy/oci"
)

func main() {
	wasmPath := flag.String("wasm", "build/pdroute.wasm", "the Wasm module")
	out := flag.String("out", "", "write an OCI image layout directory here")
	tarPath := flag.String("tar", "", "write the layout as a tar archive here")
	tag := flag.String("tag", "latest", "tag (ref name) of the image in the layout; use a version: Istio re-pulls :latest on every change")
	flag.Parse()
	if err := run(os.Stdout, *wasmPath, *out, *tarPath, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "wasm-oci:", err)
		os.Exit(1)
	}
}

func run(stdout io.Writer, wasmPath, out, tarPath, tag string) error {
	if out == "" && tarPath == "" {
		return fmt.Errorf("nothing to write: give -out and/or -tar")
	}
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		return err
	}
	img, err := oci.Build(wasm, tag)
	if err != nil {
		return fmt.Errorf("%s: %w", wasmPath, err)
	}
	var layouts []oci.Layout
	if out != "" {
		if err := img.WriteDir(out); err != nil {
			return err
		}
		layouts = append(layouts, oci.DirLayout(out))
	}
	if tarPath != "" {
		var buf bytes.Buffer
		if err := img.WriteTar(&buf); err != nil {
			return err
		}
		if err := os.WriteFile(tarPath, buf.Bytes(), 0o644); err != nil {
			return err
		}
		l, err := oci.TarLayout(bytes.NewReader(buf.Bytes()))
		if err != nil {
			return err
		}
		layouts = append(layouts, l)
	}
	for _, l := range layouts {
		got, digest, err := oci.Extract(l, tag)
		if err != nil {
			return fmt.Errorf("written image does not read back: %w", err)
		}
		if !bytes.Equal(got, wasm) || digest != img.Manifest.Digest {
			return fmt.Errorf("written image reads back a different module or manifest")
		}
	}
	printUsage(stdout, img, out, tarPath, tag)
	return nil
}

func printUsage(w io.Writer, img *oci.Image, out, tarPath, tag string) {
	manifestHex := img.Manifest.Digest[len("sha256:"):]
	fmt.Fprintf(w, "manifest digest: %s\n", img.Manifest.Digest)
	fmt.Fprintf(w, "module sha256:   %s\n", img.WasmSHA256)
	if out != "" {
		fmt.Fprintf(w, "wrote %s (OCI image layout, tag %s)\n", out, tag)
	}
	if tarPath != "" {
		fmt.Fprintf(w, "wrote %s (OCI layout archive, tag %s)\n", tarPath, tag)
	}
	const repo = "REGISTRY/pdroute/pdroute-wasm"
	fmt.Fprintf(w, "\npush the image manifest (not an index) with one of:\n")
	if out != "" {
		fmt.Fprintf(w, "  oras cp --from-oci-layout %s:%s %s:%s\n", out, tag, repo, tag)
		fmt.Fprintf(w, "  skopeo copy oci:%s:%s docker://%s:%s\n", out, tag, repo, tag)
		fmt.Fprintf(w, "  crane push %s %s:%s\n", out, repo, tag)
	}
	if tarPath != "" {
		fmt.Fprintf(w, "  skopeo copy oci-archive:%s:%s docker://%s:%s\n", tarPath, tag, repo, tag)
	}
	fmt.Fprintf(w, "\nthen pin it by digest:\n")
	fmt.Fprintf(w, "  Istio (filter-*.yaml): http_uri.uri: oci://%s@%s   (or keep the tag and set remote.sha256: %s)\n", repo, img.Manifest.Digest, manifestHex)
	fmt.Fprintf(w, "  Envoy Gateway (Image): code.image.url: %s:%s, code.image.sha256: %s\n", repo, tag, manifestHex)
	fmt.Fprintf(w, "  Envoy Gateway (HTTP) and Envoy remote code: sha256: %s\n", img.WasmSHA256)
}
