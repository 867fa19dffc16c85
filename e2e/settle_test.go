package e2e

import (
	"context"
	"encoding/binary"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/requests"
)

// v7At is a UUIDv7 minted at t.
func v7At(t *testing.T, at time.Time) uuid.UUID {
	id, err := uuid.NewV7()
	require.NoError(t, err)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// A read of a request id the service may have minted lately and that is
// not stored settles it, as a client told its write's storing was in
// doubt (a 503 with Location) reads it: the id reads as failed NOT_STORED
// from then on, and a late INSERT of the write finds the id taken. An
// older id, or one not minted as holdfast mints them, is not found and
// leaves nothing behind.
func TestReadingAFreshUnknownIDSettlesIt(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	c := s.Client("ann", domain.RoleUser)
	ctx := context.Background()

	fresh := v7At(t, time.Now())
	for range 2 {
		r := c.Do("GET", "/api/v1/requests/"+fresh.String(), nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var v requests.View
		r.JSON(t, &v)
		require.Equal(t, requests.TypeNotStored, v.Type)
		require.Equal(t, domain.StatusFailed, v.Status)
		require.Equal(t, domain.CodeNotStored, v.Error.Code)
	}
	_, err := s.Pool.Exec(ctx, `INSERT INTO requests (id, type, queue, user_id, keys, payload, accepted_at)
		VALUES ($1, 'probe.incr', 'probe', 'ann', '{k}', '{}', now())`, fresh)
	require.Error(t, err, "the late write finds its id taken")

	for _, id := range []uuid.UUID{v7At(t, time.Now().Add(-48*time.Hour)), uuid.New()} {
		require.Equal(t, http.StatusNotFound, c.Do("GET", "/api/v1/requests/"+id.String(), nil).Status)
		var n int
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE id = $1`, id).Scan(&n))
		require.Zero(t, n, "no tombstone for %s", id)
	}
}
