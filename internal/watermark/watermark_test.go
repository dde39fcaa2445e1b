package watermark

import (
	"cmp"
	"errors"
	"testing"
	"time"
)

func newMarks(parts int, maxAge time.Duration) *Marks[int] {
	m := &Marks[int]{}
	m.Init(parts, maxAge, cmp.Compare[int])
	return m
}

// TestProbeTiming: the first claim probes, the next only MaxAge later; a
// probe that took d holds the next periodic one back until 9d after it;
// ProbeBy and ProbeSoon bring a probe forward all the same.
func TestProbeTiming(t *testing.T) {
	t.Parallel()
	m := newMarks(4, time.Second)
	t0 := time.Unix(1000, 0)
	if !m.ProbeDue("q", t0) {
		t.Fatal("the first claim did not probe")
	}
	m.ProbeDone("q", t0, t0.Add(time.Millisecond))
	if m.ProbeDue("q", t0.Add(500*time.Millisecond)) {
		t.Fatal("probed again before MaxAge")
	}
	if !m.ProbeDue("q", t0.Add(time.Second)) {
		t.Fatal("no probe after MaxAge")
	}
	// A slow probe: 1s long, so the next waits until 9s after its end.
	t1 := t0.Add(time.Second)
	m.ProbeDone("q", t1, t1.Add(time.Second))
	end := t1.Add(time.Second)
	if m.ProbeDue("q", end.Add(8*time.Second)) {
		t.Fatal("a probe ran within nine times the last one's duration")
	}
	if !m.ProbeDue("q", end.Add(9*time.Second)) {
		t.Fatal("no probe nine durations after a slow one")
	}
	m.ProbeDone("q", end.Add(9*time.Second), end.Add(9*time.Second))
	later := end.Add(9 * time.Second)
	m.ProbeBy("q", later.Add(100*time.Millisecond))
	if m.ProbeDue("q", later.Add(50*time.Millisecond)) || !m.ProbeDue("q", later.Add(100*time.Millisecond)) {
		t.Fatal("ProbeBy did not bring the probe forward to its time")
	}
	m.ProbeDone("q", later, later.Add(time.Second))
	m.ProbeSoon("q")
	if !m.ProbeDue("q", later.Add(time.Second)) {
		t.Fatal("ProbeSoon waited for a slow probe's hold")
	}
	m.ProbeAllSoon()
	if !m.ProbeDue("q", later.Add(time.Millisecond)) {
		t.Fatal("ProbeAllSoon did not make the probe due")
	}
	off := newMarks(4, -1)
	if off.ProbeDue("q", t0) || off.On() {
		t.Fatal("marks that are off probe")
	}
}

// TestMarks: Advance only moves forward, Reset anywhere; Order rotates
// from its start; Below and Count see the marks; Resize drops them.
func TestMarks(t *testing.T) {
	t.Parallel()
	m := newMarks(3, time.Second)
	m.Advance("q", 1, 10)
	m.Advance("q", 1, 5)
	order, marks := m.Order("q", 1)
	if order[0] != 1 || order[1] != 2 || order[2] != 0 || !marks[0].Set || marks[0].Key != 10 || marks[1].Set {
		t.Fatalf("order %v marks %v", order, marks)
	}
	m.Reset("q", 1, 3)
	if _, marks := m.Order("q", 0); marks[1].Key != 3 {
		t.Fatalf("Reset did not move the mark back: %v", marks)
	}
	if !m.Below("q", 2) || m.Below("q", 3) || m.Below("other", 0) {
		t.Fatal("Below is wrong")
	}
	if m.Count("q") != 1 {
		t.Fatalf("Count = %d", m.Count("q"))
	}
	m.Resize(5)
	if m.Count("q") != 0 || m.Parts() != 5 {
		t.Fatal("Resize kept the marks")
	}
	if s := m.Start(); s < 0 || s >= 5 {
		t.Fatalf("Start = %d", s)
	}
}

// TestProbeIfDue: the probe runs only when due, and a run counts as the
// queue's probe (the next is not due at once).
func TestProbeIfDue(t *testing.T) {
	t.Parallel()
	m := newMarks(2, time.Hour)
	runs := 0
	probe := func() error { runs++; return nil }
	if ran, err := m.ProbeIfDue("q", probe); !ran || err != nil || runs != 1 {
		t.Fatalf("first probe: ran %v, err %v, runs %d", ran, err, runs)
	}
	if ran, _ := m.ProbeIfDue("q", probe); ran || runs != 1 {
		t.Fatalf("a probe ran again within MaxAge (runs %d)", runs)
	}
	m.ProbeSoon("q")
	if ran, err := m.ProbeIfDue("q", func() error { return errors.New("down") }); !ran || err == nil {
		t.Fatalf("a due probe that fails: ran %v, err %v", ran, err)
	}
}

// TestProbeAskedWhileOneRuns: a ProbeBy made while a probe runs (its job
// may be newer than that probe's snapshot) is not postponed by that
// probe's end, and Asked says so; a probe due by age alone is not asked.
func TestProbeAskedWhileOneRuns(t *testing.T) {
	t.Parallel()
	m := newMarks(4, time.Second)
	t0 := time.Unix(1000, 0)
	if m.Asked("q", t0) || !m.Due("q", t0) || !m.ProbeDue("q", t0) {
		t.Fatal("a queue's first probe: want due, not asked")
	}
	m.ProbeSoon("q") // a job this process enqueued, while the probe runs
	m.ProbeDone("q", t0, t0.Add(100*time.Millisecond))
	after := t0.Add(200 * time.Millisecond)
	if !m.Asked("q", after) || !m.ProbeDue("q", after) {
		t.Fatal("the probe asked for while another ran was postponed by its end")
	}
	if m.Asked("q", after) {
		t.Fatal("still asked once the asked-for probe ran")
	}
}

// TestProbeAskedBeforeTheFirstProbe: a job this process knows of, below
// a mark, asks for the probe even while the queue's first probe (due by
// age) has not begun: the next claim runs it first, not beside itself.
// Under load the first claim's beside probe could start after this
// process enqueued a better-priority job, and the claim after that missed
// the job (TestKeyJoinClaimLeasesScheduleAndHints failed so in make test).
func TestProbeAskedBeforeTheFirstProbe(t *testing.T) {
	t.Parallel()
	m := newMarks(4, time.Second)
	m.Advance("q", 0, 10) // a claim took a job: the queue has marks, no probe yet
	t0 := time.Unix(1000, 0)
	if m.Asked("q", t0) || !m.Due("q", t0) {
		t.Fatal("before any probe: want due by age, not asked")
	}
	m.ProbeSoon("q")
	if !m.Asked("q", t0) {
		t.Fatal("ProbeSoon before the queue's first probe did not ask for it: the next claim would run it beside itself")
	}
}

// TestBesideProbeLeavesAnAskedOne: a probe beside a claim (due by age)
// that starts after ProbeBy asked for one neither runs nor clears the ask:
// the next claim runs the asked probe first. (A beside probe that took
// it over could still be reading when that claim went ahead without it:
// TestKeyJoinClaimLeasesScheduleAndHints failed so in CI.)
func TestBesideProbeLeavesAnAskedOne(t *testing.T) {
	t.Parallel()
	m := newMarks(4, time.Second)
	m.Advance("q", 0, 10)
	m.ProbeSoon("q") // before the beside probe's goroutine began
	if ran, _ := m.ProbeBesideIfDue("q", func() error { return nil }); ran {
		t.Fatal("the beside probe ran the probe ProbeSoon asked for")
	}
	if !m.Asked("q", time.Now()) {
		t.Fatal("the beside probe cleared the ask: the next claim would not run it first")
	}
	if ran, _ := m.ProbeIfDue("q", func() error { return nil }); !ran || m.Asked("q", time.Now()) {
		t.Fatal("the claim's own probe did not run the asked probe")
	}
	// Due by age alone, with nothing asked, the beside probe runs.
	m2 := newMarks(4, time.Second)
	if ran, _ := m2.ProbeBesideIfDue("q", func() error { return nil }); !ran {
		t.Fatal("a beside probe due by age did not run")
	}
}

// TestLowerOnlyWidens: Lower moves a mark back, never forward, and sets
// none where there is none.
func TestLowerOnlyWidens(t *testing.T) {
	t.Parallel()
	m := newMarks(2, time.Second)
	m.Lower("q", 0, 5)
	if m.Count("q") != 0 {
		t.Fatal("Lower set a mark where there was none")
	}
	m.Advance("q", 0, 10)
	m.Lower("q", 0, 20)
	m.Lower("q", 0, 7)
	if _, marks := m.Order("q", 0); !marks[0].Set || marks[0].Key != 7 {
		t.Fatalf("mark after Lower(20) and Lower(7) from 10: %+v, want 7", marks[0])
	}
}
