// Command manifests writes deploy/kubernetes/base/generated/ from
// dashboards/ (make manifests). Run it from deploy/, or pass -root.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/holdfast/holdfast/deploy/manifests"
)

func main() {
	root := flag.String("root", "..", "the repository's root")
	flag.Parse()
	if err := manifests.Write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}
