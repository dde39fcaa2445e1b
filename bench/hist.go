package bench

import (
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/montanaflynn/stats"
)

// The histogram is log-linear, as HdrHistogram: values below 2*subBuckets
// nanoseconds get a bucket each, and every octave above is cut into
// subBuckets equal buckets, so a bucket is never wider than 1/subBuckets of
// its values (0.8%). Its memory is fixed (numBuckets counters, 58 KiB)
// whatever the run's length.
const (
	subBits    = 7
	subBuckets = 1 << subBits // per octave
	linearMax  = 2 * subBuckets
	numBuckets = linearMax + (64-subBits-1)*subBuckets
	// maxSample bounds how many representative values a summary hands to
	// the stats package: at most this many float64s, whatever the count.
	maxSample = 1 << 16
)

// bucketOf returns v's bucket index.
func bucketOf(v uint64) int {
	if v < linearMax {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [subBuckets, 2*subBuckets)
	return linearMax + (shift-1)*subBuckets + int(v>>shift) - subBuckets
}

// bucketRange returns the smallest and largest value that land in bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < linearMax {
		return uint64(i), uint64(i)
	}
	i -= linearMax
	shift := i/subBuckets + 1
	m := uint64(i%subBuckets + subBuckets)
	lo = m << shift
	return lo, lo + (uint64(1) << shift) - 1
}

// Histogram records durations in constant memory. It is safe for
// concurrent use; the zero value is not: use NewHistogram.
type Histogram struct {
	mu       sync.Mutex
	counts   []uint64
	count    uint64
	sum      float64 // nanoseconds; float so that sums never overflow
	min, max uint64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, numBuckets), min: math.MaxUint64}
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	i := bucketOf(v)
	h.mu.Lock()
	h.counts[i]++
	h.count++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
	h.mu.Unlock()
}

// Count is the number of recorded durations.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Merge adds every value of o into h.
func (h *Histogram) Merge(o *Histogram) {
	c := o.clone()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, n := range c.counts {
		h.counts[i] += n
	}
	h.count += c.count
	h.sum += c.sum
	h.min = min(h.min, c.min)
	h.max = max(h.max, c.max)
}

// clone copies h under its lock.
func (h *Histogram) clone() *Histogram {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := &Histogram{counts: append([]uint64(nil), h.counts...), count: h.count, sum: h.sum, min: h.min, max: h.max}
	return c
}

// Reset empties h and returns what it held, so that a progress line can
// summarise one interval while recording goes on.
func (h *Histogram) Reset() *Histogram {
	fresh := make([]uint64, numBuckets)
	h.mu.Lock()
	defer h.mu.Unlock()
	old := &Histogram{counts: h.counts, count: h.count, sum: h.sum, min: h.min, max: h.max}
	h.counts, h.count, h.sum, h.min, h.max = fresh, 0, 0, math.MaxUint64, 0
	return old
}

// Summary is a latency distribution in milliseconds. JSON names are the
// CLI contract (docs/benchmarks.md, "The benchmark scenarios").
type Summary struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min"`
	Avg   float64 `json:"avg"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Summary summarises h. Min, max and the average are exact (kept as
// running values); the percentiles come from stats.Percentile over
// representative values: each bucket's midpoint (clamped to the exact min
// and max), repeated as often as the bucket counts, or, past maxSample
// values, the distribution read at maxSample evenly spaced ranks. Either
// way a percentile is off by at most about one bucket's width (0.8%), and
// the memory used is bounded.
func (h *Histogram) Summary() Summary {
	c := h.clone()
	if c.count == 0 {
		return Summary{}
	}
	const ms = float64(time.Millisecond)
	s := Summary{
		Count: c.count,
		Min:   float64(c.min) / ms,
		Max:   float64(c.max) / ms,
		Avg:   c.sum / float64(c.count) / ms,
	}
	data := c.sample()
	pct := func(p float64) float64 {
		v, err := stats.Percentile(data, p)
		if err != nil { // only for empty data, which count > 0 excludes
			return math.NaN()
		}
		return v / ms
	}
	s.P50, s.P95, s.P99 = pct(50), pct(95), pct(99)
	return s
}

// sample returns representative values in ascending order (see Summary).
func (h *Histogram) sample() stats.Float64Data {
	rep := func(i int) float64 {
		lo, hi := bucketRange(i)
		lo, hi = max(lo, h.min), min(hi, h.max)
		return (float64(lo) + float64(hi)) / 2
	}
	n := h.count
	if n <= maxSample {
		out := make(stats.Float64Data, 0, n)
		for i, c := range h.counts {
			for ; c > 0; c-- {
				out = append(out, rep(i))
			}
		}
		return out
	}
	// Read the value at ranks (k+0.5)*n/maxSample, walking the buckets
	// once.
	out := make(stats.Float64Data, 0, maxSample)
	var seen uint64 // values in buckets before i
	i := 0
	for k := 0; k < maxSample; k++ {
		rank := uint64((float64(k) + 0.5) * float64(n) / maxSample)
		for i < len(h.counts) && seen+h.counts[i] <= rank {
			seen += h.counts[i]
			i++
		}
		out = append(out, rep(min(i, len(h.counts)-1)))
	}
	return out
}
