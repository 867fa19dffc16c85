// Package image builds holdfast's container images in Go, with no Docker
// engine: one OCI image per binary, on an empty base, of a single layer
// holding the static binary, an /etc/passwd and /etc/group that name the
// non-root user it runs as, and the CA certificates that TLS to a managed
// Postgres or Redis needs. Everything in an image comes from the binary's
// build information and the files given, its times from the commit, so two
// builds of one commit are the same image, digest for digest. The layout is
// described in docs/images.md; the repository's Dockerfile makes the same.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is what one image has of its own.
type Spec struct {
	Name        string   // "api": binary holdfast-api, repository holdfast/api, built from ./cmd/api
	Description string   // the description label
	Ports       []string // exposed, "8080/tcp"
	Env         []string // KEY=value, after PATH
}

// Binary is the binary's name in the image and on the build machine.
func (s Spec) Binary() string { return "holdfast-" + s.Name }

// Entrypoint is the binary's path in the image.
func (s Spec) Entrypoint() string { return path.Join(BinDir, s.Binary()) }

// The two images. The binaries' listen addresses default to loopback, which
// nothing outside a container reaches: the images set them to every address.
// The API's /metrics (METRICS_ADDR) and Asynqmon (MONITORING_ADDR) move to
// ports of their own, off the public one, at the ports the Kubernetes
// manifests use.
var (
	API = Spec{
		Name:        "api",
		Description: "holdfast API: takes reservations (202 Accepted), serves reads, long polls and the pages",
		Ports:       []string{"8080/tcp", "8082/tcp", "8083/tcp"},
		Env:         []string{"HTTP_ADDR=:8080", "MONITORING_ADDR=:8082", "METRICS_ADDR=:8083"},
	}
	Worker = Spec{
		Name:        "worker",
		Description: "holdfast worker: applies accepted reservations per key, in batches",
		Ports:       []string{"8081/tcp"},
		Env:         []string{"WORKER_ADDR=:8081"},
	}
	Specs = []Spec{API, Worker}
)

// The layout both images share.
const (
	BinDir      = "/usr/local/bin"
	User        = "65532:65532" // nonroot, numeric so that runAsNonRoot can check it
	WorkingDir  = "/"
	PathEnv     = "PATH=" + BinDir
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// Passwd and Group name root and nonroot; nonroot has no home and no
	// shell (there is none).
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n"
	Group  = "root:x:0:\nnonroot:x:65532:\n"
)

// BuildFlags are the go build flags of the binaries an image packs, with
// CGO_ENABLED=0 in the environment (make image, the Dockerfile, the tests).
var BuildFlags = []string{"-trimpath", "-buildvcs=auto", "-tags", "timetzdata"}

// DefaultCACerts is the build machine's CA bundle, which the images copy.
const DefaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// Label keys (the OCI image annotations).
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelCreated     = "org.opencontainers.image.created"
)

// Labels are the image's OCI labels.
func Labels(s Spec, b Build) map[string]string {
	return map[string]string{
		LabelTitle:       s.Binary(),
		LabelDescription: s.Description,
		LabelVersion:     b.Version,
		LabelRevision:    b.Revision,
		LabelSource:      "https://" + b.Module,
		LabelCreated:     b.Time.UTC().Format(time.RFC3339),
	}
}

// Config is the image's run configuration.
func Config(s Spec, b Build) v1.Config {
	ports := map[string]struct{}{}
	for _, p := range s.Ports {
		ports[p] = struct{}{}
	}
	return v1.Config{
		User:         User,
		Entrypoint:   []string{s.Entrypoint()},
		WorkingDir:   WorkingDir,
		Env:          append([]string{PathEnv}, s.Env...),
		ExposedPorts: ports,
		Labels:       Labels(s, b),
	}
}

// New builds the image of spec from the binary at binary, copying the CA
// bundle at caCerts.
func New(s Spec, binary, caCerts string) (v1.Image, Build, error) {
	b, err := ReadBuild(binary)
	if err != nil {
		return nil, Build{}, err
	}
	exe, err := os.ReadFile(binary)
	if err != nil {
		return nil, Build{}, fmt.Errorf("image: %w", err)
	}
	certs, err := os.ReadFile(caCerts)
	if err != nil {
		return nil, Build{}, fmt.Errorf("image: CA certificates: %w", err)
	}
	layer, err := newLayer(b.Time, []file{
		{s.Entrypoint(), 0o755, exe},
		{"/etc/passwd", 0o644, []byte(Passwd)},
		{"/etc/group", 0o644, []byte(Group)},
		{CACertsPath, 0o644, certs},
	})
	if err != nil {
		return nil, Build{}, err
	}
	img, err := assemble(s, b, layer)
	return img, b, err
}

func assemble(s Spec, b Build, layer v1.Layer) (v1.Image, error) {
	created := v1.Time{Time: b.Time.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "make image: " + s.Binary() + ", /etc/passwd, /etc/group, CA certificates"},
	})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created, cf.Config = b.GOOS, b.GOARCH, created, Config(s, b)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

type file struct {
	path string
	mode int64
	body []byte
}

// newLayer makes a layer of files and their parent directories, owned by
// root, every time set to mtime, in path order, gzipped: the same files
// make the same bytes.
func newLayer(mtime time.Time, files []file) (v1.Layer, error) {
	archive, err := tarOf(mtime, files)
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	if _, err := zw.Write(archive); err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	l := &layer{gz: gz.Bytes(), diffID: sha256Of(archive)}
	l.digest = sha256Of(l.gz)
	return partial.CompressedToLayer(l)
}

func tarOf(mtime time.Time, files []file) ([]byte, error) {
	var hdrs []*tar.Header
	bodies := map[string][]byte{}
	dirs := map[string]bool{}
	for _, f := range files {
		name := f.path[1:]
		hdrs = append(hdrs, &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.mode, Size: int64(len(f.body))})
		bodies[name] = f.body
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		hdrs = append(hdrs, &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755})
	}
	sort.Slice(hdrs, func(i, j int) bool { return hdrs[i].Name < hdrs[j].Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		h.ModTime = mtime.UTC().Truncate(time.Second)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(bodies[h.Name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sha256Of(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// layer is a gzipped tar held in memory, compressed and hashed once.
type layer struct {
	gz             []byte
	digest, diffID v1.Hash
}

func (l *layer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *layer) Size() (int64, error)     { return int64(len(l.gz)), nil }

func (l *layer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.gz)), nil
}

func (l *layer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

var notInTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag names the image holdfast/<name>:<version>, the version's characters
// that a tag cannot hold ("+dirty") made dashes.
func Tag(s Spec, b Build) (name.Tag, error) {
	v := notInTag.ReplaceAllString(b.Version, "-")
	if len(v) > 128 {
		v = v[:128]
	}
	return name.NewTag("holdfast/" + s.Name + ":" + v)
}
