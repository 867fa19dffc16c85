package storage

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Unavailable is what the API answers 503 with Retry-After, and the worker
// retries: Postgres or Redis could not serve the call now, or rolled it
// back against another transaction. A call that was wrong is not.
func TestUnavailableIsWhatARetryMayPass(t *testing.T) {
	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"deadline":              {fmt.Errorf("requests: insert: %w", context.DeadlineExceeded), true},
		"too many connections":  {&pgconn.PgError{Code: "53300"}, true},
		"shutting down":         {&pgconn.PgError{Code: "57P01"}, true},
		"deadlock":              {fmt.Errorf("requests: insert batch: %w", &pgconn.PgError{Code: "40P01"}), true},
		"serialization failure": {&pgconn.PgError{Code: "40001"}, true},
		"unique violation":      {&pgconn.PgError{Code: "23505"}, false},
		"syntax error":          {&pgconn.PgError{Code: "42601"}, false},
		"nil":                   {nil, false},
	} {
		require.Equal(t, c.want, Unavailable(c.err), name)
	}
	require.True(t, RolledBack(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40P01"})), "a deadlock is rolled back")
	require.False(t, RolledBack(&pgconn.PgError{Code: "53300"}), "too many connections is not")
}
