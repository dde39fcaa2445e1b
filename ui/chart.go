package ui

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/skiplock/skiplock/admin"
)

// window is one chart period of the overview: its buckets of the
// per-minute rollups, summed over the queues.
type window struct {
	// Name is "hour" or "day"; Label its heading.
	Name, Label string
	// Since is the first bucket's start: the rollups of minutes from
	// Since on are in the window.
	Since time.Time
	// Step is a bucket's length.
	Step time.Duration
	// Completed and Failed are the window's totals.
	Completed, Failed int64
	// Buckets are the points, oldest first.
	Buckets []bucket
}

// bucket is one point of a chart: Step's worth of minutes.
type bucket struct {
	At                time.Time
	Completed, Failed int64
	// The latencies are the minutes' percentiles averaged with the
	// minutes' job counts as weights (percentiles do not add up; this is
	// the usual approximation); NaN when no job finished.
	WaitP50, WaitP95, RunP50, RunP95 float64
	weight                           float64
}

// newWindow makes a window of n buckets of step ending with the bucket
// that holds now, and adds the rollups that fall in it.
func newWindow(name, label string, now time.Time, step time.Duration, n int, rollups []admin.Rollup) window {
	last := now.UTC().Truncate(step)
	w := window{Name: name, Label: label, Step: step, Since: last.Add(-time.Duration(n-1) * step), Buckets: make([]bucket, n)}
	for i := range w.Buckets {
		w.Buckets[i].At = w.Since.Add(time.Duration(i) * step)
	}
	for _, r := range rollups {
		if r.Minute.Before(w.Since) {
			continue
		}
		i := int(r.Minute.Sub(w.Since) / step)
		if i >= n {
			continue // past the last bucket (a clock ahead of ours)
		}
		b := &w.Buckets[i]
		b.Completed += r.Completed
		b.Failed += r.Failed
		w.Completed += r.Completed
		w.Failed += r.Failed
		if wt := float64(r.Completed + r.Failed); wt > 0 {
			b.weight += wt
			b.WaitP50 += wt * r.WaitP50.Seconds()
			b.WaitP95 += wt * r.WaitP95.Seconds()
			b.RunP50 += wt * r.RunP50.Seconds()
			b.RunP95 += wt * r.RunP95.Seconds()
		}
	}
	for i := range w.Buckets {
		b := &w.Buckets[i]
		if b.weight == 0 {
			b.WaitP50, b.WaitP95, b.RunP50, b.RunP95 = math.NaN(), math.NaN(), math.NaN(), math.NaN()
			continue
		}
		b.WaitP50 /= b.weight
		b.WaitP95 /= b.weight
		b.RunP50 /= b.weight
		b.RunP95 /= b.weight
	}
	return w
}

// series is one line of a chart; Class picks its colour in style.css.
type series struct {
	Name, Class string
	Values      []float64
}

// Throughput draws the completed and failed jobs per bucket.
func (w window) Throughput() template.HTML {
	c, f := make([]float64, len(w.Buckets)), make([]float64, len(w.Buckets))
	for i, b := range w.Buckets {
		c[i], f[i] = float64(b.Completed), float64(b.Failed)
	}
	title := fmt.Sprintf("jobs per %s", shortDuration(w.Step))
	return svgChart(title, w.Buckets, []series{{"completed", "s-ok", c}, {"failed", "s-bad", f}}, countLabel, 2, w.Completed+w.Failed == 0)
}

// Latency draws the wait (run_at to start) and run times.
func (w window) Latency() template.HTML {
	n := len(w.Buckets)
	wp50, wp95, rp50, rp95 := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	any := false
	for i, b := range w.Buckets {
		wp50[i], wp95[i], rp50[i], rp95[i] = b.WaitP50, b.WaitP95, b.RunP50, b.RunP95
		any = any || !math.IsNaN(b.WaitP50)
	}
	return svgChart("latency (seconds)", w.Buckets, []series{
		{"wait p50", "s-wait50", wp50}, {"wait p95", "s-wait95", wp95},
		{"run p50", "s-run50", rp50}, {"run p95", "s-run95", rp95},
	}, secondsLabel, 0.001, !any)
}

// niceCeil rounds a chart's top up to 1, 2 or 5 times a power of ten,
// and at least to floor (2 for counts, so that the half is whole).
func niceCeil(v, floor float64) float64 {
	if v <= floor {
		return floor
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func countLabel(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func secondsLabel(v float64) string {
	return shortDuration(time.Duration(v * float64(time.Second)))
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH         = 560, 170
	padL, padR, padT, padB = 48, 10, 24, 22
)

// svgChart draws the series as lines over the buckets, with a y axis
// from 0 to the largest value, the first and last bucket's times under
// it and a legend above. Missing values (NaN) break the lines. Each
// point carries a <title> so that hovering shows its value.
func svgChart(title string, buckets []bucket, ss []series, label func(float64) string, floor float64, empty bool) template.HTML {
	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">`, chartW, chartH, esc(title))
	fmt.Fprintf(&b, `<text class="c-title" x="%d" y="14">%s</text>`, padL, esc(title))
	maxV := 0.0
	for _, s := range ss {
		for _, v := range s.Values {
			if !math.IsNaN(v) && v > maxV {
				maxV = v
			}
		}
	}
	maxV = niceCeil(maxV, floor)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	x := func(i int) float64 {
		if len(buckets) < 2 {
			return padL
		}
		return padL + plotW*float64(i)/float64(len(buckets)-1)
	}
	y := func(v float64) float64 { return padT + plotH*(1-v/maxV) }
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<line class="c-grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y(f*maxV), y(f*maxV))
		fmt.Fprintf(&b, `<text class="c-axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-4, y(f*maxV)+4, esc(label(f*maxV)))
	}
	if n := len(buckets); n > 0 {
		layout := "15:04"
		if buckets[n-1].At.Sub(buckets[0].At) > 12*time.Hour {
			layout = "Jan 2 15:04"
		}
		fmt.Fprintf(&b, `<text class="c-axis" x="%d" y="%d">%s</text>`, padL, chartH-6, buckets[0].At.Format(layout))
		fmt.Fprintf(&b, `<text class="c-axis" x="%d" y="%d" text-anchor="end">%s UTC</text>`, chartW-padR, chartH-6, buckets[n-1].At.Format(layout))
	}
	// The legend, right-aligned in the title row.
	lx := chartW - padR
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		fmt.Fprintf(&b, `<text class="c-legend %s" x="%d" y="14" text-anchor="end">● %s</text>`, s.Class, lx, esc(s.Name))
		lx -= 12 + 7*len([]rune(s.Name))
	}
	if empty {
		fmt.Fprintf(&b, `<text class="c-empty" x="%.1f" y="%.1f" text-anchor="middle">no jobs finished in this window</text>`, padL+plotW/2, padT+plotH/2)
	}
	for _, s := range ss {
		if empty {
			break
		}
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline class="c-line %s" points="%s"/>`, s.Class, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, v := range s.Values {
			if math.IsNaN(v) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
		}
		flush()
		for i, v := range s.Values {
			if math.IsNaN(v) || (v == 0 && len(s.Values) > 1) {
				continue
			}
			fmt.Fprintf(&b, `<circle class="c-dot %s" cx="%.1f" cy="%.1f" r="2"><title>%s %s: %s</title></circle>`,
				s.Class, x(i), y(v), buckets[i].At.Format("15:04"), esc(s.Name), esc(label(v)))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped labels
}

// shortDuration prints a duration with a few significant digits: 1m, 15m,
// 1.5s, 230ms.
func shortDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") + "s"
	case d < time.Hour:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Minutes()), ".0") + "m"
	case d < 48*time.Hour:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Hours()), ".0") + "h"
	}
	return fmt.Sprintf("%.0fd", d.Hours()/24)
}
