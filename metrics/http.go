package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/domain"
)

// HTTP holds the API's per-route latency histogram and its count of 429s by
// code. The histogram's labels are the method, the route pattern
// (`/api/v1/hotels/:hotelId/availability`, never the path, so ids do not
// multiply series) and the status class, so the number of series is bounded
// by the routes the API declares.
type HTTP struct {
	Duration *prometheus.HistogramVec
	// TooManyRequests counts 429 answers by error code (OVERLOADED,
	// RATE_LIMITED, DUPLICATE_REQUEST), each exported at 0 from the start;
	// the status class alone folds them into "4xx".
	TooManyRequests *prometheus.CounterVec
}

// NewHTTP registers the HTTP metrics on reg.
func NewHTTP(reg prometheus.Registerer) *HTTP {
	h := &HTTP{Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_http_request_duration_seconds",
		Help:    "Time the API took to answer, by method, route pattern and status class (2xx, 4xx, 5xx).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"method", "route", "status"}),
		TooManyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_http_too_many_requests_total",
			Help: "Answers 429 Too Many Requests, by error code: OVERLOADED (a backlog over its cap), RATE_LIMITED, DUPLICATE_REQUEST.",
		}, []string{"code"})}
	for _, code := range domain.TooManyRequestsCodes {
		h.TooManyRequests.WithLabelValues(code)
	}
	reg.MustRegister(h.Duration, h.TooManyRequests)
	return h
}

// ErrorAnswer records an error answer's status and code: a 429 counts
// under its code.
func (h *HTTP) ErrorAnswer(status int, code string) {
	if status == http.StatusTooManyRequests {
		h.TooManyRequests.WithLabelValues(code).Inc()
	}
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
