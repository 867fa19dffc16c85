// Package buildinfo tells which build of holdfast is running: the module
// version and the VCS revision the Go toolchain stamps into a binary built
// from a checkout (go build records them; go test and go run do not).
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is a binary's build.
type Info struct {
	Version   string // module version: a tag, a pseudo-version, or "(devel)"
	Revision  string // VCS revision, empty when not stamped
	Modified  bool   // built from a checkout with uncommitted changes
	GoVersion string
}

// Read returns the running binary's build.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the line --version prints: "holdfast <version> <revision>
// [modified] <go version>", without what was not stamped.
func (in Info) String() string {
	parts := []string{"holdfast", in.Version}
	if in.Revision != "" {
		parts = append(parts, in.Revision)
	}
	if in.Modified {
		parts = append(parts, "modified")
	}
	return strings.Join(append(parts, in.GoVersion), " ")
}

// Asked reports whether args ask for the version (--version, -version or
// version as the first argument).
func Asked(args []string) bool {
	return len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version")
}
