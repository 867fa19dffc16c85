package keyed

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestTransientClassification(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"serialization failure": {&pgconn.PgError{Code: "40001"}, true},
		"deadlock":              {fmt.Errorf("keyed: apply x: %w", &pgconn.PgError{Code: "40P01"}), true},
		"too many connections":  {&pgconn.PgError{Code: "53300"}, true},
		"lock not available":    {&pgconn.PgError{Code: "55P03"}, true},
		"connection refused":    {&net.OpError{Op: "dial", Err: errors.New("refused")}, true},
		"unknown type":          {fmt.Errorf("%w: x.y", errUnknownType), true},
		"unique violation":      {&pgconn.PgError{Code: "23505"}, false},
		"undefined column":      {&pgconn.PgError{Code: "42703"}, false},
		"applier's own error":   {errors.New("probe: poisoned request"), false},
	}
	for name, c := range cases {
		require.Equal(t, c.want, transient(c.err), name)
	}
}
