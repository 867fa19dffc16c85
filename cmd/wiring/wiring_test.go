package wiring

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
)

// The API, the worker and the test systems take their engine options from
// one mapping of the configuration. Its defaults are the engine's own (an
// engine built with fewer options, as tests build them, behaves as the
// binaries do), and each setting reaches the engine of every process.
func TestKeyedOptionsFromTheConfiguration(t *testing.T) {
	load := func(vars map[string]string) config.Config {
		vars["JWT_SECRET"] = testenv.Secret
		c, err := config.FromMap(vars)
		require.NoError(t, err)
		return c
	}

	got := KeyedOptions(load(map[string]string{}), "w").WithDefaults() // as New does: DeferAfter is not a setting
	require.Equal(t, keyed.Options{Worker: "w"}.WithDefaults(), got, "config's defaults are the engine's")

	off := KeyedOptions(load(map[string]string{"AGGREGATE_DEFERRED_TASKS": "false", "BATCH_ENQUEUE": "false",
		"QUIET_WAITING": "false", "LEASE_TTL": "7s", "KEY_FORGET_AFTER": "2h"}), "w")
	require.True(t, off.ScheduleDeferred)
	require.True(t, off.EnqueueEach)
	require.True(t, off.PlainWaiting)
	require.Equal(t, "7s", off.LeaseTTL.String())
	require.Equal(t, "2h0m0s", off.ForgetAfter.String())
}
