package keyed

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/testenv"
)

// The API, the worker and the test systems take their engine options from
// one mapping of the configuration. Its defaults are the engine's own (an
// engine built with fewer options, as tests build them, behaves as the
// binaries do), and each setting reaches the engine of every process.
func TestOptionsFromTheConfiguration(t *testing.T) {
	load := func(vars map[string]string) config.Config {
		vars["JWT_SECRET"] = testenv.Secret
		c, err := config.FromMap(vars)
		require.NoError(t, err)
		return c
	}

	got := OptionsFrom(load(map[string]string{}), "w")
	got.defaults() // as New does: DeferAfter is not a setting
	want := Options{Worker: "w"}
	want.defaults()
	require.Equal(t, want, got, "config's defaults are the engine's")

	off := OptionsFrom(load(map[string]string{"AGGREGATE_DEFERRED_TASKS": "false", "BATCH_ENQUEUE": "false",
		"QUIET_WAITING": "false", "LEASE_TTL": "7s", "KEY_FORGET_AFTER": "2h"}), "w")
	require.True(t, off.ScheduleDeferred)
	require.True(t, off.EnqueueEach)
	require.True(t, off.PlainWaiting)
	require.Equal(t, "7s", off.LeaseTTL.String())
	require.Equal(t, "2h0m0s", off.ForgetAfter.String())
}
