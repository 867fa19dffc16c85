package image

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteTarball writes img, named tag, to path in the format of docker save,
// which docker load and podman load read. The format has no manifest: a
// load or push from it makes one of Docker's media types. It is written to
// a temporary file renamed at the end, so a failed build leaves no half
// tarball.
func WriteTarball(path string, tag name.Tag, img v1.Image) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return fmt.Errorf("image: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("image: %s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// WriteLayout writes img to an OCI image layout at dir, replacing what was
// there, with the tag's tag as its org.opencontainers.image.ref.name. The
// layout keeps the image's OCI manifest: pushed from it (crane push, skopeo
// copy oci:…), the image keeps the digest make image prints.
func WriteLayout(dir string, tag name.Tag, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: %s: %w", dir, err)
	}
	ref := map[string]string{"org.opencontainers.image.ref.name": tag.TagStr()}
	if err := p.AppendImage(img, layout.WithAnnotations(ref)); err != nil {
		return fmt.Errorf("image: %s: %w", dir, err)
	}
	return nil
}
