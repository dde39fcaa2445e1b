package startstop

import (
	"context"
	"errors"
	"testing"
)

type key struct{}

// TestStartStop: the loop runs under a context that keeps the caller's
// values, outlives the caller's cancellation, ends at Stop; Stop waits
// for it and Stopped says so; a second Start is refused; Stop is safe
// before Start and twice.
func TestStartStop(t *testing.T) {
	var s Service
	s.Stop() // before Start: nothing to stop
	if s.Stopped() != nil {
		t.Fatal("Stopped before Start is not nil")
	}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	running := make(chan struct{})
	returned := false
	if err := s.Start(parent, func(ctx context.Context) {
		if ctx.Value(key{}) != "v" {
			t.Error("the loop's context lost the caller's values")
		}
		close(running)
		<-ctx.Done()
		returned = true
	}); err != nil {
		t.Fatal(err)
	}
	<-running
	cancelParent() // the caller's cancellation does not stop the service
	select {
	case <-s.Stopped():
		t.Fatal("the loop ended with its starter's context")
	default:
	}
	s.Stop()
	if !returned {
		t.Fatal("Stop returned before the loop did")
	}
	<-s.Stopped()
	s.Stop() // twice: nothing left to stop
	if err := s.Start(context.Background(), func(context.Context) {}); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
}
