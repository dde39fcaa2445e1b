package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skiplock/skiplock/internal/metricsink"
)

// Metrics are skiplock's Prometheus collectors, registered in one
// registry by New; give them to client.Config.Metrics (and the dashboard's
// config) and serve them with Handler. Only skiplock writes to them.
// A nil *Metrics is valid and counts nothing.
//
// Counters and histograms count what this process did. The gauges
// skiplock_queue_* describe the queue as a whole: the schema's
// maintenance leader samples them, and only a process that leads exports
// them (a process that loses the lead drops them at once, so no stale
// value lingers). Scrape every process: sum the counters across them, and
// read the queue gauges from whichever process has skiplock_leader 1.
type Metrics struct {
	r *metricsink.Recorder
}

func init() {
	metricsink.Of = func(m any) *metricsink.Recorder {
		if mm, _ := m.(*Metrics); mm != nil {
			return mm.r
		}
		return nil
	}
}

// OtherQueues is the queue label under which the queues beyond
// MaxQueueLabels are counted, together.
const OtherQueues = metricsink.OtherQueues

// DefaultMaxQueueLabels is how many queues get a queue label of their own
// unless MaxQueueLabels says otherwise.
const DefaultMaxQueueLabels = metricsink.DefaultMaxQueueLabels

// Option tunes New; MaxQueueLabels makes one.
type Option struct{ set func(*metricsink.Options) }

// MaxQueueLabels bounds how many queues get a queue label of their own,
// so that a schema with thousands of queues keeps a bounded set of
// series: the first n queues the Metrics meets (in an insert, an outcome
// or the leader's sample) keep their label for its life, and every later
// one is counted under OtherQueues (its counters add up there; its queue
// gauges are summed, the oldest wait is the longest, queue_paused counts
// the paused queues). First come keeps the labels stable: a queue's
// series never moves to OtherQueues once it has its own. 0 means
// DefaultMaxQueueLabels; negative, no limit.
func MaxQueueLabels(n int) Option {
	return Option{func(o *metricsink.Options) { o.MaxQueueLabels = n }}
}

// New makes skiplock's collectors and registers them in reg
// (prometheus.DefaultRegisterer when nil). Register once per registry:
// a second New on the same registry fails with an error that says so;
// share the first Metrics between the clients of a process instead.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	var o metricsink.Options
	for _, opt := range opts {
		if opt.set != nil {
			opt.set(&o)
		}
	}
	r, err := metricsink.New(reg, o)
	if err != nil {
		return nil, err
	}
	return &Metrics{r: r}, nil
}

// Unregister removes the collectors from the registry New put them in.
func (m *Metrics) Unregister() {
	if m != nil {
		m.r.Unregister()
	}
}

// Handler serves the metrics g gathers (a *prometheus.Registry, or
// prometheus.DefaultGatherer when nil) in the Prometheus exposition
// format: mount it at /metrics.
func Handler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
