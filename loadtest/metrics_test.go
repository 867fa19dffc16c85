package loadtest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
)

// scrape adds up a metric's series whatever their labels, leaves out
// metrics whose names only begin with its name, and reads unlabelled
// samples from the same exposition; scrapeOne fails on a metric not there.
func TestScrapeAddsEveryLabelledSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	batches := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "holdfast_keyed_batch_size"}, []string{"queue"})
	longer := prometheus.NewCounter(prometheus.CounterOpts{Name: "holdfast_keyed_batch_size_count_other"})
	plain := prometheus.NewGauge(prometheus.GaugeOpts{Name: "plain"})
	reg.MustRegister(batches, longer, plain)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	got, err := scrape(t.Context(), http.DefaultClient, srv.URL, victimBatches)
	require.NoError(t, err)
	require.Empty(t, got, "no batch yet")
	batches.WithLabelValues("events").Observe(16)
	batches.WithLabelValues("events").Observe(3)
	batches.WithLabelValues("shop").Observe(1)
	longer.Add(100)
	plain.Set(7)
	got, err = scrape(t.Context(), http.DefaultClient, srv.URL, victimBatches, "plain")
	require.NoError(t, err)
	require.Equal(t, map[string]float64{victimBatches: 3, "plain": 7}, got)
	_, err = scrapeOne(t.Context(), http.DefaultClient, srv.URL, "missing")
	require.ErrorContains(t, err, "missing not at "+srv.URL)
}
