package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/internal/logs"
	"github.com/skiplock/skiplock/maintenance"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/bucketed"
	"github.com/skiplock/skiplock/internal/usage"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"overview", "jobs", "job", "queue", "workflow", "periodic", "clients", "error"}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		if d := time.Since(t); d >= 0 {
			return shortDuration(d) + " ago"
		}
		return "in " + shortDuration(time.Until(t))
	},
	"age": func(s *float64) string {
		if s == nil {
			return "-"
		}
		return shortDuration(time.Duration(*s * float64(time.Second)))
	},
	"dur": func(from time.Time, to *time.Time) string {
		if to == nil {
			return "-"
		}
		return shortDuration(to.Sub(from))
	},
	"pretty": func(raw json.RawMessage) string {
		var b bytes.Buffer
		if len(raw) == 0 {
			return "-"
		}
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"path": url.PathEscape,
	// show writes a value users or their jobs supplied: every such text
	// in element content goes through it (see show).
	"show":  show,
	"count": func(counts map[string]int64, state string) int64 { return counts[state] },
	// workflowStates are a workflow's job states in lifecycle order.
	"workflowStates": func() []string { return []string{"waiting", "queued", "running", "success", "failed", "canceled"} },
	// countText shows a count, "100,000+" when it stopped at the cap
	// (admin.Queue.Capped): at least that many.
	"countText": countText,
	// The states each action applies to, in either layout (bucketed's and
	// fanout's rules: see admin.Do).
	"canRetry":  func(state string) bool { return slices.Contains([]string{"failed", "canceled", "dead"}, state) },
	"canCancel": func(state string) bool { return state == "queued" || state == "running" },
	"canDelete": func(state string) bool {
		return slices.Contains([]string{"success", "failed", "canceled", "dead"}, state)
	},
}

// countText is n as the overview shows it: the number, or, when the
// count stopped at admin.CountCap (capped), the number with thousands
// separators and a "+", read "at least".
func countText(n int64, capped bool) string {
	if !capped {
		return strconv.FormatInt(n, 10)
	}
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s + "+"
}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: parse the %s page: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// page is what every page's template gets: the layout's fields and the
// page's own Data.
type page struct {
	Title    string
	Nav      string
	Base     string
	CSRF     string
	ReadOnly bool
	Schema   string
	Engine   string
	Data     any
	// Leader is the maintenance leader's lease; NoLeader says none runs
	// (every page says so: rescues, pruning, periodic jobs, gauges and
	// the charts' minutes wait for one).
	Leader   *maintenance.Leader
	NoLeader bool
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	p := page{Title: title, Nav: name, Base: s.cfg.BasePath, CSRF: s.csrf, ReadOnly: s.cfg.ReadOnly,
		Schema: s.schema, Engine: engineName(s.db), Data: data}
	if l, err := maintenance.CurrentLeader(r.Context(), s.db, s.schema); err == nil {
		p.Leader, p.NoLeader = l, l == nil || !l.Live
	}
	var b bytes.Buffer
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.cfg.Logger.Warn("rendering a page failed", "page", name, logs.Err(err))
		http.Error(w, "internal error: the dashboard could not render the page; the server's log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes()) //nolint:errcheck // the client went away
}

// failPage shows an error in the layout, with its status.
func (s *Server) failPage(w http.ResponseWriter, r *http.Request, err error) {
	code := status(err)
	s.render(w, r, code, "error", http.StatusText(code), s.publicText(r, code, err))
}

// overview is the overview page's data.
type overview struct {
	// Queues are a page of queues, one row per queue and layout.
	Queues []admin.Queue
	States []string
	// Totals are the schema's, every queue's (admin.QueuePage.Totals).
	Totals map[string]int64
	// TotalsCapped are the states whose total is a lower bound.
	TotalsCapped map[string]bool
	// Total is every job counted; TotalCapped says it is a lower bound.
	Total       int64
	TotalCapped bool
	// Cap is where counts stop (admin.CountCap).
	Cap int64
	// NextURL is the next page of queues ("" on the last page); Paged
	// says this is not the first.
	NextURL string
	Paged   bool
	// ChartQueue narrows the charts to one queue; "" is all. ChartQueues
	// are the names the menu offers: the page's.
	ChartQueue  string
	ChartQueues []string
	Windows     []window
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f, err := queueFilter(r, overviewAfter)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	p, err := s.queues(ctx, f)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	o := overview{Queues: p.Queues, States: admin.States, Totals: p.Totals, TotalsCapped: p.TotalsCapped, Cap: admin.CountCap,
		Paged: f.After != "", ChartQueue: r.URL.Query().Get("queue"), ChartQueues: chartQueues(p.Queues)}
	if p.NextAfter != "" {
		q := r.URL.Query()
		q.Set(overviewAfter, p.NextAfter)
		o.NextURL = s.cfg.BasePath + "/?" + q.Encode()
	}
	for _, n := range o.Totals {
		o.Total += n
	}
	o.TotalCapped = len(o.TotalsCapped) > 0
	now := time.Now()
	// The day's window reaches furthest back: one read serves both.
	const dayStep, dayPoints = 15 * time.Minute, 96
	since := now.UTC().Truncate(dayStep).Add(-(dayPoints - 1) * dayStep)
	rs, err := s.admin.Rollups(ctx, o.ChartQueue, since)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	o.Windows = []window{
		newWindow("hour", "Last hour, per minute", now, time.Minute, 60, rs),
		newWindow("day", "Last 24 hours, per 15 minutes", now, dayStep, dayPoints, rs),
	}
	s.render(w, r, http.StatusOK, "overview", "Queues", o)
}

// jobList is the job list page's data.
type jobList struct {
	Filter  admin.Filter
	States  []string
	Jobs    []admin.Job
	NextURL string
	// Paged says this is not the first page.
	Paged bool
}

func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request) {
	f, res, err := s.list(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	d := jobList{Filter: f, States: admin.States, Jobs: res.Jobs, Paged: f.After != ""}
	if res.NextAfter != "" {
		q := r.URL.Query()
		q.Set("after", res.NextAfter)
		d.NextURL = s.cfg.BasePath + "/jobs?" + q.Encode()
	}
	s.render(w, r, http.StatusOK, "jobs", "Jobs", d)
}

func (s *Server) jobPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := checkJobID("the path", id); err != nil {
		s.failPage(w, r, err)
		return
	}
	j, err := s.admin.Show(r.Context(), id)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "job", "Job "+j.ID, j)
}

// queueView is the queue page's data: a bucketed queue's flow control
// (`skiplock queues show`).
type queueView struct {
	Name string
	// Limits says them in a few words ("" for none).
	Limits string
	bucketed.LimitsState
}

// queuePage shows a queue's limits and, when partitioned, its partitions
// running and waiting (the first bucketed.MaxShownPartitions).
func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	v, err := s.queueView(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "queue", "Queue "+v.Name, v)
}

// apiQueue is GET /api/queues/{name}: the queue page's data as JSON
// (bucketed.LimitsState, as `queues show --json` says it).
func (s *Server) apiQueue(w http.ResponseWriter, r *http.Request) {
	v, err := s.queueView(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// queueView reads the queue the path names.
func (s *Server) queueView(r *http.Request) (queueView, error) {
	name := r.PathValue("name")
	if err := skiplock.ValidateQueueName(name); err != nil {
		return queueView{}, usage.Errorf("the path's queue: %v", err)
	}
	st, err := s.admin.QueueLimits(r.Context(), name)
	if err != nil {
		return queueView{}, err
	}
	return queueView{Name: name, Limits: admin.LimitsText(st.Limits), LimitsState: st}, nil
}

func (s *Server) periodicPage(w http.ResponseWriter, r *http.Request) {
	ps, err := s.admin.PeriodicJobs(r.Context())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "periodic", "Periodic jobs", ps)
}

func (s *Server) clientsPage(w http.ResponseWriter, r *http.Request) {
	res, err := s.clients(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "clients", "Clients", res)
}

// engineName is the engine the pages name: "cockroach (emulated on
// PostgreSQL)" under a personality, so that nobody reads an emulated run
// as the engine's own.
func engineName(db *skiplock.DB) string {
	if p := db.Personality(); p != skiplock.PersonalityNone {
		return p.Engine().String() + " (emulated on PostgreSQL)"
	}
	return db.Engine().String()
}
