package domain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every code the package declares has its status in the one table, so a
// new code cannot be answered as a 500 by omission.
func TestEveryCodeHasAStatus(t *testing.T) {
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var codes []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if strings.HasPrefix(name.Name, "Code") && i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						code, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						codes = append(codes, code)
					}
				}
			}
			return true
		})
	}
	require.GreaterOrEqual(t, len(codes), 40, "the declared codes were found")
	for _, c := range codes {
		_, ok := statuses[c]
		require.True(t, ok, "code %s has no status", c)
	}
	require.Len(t, statuses, len(codes), "every status belongs to a declared code")
}

func TestProblemStatus(t *testing.T) {
	require.Equal(t, http.StatusConflict, NewProblem(CodeSoldOut, "no seat").HTTPStatus)
	require.Equal(t, http.StatusGone, NewProblem(CodeHoldExpired, "gone").HTTPStatus)
	require.Equal(t, http.StatusInternalServerError, NewProblem("NO_SUCH_CODE", "x").HTTPStatus, "a code without a status is a 500")
	p := NewProblem(CodeInvalidInput, "headers too large")
	h := p.WithStatus(http.StatusRequestHeaderFieldsTooLarge)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, h.HTTPStatus)
	require.Equal(t, http.StatusBadRequest, p.HTTPStatus, "WithStatus copies")
}
