package bucketed

import (
	"slices"
	"sync"
)

// wakers are the producers of a Queue's running Workers, by the queue
// they work, that a workflow release written by this process wakes once
// it commits (Queue.settle). A drained producer otherwise waits for a
// notification, which none sends where nobody listens (client.NotifyOff,
// a transaction pooler without a listen DSN, YugabyteDB without
// LISTEN/NOTIFY), or for its poll interval: each step of a workflow
// would wait that long even in the process that completed its
// dependencies.
type wakers struct {
	mu sync.Mutex
	by map[string][]chan<- struct{}
}

// add registers c (cap 1: a wake is one signal, however many releases)
// for queue, and returns its removal.
func (w *wakers) add(queue string, c chan<- struct{}) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = map[string][]chan<- struct{}{}
	}
	w.by[queue] = append(w.by[queue], c)
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.by[queue] = slices.DeleteFunc(w.by[queue], func(x chan<- struct{}) bool { return x == c })
		if len(w.by[queue]) == 0 {
			delete(w.by, queue)
		}
	}
}

// wake signals, without waiting, every producer registered for the
// queues.
func (w *wakers) wake(queues []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range queues {
		for _, c := range w.by[q] {
			select {
			case c <- struct{}{}:
			default: // already signalled
			}
		}
	}
}
