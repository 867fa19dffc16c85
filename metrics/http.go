package metrics

import "github.com/prometheus/client_golang/prometheus"

// HTTP holds the API's per-route latency histogram. Its labels are the
// method, the route pattern (`/api/v1/hotels/:hotelId/availability`, never
// the path, so ids do not multiply series) and the status class, so the
// number of series is bounded by the routes the API declares.
type HTTP struct {
	Duration *prometheus.HistogramVec
}

// NewHTTP registers the HTTP metrics on reg.
func NewHTTP(reg prometheus.Registerer) *HTTP {
	h := &HTTP{Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_http_request_duration_seconds",
		Help:    "Time the API took to answer, by method, route pattern and status class (2xx, 4xx, 5xx).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"method", "route", "status"})}
	reg.MustRegister(h.Duration)
	return h
}

// Observe records one answer. method may alias a reused buffer, so it is
// mapped onto constant strings (which also bounds it).
func (h *HTTP) Observe(method, route string, status int, seconds float64) {
	h.Duration.WithLabelValues(methodLabel(method), route, statusClass(status)).Observe(seconds)
}

func methodLabel(m string) string {
	switch m {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "PATCH":
		return "PATCH"
	case "DELETE":
		return "DELETE"
	case "HEAD":
		return "HEAD"
	case "OPTIONS":
		return "OPTIONS"
	}
	return "other"
}

var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(code int) string {
	if code >= 100 && code < 600 {
		return statusClasses[code/100-1]
	}
	return "other"
}
