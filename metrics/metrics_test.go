package metrics_test

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/apispec"
	"github.com/holdfast/holdfast/metrics"
)

// series gathers reg and returns each series as "name{l=v,...}" (labels in
// name order), with its value (a histogram's: its count).
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			// One of the three is set; the getters of the others give 0.
			out[key] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount()) + m.GetGauge().GetValue()
		}
	}
	return out
}

// A counter vector has no series until its first label values are used, so
// a panel or an alert on it sees nothing before the first event (control);
// the Init methods export each known series at 0.
func TestCountersExportedAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := metrics.NewPipeline(reg)
	require.Empty(t, series(t, reg), "control: nothing exported before the first event")

	p.InitIntake("stays", "hold.create", "hold.cancel")
	p.InitQueues("stays")
	p.InitType("hold.create")
	got := series(t, reg)
	for _, s := range []string{
		"holdfast_requests_accepted_total{type=hold.create}",
		"holdfast_requests_accepted_total{type=hold.cancel}",
		"holdfast_requests_overloaded_total{queue=stays}",
		"holdfast_keyed_takeovers_total{queue=stays}",
		"holdfast_keyed_lease_lost_total{queue=stays}",
		"holdfast_keyed_batch_size{queue=stays}",
		"holdfast_requests_completed_total{code=none,outcome=succeeded,type=hold.create}",
		"holdfast_requests_completed_total{code=INTERNAL,outcome=failed,type=hold.create}",
		"holdfast_request_duration_seconds{type=hold.create}",
	} {
		v, ok := got[s]
		require.True(t, ok, "%s not exported; have %v", s, got)
		require.Zero(t, v, s)
	}
}

// Every 429 code the OpenAPI document allows is counted from 0, and a 429
// counts under its code; other statuses are not counted.
func TestTooManyRequestsByCode(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	var documented []string
	code := doc.T.Components.Schemas["TooManyRequestsCode"].Value.Properties["error"].Value.Properties["code"].Value
	for _, v := range code.Enum {
		documented = append(documented, v.(string))
	}
	require.ElementsMatch(t, documented, domain.TooManyRequestsCodes)

	reg := prometheus.NewRegistry()
	h := metrics.NewHTTP(reg)
	got := series(t, reg)
	for _, c := range documented {
		require.Contains(t, got, "holdfast_http_too_many_requests_total{code="+c+"}")
	}
	h.ErrorAnswer(429, domain.CodeDuplicateRequest)
	h.ErrorAnswer(429, domain.CodeDuplicateRequest)
	h.ErrorAnswer(409, domain.CodeConflict)
	got = series(t, reg)
	require.Equal(t, 2.0, got["holdfast_http_too_many_requests_total{code=DUPLICATE_REQUEST}"])
	require.Zero(t, got["holdfast_http_too_many_requests_total{code=OVERLOADED}"])
	require.NotContains(t, got, "holdfast_http_too_many_requests_total{code=CONFLICT}")
}

// holdfast_build_info is 1, labelled with the running build.
func TestBuildInfoIsExported(t *testing.T) {
	mfs, err := metrics.NewRegistry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "holdfast_build_info" {
			continue
		}
		require.Len(t, mf.GetMetric(), 1)
		m := mf.GetMetric()[0]
		require.Equal(t, 1.0, m.GetGauge().GetValue())
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		require.Equal(t, runtime.Version(), labels["goversion"])
		require.Contains(t, labels, "version")
		require.Contains(t, labels, "revision")
		return
	}
	t.Fatal("holdfast_build_info is not exported")
}
