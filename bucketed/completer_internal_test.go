package bucketed

import (
	"fmt"
	"testing"

	"github.com/skiplock/skiplock"
)

// TestReleaseParts: a batch's jobs without dependents come first, in one
// part; those with dependents in groups whose dependents add up to no more
// than releasePart, a job with more alone; every result exactly once, in
// its order.
func TestReleaseParts(t *testing.T) {
	res := func(deps ...int) []result {
		out := make([]result, len(deps))
		for i, d := range deps {
			out[i] = result{job: &skiplock.Job{ID: fmt.Sprint(i), Dependents: d}}
		}
		return out
	}
	show := func(plain []result, parts [][]result) string {
		ids := func(rs []result) []string {
			var s []string
			for _, r := range rs {
				s = append(s, r.job.ID)
			}
			return s
		}
		out := fmt.Sprint(ids(plain))
		for _, p := range parts {
			out += fmt.Sprint(ids(p))
		}
		return out
	}
	half := releasePart / 2
	for _, c := range []struct {
		name  string
		batch []result
		want  string
	}{
		{"no dependents: the batch as it is", res(0, 0, 0), "[0 1 2]"},
		{"plain first, then groups", res(half, 0, half, half, 0), "[1 4][0 2][3]"},
		{"one over the bound alone", res(1, releasePart+1, 1), "[][0][1][2]"},
		{"only dependents", res(1, 1, 1), "[][0 1 2]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain, parts := releaseParts(c.batch)
			if got := show(plain, parts); got != c.want {
				t.Errorf("parts %s; want %s", got, c.want)
			}
		})
	}
}
