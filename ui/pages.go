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

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"overview", "jobs", "job", "periodic", "clients", "error"}

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
	"path":  url.PathEscape,
	"count": func(counts map[string]int64, state string) int64 { return counts[state] },
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
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	p := page{Title: title, Nav: name, Base: s.cfg.BasePath, CSRF: s.csrf, ReadOnly: s.cfg.ReadOnly,
		Schema: s.schema, Engine: engineName(s.db), Data: data}
	var b bytes.Buffer
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.cfg.Logger.Warn("rendering a page failed", "page", name, logs.Err(err))
		http.Error(w, "ui: render the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes()) //nolint:errcheck // the client went away
}

// failPage shows an error in the layout, with its status.
func (s *Server) failPage(w http.ResponseWriter, r *http.Request, err error) {
	code := status(err)
	if code >= 500 {
		s.cfg.Logger.Warn("request failed", "method", r.Method, "path", r.URL.Path, logs.Err(err))
	}
	s.render(w, r, code, "error", http.StatusText(code), err.Error())
}

// overview is the overview page's data.
type overview struct {
	Queues []admin.Queue
	States []string
	Totals map[string]int64
	// TotalsCapped are the states whose total includes a capped count.
	TotalsCapped map[string]bool
	// Total is every job counted; TotalCapped says it is a lower bound.
	Total       int64
	TotalCapped bool
	// Cap is where counts stop (admin.CountCap).
	Cap int64
	// ChartQueue narrows the charts to one queue; "" is all.
	ChartQueue string
	Windows    []window
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qs, err := s.queues(ctx)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	o := overview{Queues: qs, States: admin.States, Totals: totals(qs), TotalsCapped: totalsCapped(qs), Cap: admin.CountCap, ChartQueue: r.URL.Query().Get("queue")}
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
	j, err := s.admin.Show(r.Context(), r.PathValue("id"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "job", "Job "+j.ID, j)
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
