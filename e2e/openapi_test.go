package e2e

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
)

// TestOpenAPIDocumentServed: the API serves its OpenAPI document without
// authentication, byte for byte the embedded api/openapi.yaml. (Every
// response of this suite is validated against that document by the
// systest client; see internal/systest/openapi.go.)
func TestOpenAPIDocumentServed(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	anon := s.Client("x", domain.RoleUser)
	anon.Token = ""
	r := anon.Do("GET", api.OpenAPIPath, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "application/yaml", r.Header.Get("Content-Type"))
	require.Equal(t, string(api.OpenAPIDocument()), string(r.Body))
}
