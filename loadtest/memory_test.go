package loadtest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
)

// scrapeSum adds up a metric's series whatever their labels, and leaves
// out metrics whose names only begin with its name; scrapeValues still
// reads unlabelled samples, from the same exposition.
func TestScrapeSumAddsEveryLabelledSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	batches := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "holdfast_keyed_batch_size"}, []string{"queue"})
	longer := prometheus.NewCounter(prometheus.CounterOpts{Name: "holdfast_keyed_batch_size_count_other"})
	plain := prometheus.NewGauge(prometheus.GaugeOpts{Name: "plain"})
	reg.MustRegister(batches, longer, plain)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	got, err := scrapeSum(t.Context(), http.DefaultClient, srv.URL, victimBatches)
	require.NoError(t, err)
	require.Zero(t, got, "no batch yet")
	batches.WithLabelValues("events").Observe(16)
	batches.WithLabelValues("events").Observe(3)
	batches.WithLabelValues("shop").Observe(1)
	longer.Add(100)
	plain.Set(7)
	got, err = scrapeSum(t.Context(), http.DefaultClient, srv.URL, victimBatches)
	require.NoError(t, err)
	require.Equal(t, 3.0, got)
	v, err := scrapeValue(t.Context(), http.DefaultClient, srv.URL, "plain")
	require.NoError(t, err)
	require.Equal(t, 7.0, v)
	_, err = scrapeValues(t.Context(), http.DefaultClient, srv.URL, "plain", "missing")
	require.ErrorIs(t, err, errNoSample)
}
