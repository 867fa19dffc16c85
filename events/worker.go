package events

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// Worker returns the events write types and counters for the worker (wiring.Modules); entry
// tokens are signed with a key derived from JWT_SECRET (NewRoom).
func Worker(fcfsLockWait, reconcileEvery time.Duration, secret string) worker.Types {
	return func(st *storage.Stores) worker.Module {
		counts := NewCounts(st.Pool, st.Redis)
		f := NewFCFS(fcfsLockWait)
		f.Counts = counts
		room := NewRoom(st.Redis, secret)
		f.Room = room
		sealer := NewSealer(st.Pool, room)
		rw := &RoomWrites{Room: room, Sealer: sealer, Counts: counts}
		rooms := NewRooms(st.Pool, room, sealer, counts)
		holds := &Holds{Counts: counts, Room: room}
		return worker.Module{
			Types:      slices.Concat([]keyed.Type{f.Type()}, rw.Types(), holds.Types()),
			Collectors: slices.Concat([]prometheus.Collector{f.Outcomes}, room.Collectors(), rooms.Collectors()),
			Periodic: []worker.Periodic{{Type: TypeReconcile, Every: reconcileEvery,
				Handle: func(ctx context.Context) error {
					return errors.Join(holds.Sweep(ctx, st.Pool), rooms.Reconcile(ctx))
				}}},
		}
	}
}
