package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
)

// queuesListFlags binds queues list's paging flags to fs when sub is
// list, and returns the page they ask for.
func queuesListFlags(fs *flag.FlagSet, sub string) *admin.QueueFilter {
	page := &admin.QueueFilter{Limit: admin.DefaultQueueLimit}
	if sub == "list" {
		fs.IntVar(&page.Limit, "limit", admin.DefaultQueueLimit, fmt.Sprintf("page size: rows (a queue in one layout), 1 to %d", admin.MaxQueueLimit))
		fs.StringVar(&page.After, "after", "", "start after this row, NAME/LAYOUT: the last of the previous page, as the list's last line says")
	}
	return page
}

// queuesList prints a page of queues, one row per queue and layout.
func queuesList(ctx context.Context, e *env, page admin.QueueFilter) error {
	if page.Limit < 1 || page.Limit > admin.MaxQueueLimit {
		return usage.Errorf("--limit %d: use 1 to %d", page.Limit, admin.MaxQueueLimit)
	}
	if page.After != "" {
		if _, err := admin.ParseQueueKey(page.After); err != nil {
			return usage.Errorf("--after: %v", err)
		}
	}
	a, err := jobsAdmin(ctx, e)
	if err != nil {
		return err
	}
	p, err := a.ListQueues(ctx, page)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(p.Queues)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tLAYOUT\tPAUSED\tOLDEST QUEUED\tCOUNTS")
	for _, q := range p.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", q.Name, q.Layout, q.Paused, oldestText(q), countsText(q))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.NextAfter != "" {
		fmt.Fprintf(e.stdout, "(more: --after %s)\n", shellWord(p.NextAfter))
	}
	return nil
}

// oldestText is how long a queue's oldest runnable job waited, or "-".
func oldestText(q admin.Queue) string {
	if q.OldestQueuedS == nil {
		return "-"
	}
	return (time.Duration(*q.OldestQueuedS * float64(time.Second))).Round(time.Millisecond).String()
}

// countsText is a queue's counts by state, "queued 3, running 1", a
// count that stopped at admin.CountCap as "N+" (at least N).
func countsText(q admin.Queue) string {
	var parts []string
	for _, s := range admin.States {
		if n, ok := q.Counts[s]; ok || q.Capped[s] {
			if q.Capped[s] {
				parts = append(parts, fmt.Sprintf("%s %d+", s, n))
			} else {
				parts = append(parts, fmt.Sprintf("%s %d", s, n))
			}
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// shellWord quotes s for a shell when it holds more than letters,
// digits and -_./:@, so that the hint pastes as one argument.
func shellWord(s string) string {
	plain := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@", r))
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
