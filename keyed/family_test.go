package keyed

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
)

// Consecutive requests of the types of one family reach their applier in
// one call, in seq order; a type of no family gets calls of its own. The
// control registers the same types with no family: a call for each run of
// one type.
func TestAFamilyOfTypesReachesItsApplierInOneCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		family string
		calls  []string
	}{
		{"family", "f", []string{"f.a f.b f.a", "z z", "f.b"}},
		{"control: no family", "", []string{"f.a", "f.b", "f.a", "z z", "f.b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			ctx := context.Background()
			var calls []string
			record := ApplierFunc(func(_ context.Context, _ pgx.Tx, b *Batch) ([]requests.Outcome, error) {
				var types []string
				outs := make([]requests.Outcome, len(b.Requests))
				for i, req := range b.Requests {
					types = append(types, req.Type)
					outs[i] = requests.Succeeded(nil)
				}
				calls = append(calls, strings.Join(types, " "))
				return outs, nil
			})
			e := New(r.pool, r.rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()), Options{Worker: "w"})
			t.Cleanup(func() { _ = e.Close() })
			for _, name := range []string{"f.a", "f.b"} {
				e.Register(Type{Name: name, Queue: "q", Applier: record, Family: tc.family})
			}
			e.Register(Type{Name: "z", Queue: "q", Applier: record})
			in := r.newIntake(e)
			for _, typ := range []string{"f.a", "f.b", "f.a", "z", "z", "f.b"} {
				_, _, err := in.Accept(ctx, requests.Submission{Type: typ, Queue: "q", UserID: "u", Keys: []string{"k"}})
				require.NoError(t, err)
			}
			require.NoError(t, e.Drain(ctx, "k", "q"))
			require.Equal(t, tc.calls, calls)
		})
	}
}
