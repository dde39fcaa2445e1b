package bucketed

import "testing"

// TestWakersSignalTheirQueuesOnce: a wake signals every producer of the
// queues named, once however many wakes (cap 1), and none of another
// queue or one removed.
func TestWakersSignalTheirQueuesOnce(t *testing.T) {
	var w wakers
	a1, a2, b := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	w.add("a", a1)
	removeA2 := w.add("a", a2)
	w.add("b", b)
	w.wake([]string{"a", "a"})
	w.wake([]string{"a", "c"})
	for name, c := range map[string]chan struct{}{"a1": a1, "a2": a2} {
		if len(c) != 1 {
			t.Fatalf("producer %s holds %d signals after wakes of its queue, want 1", name, len(c))
		}
		<-c
	}
	if len(b) != 0 {
		t.Fatal("a wake of queue a signalled queue b's producer")
	}
	removeA2()
	w.wake([]string{"a"})
	if len(a2) != 0 || len(a1) != 1 {
		t.Fatalf("after a2's removal a wake gave a1 %d and a2 %d signals, want 1 and 0", len(a1), len(a2))
	}
}
