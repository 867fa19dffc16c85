package keyed

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The protocol reads without quiet waiting: outside waiting.go, no file of
// the package calls a function or method waiting.go declares except
// through a group's seam (g.wait, the waiting interface) or newWaiting,
// which makes it. The control shows the check finds a direct call.
func TestTheProtocolCallsQuietWaitingOnlyThroughItsSeam(t *testing.T) {
	fset := token.NewFileSet()
	quiet, err := parser.ParseFile(fset, "waiting.go", nil, 0)
	require.NoError(t, err)
	declared := declaredIn(quiet)
	require.Contains(t, declared, "gather")
	require.Contains(t, declared, "wake")

	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, name := range files {
		if name == "waiting.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		require.Empty(t, throughNoSeam(t, string(src), declared), name)
		checked++
	}
	require.GreaterOrEqual(t, checked, 3, "drain.go, group.go and apply.go at least")

	control := `package keyed
func (g *group) leave() { g.wait.receive(nil, g, true); g.e.wakers.wake("k"); g.wait.(*waiter).park(g) }`
	require.Equal(t, []string{"wake", "park"}, throughNoSeam(t, control, declared))
}

// declaredIn lists the functions and methods a file declares.
func declaredIn(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name != "newWaiting" {
			names = append(names, fn.Name.Name)
		}
	}
	return names
}

// throughNoSeam returns, in order, the calls in src of a function or method
// named in declared other than through a group's wait field (g.wait.x()).
func throughNoSeam(t *testing.T, src string, declared []string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	require.NoError(t, err)
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			if slices.Contains(declared, fn.Name) {
				found = append(found, fn.Name)
			}
		case *ast.SelectorExpr:
			inner, ok := fn.X.(*ast.SelectorExpr)
			if slices.Contains(declared, fn.Sel.Name) && (!ok || inner.Sel.Name != "wait") {
				found = append(found, fn.Sel.Name)
			}
		}
		return true
	})
	return found
}

// A pause between looks and a back-off after a transient failure end with
// their context, or when a wake arrives, not only when their time is up: a
// drain told to stop does not sit out an hour's sleep.
func TestSleepEndsWithItsContextOrAWake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sleep(ctx, time.Hour, nil)
	woken := make(chan struct{}, 1)
	woken <- struct{}{}
	sleep(context.Background(), time.Hour, woken)
	require.Empty(t, woken)
}
