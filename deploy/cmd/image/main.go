// Command image builds holdfast's container images without a Docker engine
// (make image): from the static binaries in -bin, it writes
// <out>/holdfast-<name>.tar for docker load or podman load and
// <out>/holdfast-<name>.oci, an OCI image layout to push from, and prints
// each image's tag, ID (its config's digest, which docker images shows) and
// manifest digest. See docs/images.md.
//
//	image [-bin bin/static] [-out bin] [-ca-certs /etc/ssl/certs/ca-certificates.crt]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/holdfast/holdfast/deploy/image"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	bin := fs.String("bin", "bin/static", "directory of the static binaries api and worker")
	out := fs.String("out", "bin", "directory the images are written to")
	certs := fs.String("ca-certs", image.DefaultCACerts, "CA bundle the images carry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, s := range image.Specs {
		if err := build(s, *bin, *out, *certs, stdout); err != nil {
			return err
		}
	}
	return nil
}

func build(s image.Spec, bin, out, certs string, stdout io.Writer) error {
	img, b, err := image.New(s, filepath.Join(bin, s.Name), certs)
	if err != nil {
		return err
	}
	tag, err := image.Tag(s, b)
	if err != nil {
		return err
	}
	tarPath, layoutPath := filepath.Join(out, s.Binary()+".tar"), filepath.Join(out, s.Binary()+".oci")
	if err := image.WriteTarball(tarPath, tag, img); err != nil {
		return err
	}
	if err := image.WriteLayout(layoutPath, tag, img); err != nil {
		return err
	}
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s  %s and %s\n  ID %s\n  manifest (OCI) %s\n", tag, tarPath, layoutPath, id, digest)
	return err
}
