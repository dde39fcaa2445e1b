// Package hist is the latency histogram of the per-minute rollups: fixed
// log-scale buckets, so that histograms written by different clients in
// the same minute add up bucket by bucket, and percentiles come from the
// sum.
//
// # Buckets and precision
//
// Bucket 0 holds durations below [Min] (100µs). Bucket i, for i from 1 to
// [Count]-2, holds [Min·R^(i-1), Min·R^i) with R = 2^(1/8) ≈ 1.0905; the
// last bucket holds everything from Min·R^(Count-2) (about 4.2 days) up.
// A percentile is interpolated linearly within the bucket its rank falls
// in, so it lies in the same bucket as the true value: between 100µs and
// 4.2 days it is within a factor of R of it (at most 9.05% off, in
// practice much less where durations spread over the bucket); below 100µs
// it is within 100µs; past 4.2 days it is reported as 4.2 days.
package hist

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

const (
	// Min is the upper bound of bucket 0.
	Min = 100 * time.Microsecond
	// Count is the number of buckets.
	Count = 256
	// perDoubling is how many buckets span a factor of two: R = 2^(1/8).
	perDoubling = 8
)

// R is the ratio of a bucket's upper bound to its lower bound.
var R = math.Pow(2, 1.0/perDoubling)

// Bucket is the index of the bucket that holds d.
func Bucket(d time.Duration) int {
	if d < Min {
		return 0
	}
	i := 1 + int(math.Floor(perDoubling*math.Log2(float64(d)/float64(Min))))
	// Float rounding may put a boundary value one bucket low or high:
	// correct it against the exact bounds.
	for i > 1 && d < Lower(i) {
		i--
	}
	for i < Count-1 && d >= Lower(i+1) {
		i++
	}
	return min(i, Count-1)
}

// Lower is the smallest duration bucket i holds.
func Lower(i int) time.Duration {
	if i <= 0 {
		return 0
	}
	return time.Duration(float64(Min) * math.Pow(2, float64(i-1)/perDoubling))
}

// Upper is the bound below which bucket i holds durations; the last
// bucket has none and reports its lower bound.
func Upper(i int) time.Duration {
	if i >= Count-1 {
		return Lower(Count - 1)
	}
	return Lower(i + 1)
}

// Hist counts durations per bucket. The zero value is empty and ready.
type Hist struct {
	n [Count]int64
}

// Add counts one duration; a negative one (clocks apart) counts as 0.
func (h *Hist) Add(d time.Duration) { h.n[Bucket(max(d, 0))]++ }

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.n {
		h.n[i] += c
	}
}

// Total is the number of durations counted.
func (h *Hist) Total() int64 {
	var t int64
	for _, c := range h.n {
		t += c
	}
	return t
}

// Percentile returns the duration below which a fraction q (0 < q <= 1)
// of the counted durations fall, interpolated within its bucket (see the
// package doc for the precision); 0 for an empty histogram.
func (h *Hist) Percentile(q float64) time.Duration {
	total := h.Total()
	if total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(total)
	var below int64
	for i, c := range h.n {
		if c == 0 {
			continue
		}
		if float64(below+c) >= rank {
			if i == Count-1 {
				return Lower(i)
			}
			lo, hi := float64(Lower(i)), float64(Upper(i))
			frac := (rank - float64(below)) / float64(c)
			return time.Duration(lo + (hi-lo)*frac)
		}
		below += c
	}
	return Lower(Count - 1) // not reached: the ranks add up to total
}

// MarshalJSON writes the non-empty buckets as an object from bucket index
// to count, {"52": 10, "60": 3}: small for the narrow distributions a
// minute of one queue has.
func (h *Hist) MarshalJSON() ([]byte, error) {
	m := map[string]int64{}
	for i, c := range h.n {
		if c != 0 {
			m[strconv.Itoa(i)] = c
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes, adding to h's counts.
func (h *Hist) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	for k, c := range m {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= Count || c < 0 {
			return fmt.Errorf("histogram: bucket %q with count %d: want a bucket index from 0 to %d and a count of 0 or more", k, c, Count-1)
		}
		h.n[i] += c
	}
	return nil
}

// String is the histogram as JSON, for a JSONB parameter.
func (h *Hist) String() string {
	b, _ := h.MarshalJSON() //nolint:errcheck // a map of ints always marshals
	return string(b)
}
