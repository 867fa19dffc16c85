package image_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/deploy/image"
)

// There is no Docker engine here to build the repository's Dockerfile: these
// tests read its instructions and check that the images it describes are
// the ones make image builds (the same files, user, working directory,
// environment, ports, entrypoint and labels), from binaries built with the
// same flags as make image's.

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	cmd     string // upper case: FROM, COPY, …
	args    string
	heredoc string // the body of a <<EOF heredoc, if any
}

// parseDockerfile reads the instructions of a Dockerfile: comments and
// blank lines dropped, lines ending in \ joined with the next, a <<EOF
// heredoc's lines up to EOF kept as its body.
func parseDockerfile(text string) ([]instruction, error) {
	lines := strings.Split(text, "\n")
	var out []instruction
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			line = strings.TrimSuffix(line, `\`) + " " + next
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if at := strings.Index(in.args, "<<"); at >= 0 {
			word := strings.Fields(in.args[at+2:])[0]
			var body []string
			for i++; i < len(lines) && lines[i] != word; i++ {
				body = append(body, lines[i])
			}
			if i == len(lines) {
				return nil, fmt.Errorf("heredoc <<%s not closed", word)
			}
			in.heredoc = strings.Join(body, "\n") + "\n"
			in.args = strings.TrimSpace(in.args[:at] + strings.TrimPrefix(in.args[at+2:], word))
		}
		out = append(out, in)
	}
	return out, nil
}

// stage is what a build stage makes, its base stage's included.
type stage struct {
	name, root string // root: the image the first stage of its chain starts FROM
	user, dir  string
	env        map[string]string
	labels     map[string]string
	args       map[string]bool
	ports      []string
	entrypoint []string
	files      map[string]string // destination → "heredoc:<body>" or "<stage>:<source>"
	runs       []string
}

func (s stage) clone(name string) *stage {
	c := s
	c.name = name
	c.env, c.labels, c.args, c.files = maps.Clone(s.env), maps.Clone(s.labels), maps.Clone(s.args), maps.Clone(s.files)
	c.ports, c.runs = slices.Clone(s.ports), nil
	return &c
}

// stages plays a Dockerfile's instructions into its stages, by name.
func stages(ins []instruction) (map[string]*stage, error) {
	all := map[string]*stage{}
	var cur *stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				return nil, fmt.Errorf("FROM %s: want FROM <image> AS <name>", in.args)
			}
			if base, ok := all[f[0]]; ok {
				cur = base.clone(f[2])
			} else {
				cur = &stage{name: f[2], root: f[0], env: map[string]string{}, labels: map[string]string{},
					args: map[string]bool{}, files: map[string]string{}}
			}
			all[cur.name] = cur
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("%s before FROM", in.cmd)
		}
		if err := cur.apply(in); err != nil {
			return nil, fmt.Errorf("%s %s: %w", in.cmd, in.args, err)
		}
	}
	return all, nil
}

func (s *stage) apply(in instruction) error {
	switch in.cmd {
	case "USER":
		s.user = in.args
	case "WORKDIR":
		s.dir = in.args
	case "ENV":
		return pairs(in.args, s.env)
	case "LABEL":
		return pairs(in.args, s.labels)
	case "ARG":
		for _, a := range strings.Fields(in.args) {
			name, _, _ := strings.Cut(a, "=")
			s.args[name] = true
		}
	case "EXPOSE":
		for _, p := range strings.Fields(in.args) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			s.ports = append(s.ports, p)
		}
	case "ENTRYPOINT":
		if err := json.Unmarshal([]byte(in.args), &s.entrypoint); err != nil {
			return fmt.Errorf("not the exec form (a JSON array): the shell form needs a shell: %w", err)
		}
	case "COPY":
		return s.copy(in)
	case "RUN":
		s.runs = append(s.runs, in.args)
	default:
		return fmt.Errorf("instruction %s not known to this check", in.cmd)
	}
	return nil
}

func (s *stage) copy(in instruction) error {
	from := "context"
	var paths []string
	for _, f := range strings.Fields(in.args) {
		switch {
		case strings.HasPrefix(f, "--from="):
			from = strings.TrimPrefix(f, "--from=")
		case strings.HasPrefix(f, "--"):
			return fmt.Errorf("flag %s not known to this check", f)
		default:
			paths = append(paths, f)
		}
	}
	switch {
	case in.heredoc != "" && len(paths) == 1:
		s.files[paths[0]] = "heredoc:" + in.heredoc
	case in.heredoc == "" && len(paths) == 2 && from != "context":
		s.files[paths[1]] = from + ":" + paths[0]
	case from == "context":
		// The build stage's sources: not in any image.
	default:
		return fmt.Errorf("want COPY --from=<stage> <file> <file> or COPY <<EOF <file>")
	}
	return nil
}

// pairs reads key=value pairs, values maybe in double quotes.
func pairs(args string, into map[string]string) error {
	for rest := strings.TrimSpace(args); rest != ""; rest = strings.TrimSpace(rest) {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || strings.ContainsAny(key, " \t") {
			return fmt.Errorf("want key=value, got %q", rest)
		}
		if strings.HasPrefix(after, `"`) {
			end := strings.Index(after[1:], `"`)
			if end < 0 {
				return fmt.Errorf("unclosed quote in %q", rest)
			}
			into[key], rest = after[1:end+1], after[end+2:]
			continue
		}
		value, next, _ := strings.Cut(after, " ")
		into[key], rest = value, next
	}
	return nil
}

// compareDockerfile lists where the Dockerfile's images differ from make
// image's: its stage <name> for each image, and its build stage.
func compareDockerfile(text, goVersion string) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	ins, err := parseDockerfile(text)
	if err != nil {
		return []string{err.Error()}
	}
	all, err := stages(ins)
	if err != nil {
		return []string{err.Error()}
	}
	build := all["build"]
	if build == nil || build.root != "golang:"+goVersion {
		bad("no build stage FROM golang:%s (go.mod's go version)", goVersion)
		build = &stage{}
	}
	for _, s := range image.Specs {
		st := all[s.Name]
		if st == nil {
			bad("no stage %s", s.Name)
			continue
		}
		compareStage(st, build, s, bad)
	}
	return problems
}

func compareStage(st, build *stage, s image.Spec, bad func(string, ...any)) {
	// Build values stand in for what the Go-built image takes from its binary.
	b := image.Build{Module: "github.com/holdfast/holdfast", Version: "$VERSION", Revision: "$REVISION", Time: time.Unix(0, 0)}
	c := image.Config(s, b)
	if st.root != "scratch" {
		bad("%s: built on %s, not on nothing (scratch)", s.Name, st.root)
	}
	if st.user != c.User || st.dir != c.WorkingDir || !slices.Equal(st.entrypoint, c.Entrypoint) {
		bad("%s: USER %q, WORKDIR %q, ENTRYPOINT %q; make image's: %q, %q, %q", s.Name, st.user, st.dir, st.entrypoint, c.User, c.WorkingDir, c.Entrypoint)
	}
	var env []string
	for k, v := range st.env {
		env = append(env, k+"="+v)
	}
	if slices.Sort(env); !slices.Equal(env, slices.Sorted(slices.Values(c.Env))) {
		bad("%s: ENV %q; make image's %q", s.Name, env, c.Env)
	}
	if ports := slices.Sorted(slices.Values(st.ports)); !slices.Equal(ports, slices.Sorted(maps.Keys(c.ExposedPorts))) {
		bad("%s: EXPOSE %q; make image's %q", s.Name, ports, slices.Sorted(maps.Keys(c.ExposedPorts)))
	}
	fromBuild := map[string]string{image.LabelVersion: "VERSION", image.LabelRevision: "REVISION", image.LabelCreated: "CREATED"}
	for k, v := range c.Labels {
		got, ok := st.labels[k]
		switch arg, fromArg := fromBuild[k]; {
		case !ok:
			bad("%s: no LABEL %s", s.Name, k)
		case fromArg && (got != "${"+arg+"}" || !st.args[arg]):
			bad("%s: LABEL %s=%q, want the build argument ${%s}", s.Name, k, got, arg)
		case !fromArg && got != v:
			bad("%s: LABEL %s=%q; make image's %q", s.Name, k, got, v)
		}
	}
	if extra := len(st.labels) - len(c.Labels); extra != 0 {
		bad("%s: %d LABEL keys, make image has %d", s.Name, len(st.labels), len(c.Labels))
	}
	out := "/out/" + s.Binary()
	want := map[string]string{
		"/etc/passwd": "heredoc:" + image.Passwd, "/etc/group": "heredoc:" + image.Group,
		image.CACertsPath: "build:" + image.CACertsPath, s.Entrypoint(): "build:" + out,
	}
	if !maps.Equal(st.files, want) {
		bad("%s: files %q; make image's %q", s.Name, st.files, want)
	}
	goBuild := "CGO_ENABLED=0 go build " + strings.Join(image.BuildFlags, " ") + " -o " + out + " ./cmd/" + s.Name
	if !slices.Contains(build.runs, goBuild) {
		bad("%s: no RUN %s in the build stage (make image's flags)", s.Name, goBuild)
	}
}

func repoFile(t *testing.T, name string) string {
	t.Helper()
	root, err := repoRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, name))
	require.NoError(t, err)
	return string(b)
}

// goVersion is go.mod's go line.
func goVersion(t *testing.T) string {
	t.Helper()
	for _, line := range strings.Split(repoFile(t, "go.mod"), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go line")
	return ""
}

func TestDockerfileMakesMakeImagesLayout(t *testing.T) {
	require.Empty(t, compareDockerfile(repoFile(t, "Dockerfile"), goVersion(t)))
}

// TestDockerfileComparisonFindsDifferences is the control: a Dockerfile
// changed in one way fails the same comparison.
func TestDockerfileComparisonFindsDifferences(t *testing.T) {
	text := repoFile(t, "Dockerfile")
	for _, c := range []struct{ name, old, new, found string }{
		{"root", "USER 65532:65532", "USER root", "USER"},
		{"another port", "EXPOSE 8081", "EXPOSE 8080", "worker: EXPOSE"},
		{"loopback", "ENV WORKER_ADDR=:8081", "ENV WORKER_ADDR=127.0.0.1:8081", "worker: ENV"},
		{"a label lost", `org.opencontainers.image.revision="${REVISION}" \`, `\`, "no LABEL org.opencontainers.image.revision"},
		{"a label fixed", `org.opencontainers.image.version="${VERSION}"`, `org.opencontainers.image.version="dev"`, "org.opencontainers.image.version"},
		{"dynamic", "RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -tags timetzdata -o /out/holdfast-api", "RUN go build -trimpath -buildvcs=auto -tags timetzdata -o /out/holdfast-api", "api: no RUN"},
		{"no tzdata", "-buildvcs=auto -tags timetzdata -o /out/holdfast-worker", "-buildvcs=auto -o /out/holdfast-worker", "worker: no RUN"},
		{"a shell", "FROM scratch AS base", "FROM debian:bookworm-slim AS base", "not on nothing"},
		{"another user in passwd", "nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin", "nonroot:x:1000:1000:nonroot:/home/nonroot:/bin/sh", "files"},
		{"shell-form entrypoint", `ENTRYPOINT ["/usr/local/bin/holdfast-api"]`, "ENTRYPOINT /usr/local/bin/holdfast-api", "exec form"},
		{"another Go", "FROM golang:" + goVersion(t) + " AS build", "FROM golang:1.22 AS build", "go.mod's go version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed := strings.Replace(text, c.old, c.new, 1)
			require.NotEqual(t, text, changed, "the Dockerfile has no %q", c.old)
			problems := compareDockerfile(changed, goVersion(t))
			t.Log(strings.Join(problems, "\n"))
			require.NotEmpty(t, problems)
			require.Contains(t, strings.Join(problems, "\n"), c.found)
		})
	}
}

// TestMakeImageBuildsAsTheDockerfile checks make image's go build lines,
// as make prints them (make -n), against the flags the images need.
func TestMakeImageBuildsAsTheDockerfile(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	cmd := exec.Command("make", "-n", "image", "GO=go")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, s := range image.Specs {
		want := "CGO_ENABLED=0 go build " + strings.Join(image.BuildFlags, " ") + " -o bin/static/" + s.Name + " ./cmd/" + s.Name
		require.Contains(t, strings.Split(string(out), "\n"), want)
	}
	require.Contains(t, string(out), "-bin bin/static -out bin")
}
