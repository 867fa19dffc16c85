package e2e

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/tasks"
	"github.com/holdfast/holdfast/worker"
)

// A periodic task that fails for a moment (Postgres restarting answers
// 57P03) is tried again and succeeds; nothing is archived, so a blip does
// not fire HoldfastTasksArchived. With no retries (before), each of the two
// failures archived a task.
func TestPeriodicTaskSurvivesABlip(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{NoAPI: true})
	var calls atomic.Int32
	done := make(chan struct{})
	flaky := func(*storage.Stores) worker.Module {
		return worker.Module{Periodic: []worker.Periodic{{Type: "test:flaky", Every: time.Second,
			Handle: func(context.Context) error {
				switch calls.Add(1) {
				case 1, 2:
					return &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}
				case 3:
					close(done)
				}
				return nil
			}}}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- (&wiring.Worker{Config: s.Cfg, Log: s.Log, Name: "flaky", Modules: []worker.Types{flaky}}).Run(ctx)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the periodic task never succeeded")
	}
	insp := asynq.NewInspectorFromRedisClient(s.Redis)
	archived, err := insp.ListArchivedTasks(tasks.MaintenanceQueue)
	if !errors.Is(err, asynq.ErrQueueNotFound) {
		require.NoError(t, err)
	}
	require.Empty(t, archived, "a blip archived a periodic task")
	cancel()
	require.NoError(t, <-errc)
}
