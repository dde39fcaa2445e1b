package hist

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestBucketBounds: every bucket holds its lower bound and not its upper
// one, bounds grow by R, and the ends are bucket 0 and the last bucket.
func TestBucketBounds(t *testing.T) {
	if Bucket(0) != 0 || Bucket(Min-1) != 0 || Bucket(Min) != 1 || Bucket(-time.Second) != 0 {
		t.Fatalf("bucket 0: %d %d %d", Bucket(0), Bucket(Min-1), Bucket(Min))
	}
	for i := 1; i < Count-1; i++ {
		if got := Bucket(Lower(i)); got != i {
			t.Fatalf("Bucket(Lower(%d) = %v) = %d", i, Lower(i), got)
		}
		if got := Bucket(Upper(i) - 1); got != i {
			t.Fatalf("Bucket(Upper(%d)-1 = %v) = %d", i, Upper(i)-1, got)
		}
		if r := float64(Upper(i)) / float64(Lower(i)); math.Abs(r-R) > 1e-4 {
			t.Fatalf("bucket %d spans a ratio of %v, want %v", i, r, R)
		}
	}
	if Bucket(365*24*time.Hour) != Count-1 || Lower(Count-1) < 4*24*time.Hour {
		t.Fatalf("the last bucket starts at %v", Lower(Count-1))
	}
}

// exact is the q-th percentile of sorted values by rank ceil(q·n).
func exact(sorted []time.Duration, q float64) time.Duration {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(k, 0)]
}

// TestPercentileWithinPrecision: for several distributions, each
// percentile is within a factor of R of the exact one, and lies in the
// exact one's bucket.
func TestPercentileWithinPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() time.Duration{
		"constant 20ms": func() time.Duration { return 20 * time.Millisecond },
		"uniform 10-30ms": func() time.Duration {
			return 10*time.Millisecond + time.Duration(rng.Int64N(int64(20*time.Millisecond)))
		},
		"20ms or 80ms": func() time.Duration {
			return []time.Duration{20 * time.Millisecond, 80 * time.Millisecond}[rng.IntN(2)]
		},
		"log-uniform":      func() time.Duration { return time.Duration(float64(time.Millisecond) * math.Pow(10, rng.Float64()*5)) },
		"exponential 50ms": func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond)) },
	}
	for name, gen := range dists {
		var h Hist
		var all []time.Duration
		for range 10000 {
			d := gen()
			all = append(all, d)
			h.Add(d)
		}
		slices.Sort(all)
		if h.Total() != int64(len(all)) {
			t.Fatalf("%s: total %d", name, h.Total())
		}
		for _, q := range []float64{0.5, 0.95, 0.99, 1} {
			got, want := h.Percentile(q), exact(all, q)
			if Bucket(got) != Bucket(want) && got != Upper(Bucket(want)) {
				t.Errorf("%s: p%v = %v, exact %v: not in its bucket [%v, %v)", name, q*100, got, want, Lower(Bucket(want)), Upper(Bucket(want)))
			}
			if want >= Min {
				if r := float64(got) / float64(want); r > R || r < 1/R {
					t.Errorf("%s: p%v = %v, exact %v: off by a factor %.4f, more than R = %.4f", name, q*100, got, want, r, R)
				}
			}
		}
	}
}

// TestPercentileInterpolates: four values in one bucket put the median
// half way through it; an empty histogram reports 0; the last bucket
// reports its lower bound.
func TestPercentileInterpolates(t *testing.T) {
	var h Hist
	if h.Percentile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	b := Bucket(20 * time.Millisecond)
	for range 4 {
		h.Add(20 * time.Millisecond)
	}
	lo, hi := Lower(b), Upper(b)
	if got, want := h.Percentile(0.5), lo+(hi-lo)/2; got < want-1 || got > want+1 {
		t.Fatalf("p50 = %v, want %v (half way through [%v, %v))", got, want, lo, hi)
	}
	if got := h.Percentile(1); got < hi-1 || got > hi {
		t.Fatalf("p100 = %v, want the bucket's upper bound %v", got, hi)
	}
	var far Hist
	far.Add(30 * 24 * time.Hour)
	if got := far.Percentile(0.99); got != Lower(Count-1) {
		t.Fatalf("p99 of 30 days = %v, want the last bucket's lower bound %v", got, Lower(Count-1))
	}
}

// TestMergeAndJSON: the merge of two histograms, through JSON, equals the
// histogram of all their values; bad JSON is refused.
func TestMergeAndJSON(t *testing.T) {
	var a, b, all Hist
	for i := range 1000 {
		d := time.Duration(i) * 137 * time.Microsecond
		all.Add(d)
		if i%3 == 0 {
			a.Add(d)
		} else {
			b.Add(d)
		}
	}
	var merged Hist
	for _, h := range []*Hist{&a, &b} {
		if err := json.Unmarshal([]byte(h.String()), &merged); err != nil {
			t.Fatal(err)
		}
	}
	if merged != all {
		t.Fatalf("merged through JSON %s, want %s", merged.String(), all.String())
	}
	a.Merge(&b)
	if a != all {
		t.Fatal("Merge differs from adding every value")
	}
	for _, bad := range []string{`[1,2]`, `{"x": 1}`, `{"256": 1}`, `{"3": -1}`} {
		var h Hist
		if err := json.Unmarshal([]byte(bad), &h); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}
