package bucketed

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// TestLapsedJobInHandNeverStarts: a job whose lease is about to lapse
// unextended is given up: a running handler is cancelled, one still
// waiting in hand never starts, and the heartbeat extends neither.
func TestLapsedJobInHandNeverStarts(t *testing.T) {
	const visibility = 10 * time.Second
	b := newLeaseBook(visibility, slog.New(slog.NewTextHandler(io.Discard, nil)))
	claimed := time.Now()
	running, waiting, fresh := &skiplock.Job{ID: "1"}, &skiplock.Job{ID: "2"}, &skiplock.Job{ID: "3"}
	b.claimed([]*skiplock.Job{running, waiting}, claimed.Add(visibility))
	cancelled := false
	if !b.running(running, func() { cancelled = true }) {
		t.Fatal("a job in hand with its lease held was refused its start")
	}
	margin := leaseMargin(visibility)
	if got, want := b.nextLapse(claimed), claimed.Add(visibility-margin); !got.Equal(want) {
		t.Fatalf("next lapse %v, want the claim's lease less the margin %v", got, want)
	}
	if n := b.lapse(claimed.Add(visibility - margin - time.Millisecond)); n != 0 || cancelled {
		t.Fatalf("lapse before the margin gave up %d jobs (cancelled %v)", n, cancelled)
	}
	b.claimed([]*skiplock.Job{fresh}, claimed.Add(2*visibility))
	if n := b.lapse(claimed.Add(visibility - margin)); n != 2 || !cancelled {
		t.Fatalf("lapse at the margin gave up %d jobs (cancelled %v), want the 2 claimed first and the running handler cancelled", n, cancelled)
	}
	if b.running(waiting, func() {}) {
		t.Fatal("a job whose lease lapsed in hand was let start")
	}
	if got := b.inHand(); len(got) != 1 || got[0] != fresh {
		t.Fatalf("in hand for the heartbeat: %v, want only the job claimed later", got)
	}
	b.written([]result{{job: running}, {job: waiting}})
	if len(b.lapsed) != 0 || len(b.until) != 1 {
		t.Fatalf("after their drops were written the book still holds %d lapsed, %d leases", len(b.lapsed), len(b.until))
	}
}
