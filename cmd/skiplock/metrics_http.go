package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/metrics"
)

// newMetricsRegistry is a command's Prometheus registry: skiplock's
// collectors, and the Go runtime's and the process's.
func newMetricsRegistry() (*prometheus.Registry, *metrics.Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg)
	return reg, m, err
}

// serveMetrics serves g's metrics at /metrics on addr (host:port; port 0
// picks a free one) until stop is called, and logs the address it
// listens on. Commands that serve other pages (ui) mount
// metrics.Handler on their own mux instead.
func serveMetrics(e *env, addr string, g prometheus.Gatherer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usage.Errorf("--metrics-addr %q: %v: give a free host:port, such as 127.0.0.1:9090", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(g))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.logf("serving Prometheus metrics at http://%s/metrics", ln.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.logf("metrics server: %v", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx) //nolint:errcheck // a scrape cut short at exit is harmless
		<-done
	}, nil
}
