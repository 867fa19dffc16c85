package image

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Build is what an image takes from the build information the Go toolchain
// stamps into the binary it packs.
type Build struct {
	Module   string    // main module path, github.com/holdfast/holdfast
	Version  string    // main module version, as --version prints it
	Revision string    // VCS revision
	Time     time.Time // commit time: the image's creation time
	Modified bool      // built from a checkout with uncommitted changes
	GOOS     string
	GOARCH   string
}

// ReadBuild reads the build information of the binary at path and refuses
// one that cannot run on the images' empty base or would not name its
// build: it must be a static Linux binary (CGO_ENABLED=0), stamped with its
// commit (-buildvcs=auto in a git checkout), with the time zone database
// inside (-tags timetzdata: the API checks hotels' time zones, and the image
// has no /usr/share/zoneinfo). Every problem found is reported.
func ReadBuild(path string) (Build, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return Build{}, fmt.Errorf("image: %s: %w", path, err)
	}
	b := Build{Module: bi.Main.Path, Version: bi.Main.Version}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	b.Revision, b.Modified = settings["vcs.revision"], settings["vcs.modified"] == "true"
	b.GOOS, b.GOARCH = settings["GOOS"], settings["GOARCH"]
	var problems []error
	if b.Revision == "" {
		problems = append(problems, errors.New("no VCS revision: build it in a git checkout with -buildvcs=auto"))
	}
	if b.Time, err = time.Parse(time.RFC3339, settings["vcs.time"]); err != nil && b.Revision != "" {
		problems = append(problems, fmt.Errorf("no commit time (vcs.time %q)", settings["vcs.time"]))
	}
	if b.GOOS != "linux" {
		problems = append(problems, fmt.Errorf("built for GOOS %q, not linux", b.GOOS))
	}
	if settings["CGO_ENABLED"] != "0" {
		problems = append(problems, errors.New("built with cgo: build it with CGO_ENABLED=0"))
	}
	if !hasTag(settings["-tags"], "timetzdata") {
		problems = append(problems, errors.New("built without -tags timetzdata: the image has no time zone database of its own"))
	}
	if err := static(path); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return Build{}, fmt.Errorf("image: %s: %w", path, errors.Join(problems...))
	}
	return b, nil
}

func hasTag(tags, want string) bool {
	for _, t := range strings.Split(tags, ",") {
		if t == want {
			return true
		}
	}
	return false
}

// static refuses a dynamically linked executable: the images have no
// dynamic loader and no libc.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked: build it with CGO_ENABLED=0")
		}
	}
	return nil
}
