// Package metrics defines holdfast's own Prometheus metrics (prefix
// `holdfast_`, SPEC §8). Each binary builds one registry and passes the
// collectors down; nothing registers globally.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/buildinfo"
)

// Pipeline holds the request pipeline's metrics.
type Pipeline struct {
	Accepted   *prometheus.CounterVec   // requests made durable, by type
	Completed  *prometheus.CounterVec   // requests that reached a terminal state, by type, outcome and code
	Latency    *prometheus.HistogramVec // accept → terminal, by type
	Overloaded *prometheus.CounterVec   // writes refused with 429 OVERLOADED, by queue
	BatchSize  *prometheus.HistogramVec // requests applied per transaction, by queue
	LeaseBusy  *prometheus.CounterVec   // tasks that found their key's lease held and left the work to its holder
	LeaseLost  *prometheus.CounterVec   // holders that found their lease gone or fenced
	Takeovers  *prometheus.CounterVec   // keys with stale work and no live holder that the reconciler re-drove
	Redriven   *prometheus.CounterVec   // requests whose mailbox entry or task the reconciler restored
	HandOffs   *prometheus.CounterVec   // drains that handed a non-empty key to a new task
	// AlreadyApplied counts tasks that found their key's mailbox empty:
	// earlier drains had applied its requests in batches (most of a rush's
	// tasks, K4).
	AlreadyApplied *prometheus.CounterVec
}

// NoCode is the code label of a request that succeeded.
const NoCode = "none"

// Every counter a dashboard or an alert reads is exported at zero before its
// first event, for the label values known at start: `increase()` over a
// series that appears at 1 reports no increase, an alert on the first
// takeover or lost lease would never see it, and a panel of a series that
// does not exist yet shows "No data" instead of 0. The API calls InitIntake,
// the worker InitQueues, and the keyed engine InitType for each type it
// registers.

// InitIntake creates the API's counters of one queue and its write types.
func (p *Pipeline) InitIntake(queue string, types ...string) {
	p.Overloaded.WithLabelValues(queue)
	for _, t := range types {
		p.Accepted.WithLabelValues(t)
	}
}

// InitQueues creates the worker's per-queue counters and batch sizes.
func (p *Pipeline) InitQueues(queues ...string) {
	for _, q := range queues {
		for _, c := range []*prometheus.CounterVec{p.LeaseBusy, p.LeaseLost, p.Takeovers, p.Redriven, p.HandOffs, p.AlreadyApplied} {
			c.WithLabelValues(q)
		}
		p.BatchSize.WithLabelValues(q)
	}
}

// InitType creates the worker's per-type outcomes and latency: succeeded,
// and failed INTERNAL, which any type can end with; a rejection's codes are
// the type's own and appear with the first.
func (p *Pipeline) InitType(types ...string) {
	for _, t := range types {
		p.Completed.WithLabelValues(t, string(domain.StatusSucceeded), NoCode)
		p.Completed.WithLabelValues(t, string(domain.StatusFailed), domain.CodeInternal)
		p.Latency.WithLabelValues(t)
	}
}

// NewRegistry returns a registry with Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	in := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "holdfast_build_info",
		Help:        "Always 1; its labels name the running build (--version).",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build)
	return reg
}

// NewPipeline registers the pipeline metrics on reg.
func NewPipeline(reg prometheus.Registerer) *Pipeline {
	p := &Pipeline{
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_requests_accepted_total", Help: "Writes made durable and answered 202, by type.",
		}, []string{"type"}),
		Completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_requests_completed_total", Help: "Requests that reached a terminal state, by type, outcome and code.",
		}, []string{"type", "outcome", "code"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_request_duration_seconds",
			Help:    "Time from acceptance to terminal state, by type.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"type"}),
		Overloaded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_requests_overloaded_total", Help: "Writes refused with 429 OVERLOADED, by queue.",
		}, []string{"queue"}),
		BatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_keyed_batch_size",
			Help:    "Requests applied in one transaction, by queue.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}, []string{"queue"}),
		LeaseBusy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_keyed_lease_waits_total", Help: "Tasks that found their key's lease held and left the work to the holder, by queue.",
		}, []string{"queue"}),
		LeaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_keyed_lease_lost_total", Help: "Holders that found their lease expired or fenced, by queue.",
		}, []string{"queue"}),
		Takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_keyed_takeovers_total", Help: "Keys with stale work and no live holder re-driven by the reconciler, by queue.",
		}, []string{"queue"}),
		Redriven: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_requests_redriven_total", Help: "Requests whose mailbox entry and task were restored from Postgres, by queue (one whose dispatch failed counts at each reconcile until it is applied).",
		}, []string{"queue"}),
		HandOffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_keyed_handoffs_total", Help: "Drains that handed a non-empty key over to a new drain task, by queue.",
		}, []string{"queue"}),
		AlreadyApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_keyed_tasks_already_applied_total", Help: "Tasks that found their key's mailbox empty, its requests applied by earlier drains, so they had nothing to do, by queue.",
		}, []string{"queue"}),
	}
	reg.MustRegister(p.Accepted, p.Completed, p.Latency, p.Overloaded, p.BatchSize,
		p.LeaseBusy, p.LeaseLost, p.Takeovers, p.Redriven, p.HandOffs, p.AlreadyApplied)
	return p
}
