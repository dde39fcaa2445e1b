package ui

import (
	"net/http"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
)

// The queue listings, GET /api/queues and the overview page, are paged
// by queue and layout: limit= rows after the previous page's last queue
// as NAME/LAYOUT, which the API takes as after= and the overview as
// after_queue= (its after= stays a job's id, as on every page: the
// overview's links carry the job list's filters).

// queueAfter checks the queue listings' cursor parameter, named name.
func queueAfter(name string) param {
	return param{name: name, max: skiplock.MaxQueueNameLen + len("/bucketed"),
		takes: "the previous page's last queue as NAME/LAYOUT (its next_after), such as default/bucketed",
		valid: func(v string) bool { _, err := admin.ParseQueueKey(v); return err == nil }}
}

// apiQueuesPath is the API that lists queues; its after= is a queue's.
const apiQueuesPath = "/api/queues"

// overviewAfter is the overview's cursor parameter.
const overviewAfter = "after_queue"

// queueFilter reads a page of queues from the query string, the cursor
// from the parameter named after: a bad limit or cursor is a usage error
// (400) naming the parameter.
func queueFilter(r *http.Request, after string) (admin.QueueFilter, error) {
	q := r.URL.Query()
	f := admin.QueueFilter{After: q.Get(after)}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > admin.MaxQueueLimit {
			return f, usage.Errorf("bad parameter limit=%s: limit takes a number from 1 to %d", quoteShort(l), admin.MaxQueueLimit)
		}
		f.Limit = n
	}
	if err := queueAfter(after).check(f.After); err != nil {
		return f, err
	}
	return f, nil
}

// chartQueues are the page's queue names, each once, for the charts'
// queue menu: the rollups are per name, whatever the layout.
func chartQueues(qs []admin.Queue) []string {
	var out []string
	for i, q := range qs {
		if i == 0 || qs[i-1].Name != q.Name {
			out = append(out, q.Name)
		}
	}
	return out
}
