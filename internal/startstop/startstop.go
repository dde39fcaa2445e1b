// Package startstop is the one start/stop shape of skiplock's long-lived
// services (River's startstop, in small): Start runs the service's loop
// in a goroutine under a context that Stop cancels, Stop waits for the
// loop to return, and Stopped is closed once it has. A service starts
// once: a second Start is an error, and Stop before Start or after Stop
// does nothing.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is Start's error for a service that was started before.
var ErrStarted = errors.New("startstop: the service was started already (a service runs once: make another)")

// Service runs one loop. The zero value is ready; embed it or hold one
// per service.
type Service struct {
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	stopped chan struct{}
}

// Start runs loop in a goroutine under a context that Stop cancels; the
// context carries ctx's values but not its cancellation, so that a
// service outlives the call that started it until Stop.
func (s *Service) Start(ctx context.Context, loop func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.stopped = make(chan struct{})
	go func() {
		defer close(s.stopped)
		loop(ctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for the loop to return.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-stopped
}

// Stopped is closed once the loop has returned; nil before Start.
func (s *Service) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}
