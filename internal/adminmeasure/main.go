// Command adminmeasure times admin.Queues and admin.List pages (the
// median of 5 calls each) against a schema loaded with load.psql (and
// grown with grow.psql): the figures of docs/benchmarks.md, "Admin queries at
// scale". Against a throwaway server, not one with data that matters:
//
//	bin/skiplock migrate                      # schema "skiplock"
//	psql "$DSN" -f internal/adminmeasure/load.psql
//	DSN="$DSN" go run ./internal/adminmeasure
//	psql "$DSN" -f internal/adminmeasure/grow.psql
//	DSN="$DSN" go run ./internal/adminmeasure
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
)

func main() {
	ctx := context.Background()
	db, err := skiplock.Open(ctx, os.Getenv("DSN"), nil)
	if err != nil {
		fail(err)
	}
	a, err := admin.New(ctx, db, "skiplock")
	if err != nil {
		fail(err)
	}
	med := func(name string, f func() int) {
		var ds []time.Duration
		n := 0
		for range 5 {
			t := time.Now()
			n = f()
			ds = append(ds, time.Since(t))
		}
		slices.Sort(ds)
		fmt.Printf("%-40s median %8.1f ms  (min %7.1f, max %7.1f)  rows %d\n", name, float64(ds[2].Microseconds())/1000, float64(ds[0].Microseconds())/1000, float64(ds[4].Microseconds())/1000, n)
	}
	med("Queues", func() int {
		qs, err := a.Queues(ctx)
		if err != nil {
			fail(err)
		}
		if os.Getenv("V") != "" {
			fmt.Printf("%+v\n", qs)
		}
		return len(qs)
	})
	list := func(f admin.Filter, pages int) func() int {
		return func() int {
			f := f // every run starts at the first page
			n := 0
			for range pages {
				js, err := a.List(ctx, f)
				if err != nil {
					fail(err)
				}
				n += len(js)
				if len(js) == 0 {
					break
				}
				f.After = js[len(js)-1].ID
			}
			return n
		}
	}
	for _, c := range []struct {
		name string
		f    admin.Filter
	}{
		{"List unfiltered", admin.Filter{}},
		{"List queue=q1 state=queued", admin.Filter{Queue: "q1", State: "queued"}},
		{"List queue=q1 state=failed", admin.Filter{Queue: "q1", State: "failed"}},
		{"List kind=k3", admin.Filter{Kind: "k3"}},
		{"List state=queued", admin.Filter{State: "queued"}},
		{"List state=running", admin.Filter{State: "running"}},
		{"List state=success", admin.Filter{State: "success"}},
		{"List queue=q1 state=success", admin.Filter{Queue: "q1", State: "success"}},
		{"List layout=fanout", admin.Filter{Layout: "fanout"}},
		{"List state=dead", admin.Filter{State: "dead"}},
	} {
		med(c.name+" (first page)", list(c.f, 1))
	}
	med("List unfiltered, 10 pages", list(admin.Filter{}, 10))
	med("List queue=q1 state=queued, 10 pages", list(admin.Filter{Queue: "q1", State: "queued"}, 10))
	med("List layout=fanout, 10 pages", list(admin.Filter{Layout: "fanout"}, 10))
}

// fail says what went wrong and exits.
func fail(err error) {
	fmt.Fprintln(os.Stderr, "adminmeasure:", err, "(set DSN to a server whose schema skiplock holds load.psql's jobs)")
	os.Exit(1)
}
