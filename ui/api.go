package ui

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/metricsink"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/maintenance"
	"github.com/skiplock/skiplock/schema"
)

// The JSON API: the pages' data for scripts, and the actions.

// QueuesResponse is GET /api/queues?limit=&after=: a page of queues,
// one row per queue and layout, by name then layout, with the schema's
// totals and next_after, the after= of the next page ("" on the last).
type QueuesResponse = admin.QueuePage

// JobsResponse is GET /api/jobs: a page of jobs in admin.List's order
// (bucketed jobs by id, newest first, queued ones in the order they run
// and finished ones by finish time; then fanout jobs, newest first).
type JobsResponse struct {
	Jobs []admin.Job `json:"jobs"`
	// NextAfter is the after= of the next page; "" on the last page.
	NextAfter string `json:"next_after"`
}

// Rollup is admin.Rollup in JSON, durations in seconds.
type Rollup struct {
	Queue     string    `json:"queue"`
	Minute    time.Time `json:"minute"`
	Completed int64     `json:"completed"`
	Failed    int64     `json:"failed"`
	WaitP50S  float64   `json:"wait_p50_s"`
	WaitP95S  float64   `json:"wait_p95_s"`
	WaitP99S  float64   `json:"wait_p99_s"`
	RunP50S   float64   `json:"run_p50_s"`
	RunP95S   float64   `json:"run_p95_s"`
	RunP99S   float64   `json:"run_p99_s"`
}

// Client is admin.RunningClient in JSON.
type Client struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Queues    []string  `json:"queues"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	Leader    bool      `json:"leader"`
}

// Leader is the schema's maintenance leader in JSON.
type Leader struct {
	Holder    string    `json:"holder"`
	ElectedAt time.Time `json:"elected_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Live is false when the lease expired and nobody took it yet.
	Live bool `json:"live"`
}

// ClientsResponse is GET /api/clients.
type ClientsResponse struct {
	Clients []Client `json:"clients"`
	// Leader is null when no process ever led the schema.
	Leader *Leader `json:"leader"`
}

// ActionResponse is a job action's answer: the job as it is after the
// action (null once deleted).
type ActionResponse struct {
	ID     string     `json:"id"`
	Action string     `json:"action"`
	Job    *admin.Job `json:"job"`
}

// BulkRequest is the body of POST /api/jobs/{action}.
type BulkRequest struct {
	IDs []string `json:"ids"`
}

// BulkResponse is its answer: one outcome per id, in order; an outcome
// with an error did nothing to its job.
type BulkResponse struct {
	Action   string          `json:"action"`
	Outcomes []admin.Outcome `json:"outcomes"`
}

// QueueResponse is a pause or resume's answer.
type QueueResponse struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
}

// ErrorResponse is every error's body.
type ErrorResponse struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // the client went away
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorResponse{Error: msg})
}

// fail answers an error with its status and publicText.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := status(err)
	writeError(w, code, s.publicText(r, code, err))
}

// publicText is what the client reads of err, answered with code: its
// text for a client's error; for a server error, which may carry the
// database's own words (its SQL, its tables, its host), a generic
// sentence, the error itself going to Config.Logger.
func (s *Server) publicText(r *http.Request, code int, err error) string {
	if code < 500 {
		return err.Error()
	}
	s.cfg.Logger.Warn("request failed", "method", r.Method, "path", r.URL.Path, logs.Err(err))
	if code == http.StatusServiceUnavailable {
		return "the request was canceled or timed out before the database answered: try again"
	}
	return "internal error: the dashboard could not read or change the jobs; the server's log has the details"
}

func (s *Server) apiCSRF(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"csrf_token": s.csrf})
}

func (s *Server) apiQueues(w http.ResponseWriter, r *http.Request) {
	f, err := queueFilter(r, "after")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.queues(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// filter reads a job filter from the query string.
func filter(r *http.Request) (admin.Filter, error) {
	q := r.URL.Query()
	f := admin.Filter{Queue: q.Get("queue"), Kind: q.Get("kind"), State: q.Get("state"), After: q.Get("after")}
	if l := q.Get("layout"); l != "" {
		pl, err := schema.ParseLayout(l)
		if err != nil {
			return f, err
		}
		f.Layout = pl
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return f, usage.Errorf("limit %q: use a number from 1 to %d", l, admin.MaxLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// list returns a page of jobs and the cursor of the next.
func (s *Server) list(r *http.Request) (admin.Filter, JobsResponse, error) {
	f, err := filter(r)
	if err != nil {
		return f, JobsResponse{}, err
	}
	jobs, err := s.admin.List(r.Context(), f)
	if err != nil {
		return f, JobsResponse{}, err
	}
	if jobs == nil {
		jobs = []admin.Job{}
	}
	for i, j := range jobs {
		if j.LastError != nil {
			c := cut(*j.LastError)
			jobs[i].LastError = &c
		}
	}
	res := JobsResponse{Jobs: jobs}
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	if len(jobs) == limit {
		res.NextAfter = jobs[len(jobs)-1].ID
	}
	return f, res, nil
}

func (s *Server) apiJobs(w http.ResponseWriter, r *http.Request) {
	_, res, err := s.list(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) apiJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := checkJobID("the path", id); err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := s.admin.Show(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) apiPeriodic(w http.ResponseWriter, r *http.Request) {
	ps, err := s.admin.PeriodicJobs(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"periodic": ps})
}

// clients reads the clients and the leader.
func (s *Server) clients(r *http.Request) (ClientsResponse, error) {
	cs, err := s.admin.Clients(r.Context())
	if err != nil {
		return ClientsResponse{}, err
	}
	res := ClientsResponse{Clients: make([]Client, 0, len(cs))}
	for _, c := range cs {
		res.Clients = append(res.Clients, Client{ID: c.ID, Host: c.Host, PID: c.PID, Queues: c.Queues,
			StartedAt: c.StartedAt, LastSeen: c.LastSeen, Leader: c.Leader})
	}
	l, err := maintenance.CurrentLeader(r.Context(), s.db, s.schema)
	if err != nil {
		return ClientsResponse{}, err
	}
	if l != nil {
		res.Leader = &Leader{Holder: l.Holder, ElectedAt: l.ElectedAt, ExpiresAt: l.ExpiresAt, Live: l.Live}
	}
	return res, nil
}

func (s *Server) apiClients(w http.ResponseWriter, r *http.Request) {
	res, err := s.clients(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// apiRollups answers the rollups of ?queue= ("" all) since ?since=, a
// time (RFC 3339) or a duration before now ("1h"); the last hour by
// default.
func (s *Server) apiRollups(w http.ResponseWriter, r *http.Request) {
	since := time.Now().Add(-time.Hour)
	if v := r.URL.Query().Get("since"); v != "" {
		var err error
		if since, err = parseSince(v, time.Now()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	rs, err := s.admin.Rollups(r.Context(), r.URL.Query().Get("queue"), since)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]Rollup, 0, len(rs))
	for _, x := range rs {
		out = append(out, Rollup{Queue: x.Queue, Minute: x.Minute, Completed: x.Completed, Failed: x.Failed,
			WaitP50S: x.WaitP50.Seconds(), WaitP95S: x.WaitP95.Seconds(), WaitP99S: x.WaitP99.Seconds(),
			RunP50S: x.RunP50.Seconds(), RunP95S: x.RunP95.Seconds(), RunP99S: x.RunP99.Seconds()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"rollups": out})
}

// jobAction reads an action's name from the path; ok is false (and the
// answer written) for an unknown one.
func jobAction(w http.ResponseWriter, r *http.Request) (admin.Action, bool) {
	switch a := admin.Action(r.PathValue("action")); a {
	case admin.Retry, admin.Cancel, admin.Delete:
		return a, true
	}
	writeError(w, http.StatusNotFound, "unknown action "+strconv.Quote(r.PathValue("action"))+": use retry, cancel or delete")
	return "", false
}

// readBody decodes an optional JSON body into v (an empty body leaves v
// as it is).
func readBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return usage.Errorf("read the request body: %v", err)
	}
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return usage.Errorf("the request body is not the JSON expected: %v", err)
	}
	return nil
}

func (s *Server) apiJobAction(w http.ResponseWriter, r *http.Request) {
	action, ok := jobAction(w, r)
	if !ok {
		return
	}
	var ignored map[string]any
	if err := readBody(w, r, &ignored); err != nil {
		s.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	if err := checkJobID("the path", id); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.admin.Do(r.Context(), action, id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.forgetQueues()
	res := ActionResponse{ID: id, Action: string(action)}
	if action != admin.Delete {
		j, err := s.admin.Show(r.Context(), id)
		if err != nil && !admin.IsNoJob(err) {
			s.fail(w, r, err)
			return
		}
		res.Job = j
		if action == admin.Cancel && j != nil {
			s.countCancelled(j)
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// countCancelled counts a job the dashboard cancelled.
func (s *Server) countCancelled(j *admin.Job) {
	metricsink.Of(s.cfg.Metrics).Cancelled(metricsink.Labels{Queue: j.Queue, Kind: j.Kind, Layout: string(j.Layout)}, 1)
}

func (s *Server) apiJobsAction(w http.ResponseWriter, r *http.Request) {
	action, ok := jobAction(w, r)
	if !ok {
		return
	}
	var req BulkRequest
	if err := readBody(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if len(req.IDs) == 0 || len(req.IDs) > admin.MaxLimit {
		s.fail(w, r, usage.Errorf(`send {"ids": [...]} with 1 to %d job ids`, admin.MaxLimit))
		return
	}
	for i, id := range req.IDs {
		if err := checkJobID("ids["+strconv.Itoa(i)+"]", id); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	out := s.admin.DoAll(r.Context(), action, req.IDs)
	for i, o := range out {
		if o.Err != nil {
			out[i].Error = s.publicText(r, status(o.Err), o.Err)
		}
	}
	s.forgetQueues()
	if action == admin.Cancel && s.cfg.Metrics != nil {
		for _, o := range out {
			if o.Err != nil {
				continue
			}
			if j, err := s.admin.Show(r.Context(), o.ID); err == nil {
				s.countCancelled(j)
			}
		}
	}
	writeJSON(w, http.StatusOK, BulkResponse{Action: string(action), Outcomes: out})
}

func (s *Server) apiQueueAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if action != "pause" && action != "resume" {
		writeError(w, http.StatusNotFound, "unknown action "+strconv.Quote(action)+": use pause or resume")
		return
	}
	var ignored map[string]any
	if err := readBody(w, r, &ignored); err != nil {
		s.fail(w, r, err)
		return
	}
	// Only a queue the schema knows: a forged or mistyped name would
	// otherwise leave a paused queue no job goes to (the CLI's --create
	// is the deliberate way to pause one ahead of its first job).
	if err := s.admin.CheckQueueKnown(r.Context(), name, "pause it ahead of its first job with skiplock queues pause --create"); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.admin.SetPaused(r.Context(), name, action == "pause"); err != nil {
		s.fail(w, r, err)
		return
	}
	s.forgetQueues()
	writeJSON(w, http.StatusOK, QueueResponse{Queue: name, Paused: action == "pause"})
}
