package image_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/deploy/image"
)

// scratch holds what the tests share: the binaries, built once.
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "holdfast-image-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the holdfast module's directory (deploy's go.mod replaces it
// with ../), where make image builds the binaries.
var repoRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/holdfast/holdfast").Output()
	return strings.TrimSpace(string(out)), err
})

// goBuild builds the commands (./cmd/api ./cmd/worker) into dir with
// flags, in the environment plus env.
func goBuild(dir string, commands string, env []string, flags ...string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	args := append(append(append([]string{"build"}, flags...), "-o", dir+"/"), strings.Fields(commands)...)
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// built is make image's work, done twice: binaries built as it builds
// them, twice, one build right after the other, into scratch/a/bin and
// scratch/b/bin, then the builder (deploy/cmd/image, without -race, as make
// image runs it) run on each into scratch/a/out and scratch/b/out.
type built struct {
	dir    string
	output string // what the builder printed
}

var builds = sync.OnceValues(func() ([2]built, error) {
	bs := [2]built{{dir: filepath.Join(scratch, "a")}, {dir: filepath.Join(scratch, "b")}}
	for _, b := range bs {
		if err := goBuild(filepath.Join(b.dir, "bin"), "./cmd/api ./cmd/worker", []string{"CGO_ENABLED=0"}, image.BuildFlags...); err != nil {
			return bs, err
		}
	}
	builder := filepath.Join(scratch, "image")
	if out, err := exec.Command("go", "build", "-o", builder, "../cmd/image").CombinedOutput(); err != nil {
		return bs, fmt.Errorf("go build ../cmd/image: %w\n%s", err, out)
	}
	for i, b := range bs {
		cmd := exec.Command(builder, "-bin", filepath.Join(b.dir, "bin"), "-out", filepath.Join(b.dir, "out"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return bs, fmt.Errorf("%s: %w\n%s", cmd, err, out)
		}
		bs[i].output = string(out)
	}
	return bs, nil
})

func images(t *testing.T) [2]built {
	t.Helper()
	bs, err := builds()
	require.NoError(t, err)
	return bs
}

// want is what an image's labels must say, taken from outside the builder:
// the binary's --version line and git.
type want struct {
	Version, Revision, Created string
	VersionLine                string // what the binary inside must print for --version
}

func wantOf(t *testing.T, binary string) want {
	t.Helper()
	out, err := exec.Command(binary, "--version").Output()
	require.NoError(t, err)
	line := strings.TrimSpace(string(out))
	f := strings.Fields(line) // holdfast <version> <revision> [modified] <go version>
	require.GreaterOrEqual(t, len(f), 4, line)
	root, err := repoRoot()
	require.NoError(t, err)
	show := exec.Command("git", "show", "-s", "--format=%cI", f[2])
	show.Dir = root
	iso, err := show.Output()
	require.NoError(t, err)
	created, err := time.Parse(time.RFC3339, strings.TrimSpace(string(iso)))
	require.NoError(t, err)
	return want{Version: f[1], Revision: f[2], Created: created.UTC().Format(time.RFC3339), VersionLine: line}
}

// TestImages checks what make image makes: it reads both images back from
// the tarball (as docker load does) and from the OCI layout (as a push
// does), checks them, runs the binary inside, and compares them with the
// second build's: the same bytes.
func TestImages(t *testing.T) {
	bs := images(t)
	for _, s := range image.Specs {
		t.Run(s.Name, func(t *testing.T) {
			w := wantOf(t, filepath.Join(bs[0].dir, "bin", s.Name))
			tag, err := name.NewTag("holdfast/" + s.Name + ":" + strings.ReplaceAll(w.Version, "+", "-"))
			require.NoError(t, err)
			tarPath := filepath.Join(bs[0].dir, "out", s.Binary()+".tar")
			require.Equal(t, []string{tag.String()}, repoTags(t, tarPath))
			loaded, err := tarball.ImageFromPath(tarPath, &tag)
			require.NoError(t, err)
			require.NoError(t, validate.Image(loaded), "the layer's contents against its digests")
			require.Empty(t, inspect(loaded, s, w))

			pushed := fromLayout(t, filepath.Join(bs[0].dir, "out", s.Binary()+".oci"))
			require.Empty(t, inspect(pushed, s, w))
			mediaTypes(t, pushed)
			require.Equal(t, configName(t, loaded), configName(t, pushed))
			require.Contains(t, bs[0].output, tag.String())
			require.Contains(t, bs[0].output, "ID "+configName(t, loaded).String(), "docker load's image ID")
			require.Contains(t, bs[0].output, "manifest (OCI) "+digest(t, pushed).String())

			runs(t, loaded, w.VersionLine)

			require.Equal(t, fileSum(t, tarPath), fileSum(t, filepath.Join(bs[1].dir, "out", s.Binary()+".tar")))
			require.Equal(t, digest(t, pushed), digest(t, fromLayout(t, filepath.Join(bs[1].dir, "out", s.Binary()+".oci"))))
		})
	}
}

// TestInspectFindsBadImages is the control of TestImages: an image that
// breaks one rule fails the same check, so the check cannot pass by
// looking at nothing.
func TestInspectFindsBadImages(t *testing.T) {
	a := images(t)[0]
	w := wantOf(t, filepath.Join(a.dir, "bin", image.API.Name))
	img, err := tarball.ImageFromPath(filepath.Join(a.dir, "out", image.API.Binary()+".tar"), nil)
	require.NoError(t, err)
	require.Empty(t, inspect(img, image.API, w))

	withConfig := func(change func(*v1.Config)) v1.Image {
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		c := cf.DeepCopy().Config
		change(&c)
		bad, err := mutate.Config(img, c)
		require.NoError(t, err)
		return bad
	}
	shell, err := mutate.AppendLayers(img, layerOf(t, map[string]string{"bin/sh": "#!"}))
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		img   v1.Image
		found string
	}{
		{"root user", withConfig(func(c *v1.Config) { c.User = "0:0" }), "runs as root"},
		{"no user", withConfig(func(c *v1.Config) { c.User = "" }), "runs as root"},
		{"user by name", withConfig(func(c *v1.Config) { c.User = "nonroot" }), "not numeric"},
		{"no labels", withConfig(func(c *v1.Config) { c.Labels = nil }), "label org.opencontainers.image.revision"},
		{"another revision", withConfig(func(c *v1.Config) { c.Labels[image.LabelRevision] = "0000000" }), "label org.opencontainers.image.revision"},
		{"listen port not exposed", withConfig(func(c *v1.Config) { delete(c.ExposedPorts, "8080/tcp") }), "HTTP_ADDR=:8080"},
		{"loopback address", withConfig(func(c *v1.Config) { c.Env = []string{image.PathEnv} }), "HTTP_ADDR"},
		{"another entrypoint", withConfig(func(c *v1.Config) { c.Entrypoint = []string{"/bin/sh", "-c"} }), "entrypoint"},
		{"a shell", shell, "has a shell"},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems := inspect(c.img, image.API, w)
			require.NotEmpty(t, problems)
			require.Contains(t, strings.Join(problems, "\n"), c.found)
		})
	}
}

// TestReadBuildRefuses shows the builder's guards on real binaries: one
// built with cgo (dynamically linked), one not stamped with its commit,
// one without its own time zone database are refused, each with the fix.
func TestReadBuildRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		env   []string
		flags []string
		err   []string
	}{
		{"cgo", []string{"CGO_ENABLED=1"}, image.BuildFlags, []string{"built with cgo", "dynamically linked"}},
		{"unstamped", []string{"CGO_ENABLED=0"}, []string{"-trimpath", "-buildvcs=false", "-tags", "timetzdata"}, []string{"no VCS revision"}},
		{"no tzdata", []string{"CGO_ENABLED=0"}, []string{"-trimpath", "-buildvcs=auto"}, []string{"-tags timetzdata"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.NoError(t, goBuild(dir, "./cmd/worker", c.env, c.flags...))
			_, _, err := image.New(image.Worker, filepath.Join(dir, "worker"), image.DefaultCACerts)
			for _, e := range c.err {
				require.ErrorContains(t, err, e)
			}
		})
	}
}

// inspect lists what is wrong with img as the image of s whose build is w.
func inspect(img v1.Image, s image.Spec, w want) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := validate.Image(img, validate.Fast); err != nil {
		bad("invalid: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return append(problems, err.Error())
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		bad("platform %s/%s", cf.OS, cf.Architecture)
	}
	uid, gid, numeric := strings.Cut(c.User, ":")
	if c.User == "" || uid == "0" || gid == "0" {
		bad("runs as root (user %q)", c.User)
	} else if _, err := strconv.Atoi(uid); err != nil || !numeric {
		bad("user %q is not numeric uid:gid: runAsNonRoot cannot check a name", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/" + s.Binary()}) || len(c.Cmd) > 0 {
		bad("entrypoint %q, cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.WorkingDir != "/" {
		bad("working directory %q", c.WorkingDir)
	}
	inspectNetwork(c, s, bad)
	labels := map[string]string{
		image.LabelTitle: s.Binary(), image.LabelVersion: w.Version, image.LabelRevision: w.Revision,
		image.LabelCreated: w.Created, image.LabelSource: "https://github.com/holdfast/holdfast",
		image.LabelDescription: s.Description,
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if c.Labels[k] != labels[k] || labels[k] == "" {
			bad("label %s = %q, want %q", k, c.Labels[k], labels[k])
		}
	}
	if cf.Created.UTC().Format(time.RFC3339) != w.Created {
		bad("created %s, want the commit's time %s", cf.Created, w.Created)
	}
	inspectFiles(img, s, c.User, bad)
	return problems
}

// inspectNetwork checks that each binary listens on every address at the
// ports the image exposes: HTTP_ADDR, MONITORING_ADDR, METRICS_ADDR,
// WORKER_ADDR.
func inspectNetwork(c v1.Config, s image.Spec, bad func(string, ...any)) {
	want := map[string]string{"api": "HTTP_ADDR=:8080 MONITORING_ADDR=:8082 METRICS_ADDR=:8083", "worker": "WORKER_ADDR=:8081"}[s.Name]
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e] = true
	}
	if !env[image.PathEnv] || len(c.Env) != 1+len(strings.Fields(want)) {
		bad("env %q", c.Env)
	}
	for _, e := range strings.Fields(want) {
		_, addr, _ := strings.Cut(e, "=")
		_, port, _ := net.SplitHostPort(addr)
		if _, exposed := c.ExposedPorts[port+"/tcp"]; !env[e] || !exposed {
			bad("%s not set and exposed (env %q, ports %v)", e, c.Env, slices.Sorted(maps.Keys(c.ExposedPorts)))
		}
	}
	if len(c.ExposedPorts) != len(strings.Fields(want)) {
		bad("exposed ports %v", slices.Sorted(maps.Keys(c.ExposedPorts)))
	}
}

// inspectFiles checks the image's files: exactly the binary, passwd,
// group and CA certificates with their directories, owned by root; the
// image's user named in passwd.
func inspectFiles(img v1.Image, s image.Spec, user string, bad func(string, ...any)) {
	files, err := flatten(img)
	if err != nil {
		bad("files: %v", err)
		return
	}
	if _, ok := files["bin/sh"]; ok {
		bad("has a shell: /bin/sh")
	}
	wantFiles := []string{"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
		"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/" + s.Binary()}
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, wantFiles) {
		bad("files %q, want %q", got, wantFiles)
	}
	for p, f := range files {
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 || f.hdr.Mode&0o022 != 0 {
			bad("%s: owner %d:%d, mode %o: the user could change it", p, f.hdr.Uid, f.hdr.Gid, f.hdr.Mode)
		}
	}
	if bin := files["usr/local/bin/"+s.Binary()]; bin.hdr == nil || bin.hdr.Mode&0o111 != 0o111 {
		bad("binary not executable by all")
	}
	uid, gid, _ := strings.Cut(user, ":")
	if !strings.Contains("\n"+string(files["etc/passwd"].body), fmt.Sprintf("\nnonroot:x:%s:%s:", uid, gid)) {
		bad("/etc/passwd does not name user %s", user)
	}
	if !strings.Contains("\n"+string(files["etc/group"].body), fmt.Sprintf("\nnonroot:x:%s:", gid)) {
		bad("/etc/group does not name group %s", gid)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(files["etc/ssl/certs/ca-certificates.crt"].body) {
		bad("no CA certificate in %s", image.CACertsPath)
	}
}

type entry struct {
	hdr  *tar.Header
	body []byte
}

// unpacked keeps each layer's files by its digest: the images checked
// here share their layer, which takes seconds to unpack under -race.
var unpacked sync.Map

// flatten reads the image's file system, every layer applied (in order;
// holdfast's layers have no whiteouts).
func flatten(img v1.Image) (map[string]entry, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	files := map[string]entry{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		lf, ok := unpacked.Load(d)
		if !ok {
			if lf, err = unpack(l); err != nil {
				return nil, err
			}
			unpacked.Store(d, lf)
		}
		maps.Copy(files, lf.(map[string]entry))
	}
	return files, nil
}

func unpack(l v1.Layer) (map[string]entry, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(h.Name, "/")
		if h.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
			name += "/"
		}
		files[name] = entry{h, body}
	}
}

// runs unpacks the image and runs its entrypoint with --version, as the
// container would: chrooted into the image's files, as its user, with its
// environment (as root; otherwise only from the unpacked files). The line
// must be the one the binary printed before it was packed.
func runs(t *testing.T, img v1.Image, versionLine string) {
	t.Helper()
	files, err := flatten(img)
	require.NoError(t, err)
	rootfs := t.TempDir()
	require.NoError(t, os.Chmod(rootfs, 0o755))
	for p, f := range files {
		dst := filepath.Join(rootfs, p)
		if f.hdr.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(dst, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, f.body, os.FileMode(f.hdr.Mode)))
	}
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	c := cf.Config
	cmd := exec.Command(filepath.Join(rootfs, c.Entrypoint[0]), "--version")
	if os.Geteuid() == 0 {
		uid, gid, _ := strings.Cut(c.User, ":")
		u, err := strconv.Atoi(uid)
		require.NoError(t, err)
		g, err := strconv.Atoi(gid)
		require.NoError(t, err)
		cmd = exec.Command(c.Entrypoint[0], "--version")
		cmd.Dir = c.WorkingDir
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)}}
	} else {
		t.Log("not root: the binary runs unpacked, without chroot or the image's user")
	}
	cmd.Env = c.Env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, versionLine, strings.TrimSpace(string(out)))
}

// repoTags reads the RepoTags of a docker save tarball's manifest.json.
func repoTags(t *testing.T, tarPath string) []string {
	t.Helper()
	f, err := os.Open(tarPath)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		require.NoError(t, err, "no manifest.json in %s", tarPath)
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		require.NoError(t, json.NewDecoder(tr).Decode(&m))
		require.Len(t, m, 1)
		return m[0].RepoTags
	}
}

// fromLayout reads the one image of an OCI layout, as a push from it would.
func fromLayout(t *testing.T, dir string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	img, err := idx.Image(m.Manifests[0].Digest)
	require.NoError(t, err)
	return img
}

// mediaTypes checks that the image is an OCI image throughout.
func mediaTypes(t *testing.T, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	require.NoError(t, err)
	require.Equal(t, types.OCIManifestSchema1, m.MediaType)
	require.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 1)
	require.Equal(t, types.OCILayer, m.Layers[0].MediaType)
}

// layerOf makes a layer of files, for the controls.
func layerOf(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for p, body := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: int64(len(body))}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	require.NoError(t, err)
	return l
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	require.NoError(t, err)
	return d
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.ConfigName()
	require.NoError(t, err)
	return d
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return sha256.Sum256(b)
}
