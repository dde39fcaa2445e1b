package bench

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/montanaflynn/stats"
)

func TestBucketsCoverEveryValueOnce(t *testing.T) {
	t.Parallel()
	prevHi := uint64(0)
	for i := 0; i < numBuckets; i++ {
		lo, hi := bucketRange(i)
		if i > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, want %d (gap or overlap)", i, lo, prevHi+1)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: ends map to %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= linearMax && float64(hi-lo+1)/float64(lo) > 1.0/subBuckets {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d of its values", i, lo, hi, subBuckets)
		}
		prevHi = hi
	}
	if prevHi != math.MaxUint64 {
		t.Fatalf("last bucket ends at %d, want MaxUint64", prevHi)
	}
}

// checkClose fails unless got is within rel of want.
func checkClose(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.6f, exact %.6f (off by %.3f%%, allowed %.3f%%)", what, got, want, 100*math.Abs(got-want)/want, 100*rel)
	}
}

func TestSummaryMatchesExactPercentiles(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() time.Duration{
		// Around the article's 1 s jobs, with a tail.
		"normal 1s": func() time.Duration { return time.Duration((1 + 0.02*rng.NormFloat64()) * float64(time.Second)) },
		// Lock-only transactions: milliseconds, heavy tail.
		"lognormal 10ms": func() time.Duration {
			return time.Duration(math.Exp(rng.NormFloat64()) * 10 * float64(time.Millisecond))
		},
		"uniform 0..5ms": func() time.Duration { return time.Duration(rng.Int64N(int64(5 * time.Millisecond))) },
	}
	for name, draw := range dists {
		for _, n := range []int{1, 7, 1000, maxSample, 300_000} {
			h := NewHistogram()
			exact := make(stats.Float64Data, n)
			for i := range exact {
				d := draw()
				h.Record(d)
				exact[i] = float64(max(d, 0)) / float64(time.Millisecond)
			}
			s := h.Summary()
			if s.Count != uint64(n) {
				t.Fatalf("%s n=%d: count %d", name, n, s.Count)
			}
			mn, _ := stats.Min(exact)
			mx, _ := stats.Max(exact)
			avg, _ := stats.Mean(exact)
			checkClose(t, name+" min", s.Min, mn, 1e-9)
			checkClose(t, name+" max", s.Max, mx, 1e-9)
			checkClose(t, name+" avg", s.Avg, avg, 1e-9)
			for _, p := range []struct {
				pct float64
				got float64
			}{{50, s.P50}, {95, s.P95}, {99, s.P99}} {
				want, _ := stats.Percentile(exact, p.pct)
				// A bucket is at most 1/128 wide; the midpoint halves that.
				// Past maxSample values the rank sampling adds a little.
				checkClose(t, name+" p"+ftoa(p.pct), p.got, want, 0.01)
			}
		}
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func TestSummaryEmptyAndMerge(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	if s := h.Summary(); s != (Summary{}) {
		t.Fatalf("empty summary = %+v", s)
	}
	a, b := NewHistogram(), NewHistogram()
	for i := 1; i <= 100; i++ {
		a.Record(time.Duration(i) * time.Millisecond)
		b.Record(time.Duration(100+i) * time.Millisecond)
	}
	a.Merge(b)
	s := a.Summary()
	if s.Count != 200 || s.Min != 1 || s.Max != 200 || s.Avg != 100.5 {
		t.Fatalf("merged summary = %+v", s)
	}
	old := a.Reset()
	if old.Count() != 200 || a.Count() != 0 {
		t.Fatalf("after Reset: old %d, new %d", old.Count(), a.Count())
	}
}

// The histogram's memory is its fixed bucket array: recording a run's
// worth of values (500 workers for 1000 s at 1 job/s each, and far more)
// allocates nothing, and a summary's sample is bounded.
func TestHistogramMemoryIsConstant(t *testing.T) {
	// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
	h := NewHistogram()
	rng := rand.New(rand.NewPCG(3, 4))
	allocs := testing.AllocsPerRun(1, func() {
		for i := 0; i < 600_000; i++ {
			h.Record(time.Duration(rng.Int64N(int64(10 * time.Second))))
		}
	})
	if allocs != 0 {
		t.Fatalf("recording allocated %v times", allocs)
	}
	if got := len(h.clone().sample()); got != maxSample {
		t.Fatalf("summary sample of %d values has %d entries, want the cap %d", h.Count(), got, maxSample)
	}
	if len(h.counts) != numBuckets {
		t.Fatalf("bucket array grew to %d", len(h.counts))
	}
}
