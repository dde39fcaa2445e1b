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
// waiting in hand never starts, and the heartbeat extends neither. A job
// whose handler has returned is kept: its result may yet be written.
func TestLapsedJobInHandNeverStarts(t *testing.T) {
	const visibility = 10 * time.Second
	b := newLeaseBook(visibility, slog.New(slog.NewTextHandler(io.Discard, nil)))
	claimed := time.Now()
	running, waiting, fresh, done := &skiplock.Job{ID: "1"}, &skiplock.Job{ID: "2"}, &skiplock.Job{ID: "3"}, &skiplock.Job{ID: "4"}
	b.claimed([]*skiplock.Job{running, waiting, done}, claimed.Add(visibility))
	if !b.running(done, func() { t.Error("a returned handler's cancel was called") }) {
		t.Fatal("a job in hand with its lease held was refused its start")
	}
	b.returned(done)
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
	if got := b.inHand(); len(got) != 2 || (got[0] != fresh && got[1] != fresh) || (got[0] != done && got[1] != done) {
		t.Fatalf("in hand for the heartbeat: %v, want the job returned and the one claimed later", got)
	}
	b.written([]result{{job: running}, {job: waiting}, {job: done}})
	if len(b.lapsed) != 0 || len(b.until) != 1 {
		t.Fatalf("after their drops were written the book still holds %d lapsed, %d leases", len(b.lapsed), len(b.until))
	}
}
