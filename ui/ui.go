// Package ui is skiplock's web dashboard: an http.Handler that shows a
// schema's queues (counts by state, paused, oldest queued age, throughput
// and latency charts from the per-minute rollups), its jobs (filtered,
// paged, one by one with payload and error history), its periodic jobs,
// its clients and the maintenance leader, and that retries, cancels and
// deletes jobs and pauses and resumes queues. Mount it in a service of
// your own, or run it with `skiplock ui`.
//
// Everything it serves is in the binary (go:embed): server-rendered
// pages, hand-drawn SVG charts, one small script for the buttons. The
// same data and actions are JSON under /api for scripts:
//
//	GET  /api/queues?limit=&after=, /api/jobs?queue=&kind=&state=&layout=&limit=&after=,
//	     /api/jobs/{id}, /api/queues/{name} (its limits and partitions),
//	     /api/periodic, /api/clients, /api/rollups?queue=&since=, /api/csrf
//	POST /api/jobs/{id}/retry|cancel|delete, /api/jobs/retry|cancel|delete
//	     ({"ids": [...]}), /api/queues/{name}/pause|resume
//
// Security: with Config.Auth set, every request needs the bearer token
// (Authorization: Bearer TOKEN) or the basic-auth user and password;
// both are compared in constant time, and the scheme's name may be in
// any case. Every POST needs the server's CSRF token in the X-CSRF-Token
// header (pages carry it; scripts read it from GET /api/csrf once), even
// with a bearer token: one rule, no exceptions to get wrong. POSTs from
// another origin are refused as well (Sec-Fetch-Site and Origin,
// net/http.CrossOriginProtection). ReadOnly hides the buttons and refuses
// every POST with 403. The handler never sees the DSN, and pages show the
// engine and schema only.
//
// Truth: a filter parameter that cannot be one answers 400 naming it,
// before any query; a server error answers a generic message, the error
// itself going to Config.Logger. Pages write user-supplied text through
// one template function (show) that isolates it and shows bidirectional
// controls instead of obeying them; lists cut long texts, which the
// job's page shows whole.
//
// Cost: the pages read through package admin. The job list and job pages
// are bounded queries (a LIMIT, a primary key); the charts read the
// rollups, a small table; the queues come a page at a time (one row per
// queue and layout, after= the previous page's last NAME/LAYOUT) from
// admin.ListQueues, which costs a fixed number of statements per page,
// counts through indexes and samples and stops each count at
// admin.CountCap (shown as "100,000+", read "at least"; see its doc);
// the pages are cached for Config.QueuesTTL so that many open tabs cost
// one count.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/logs"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/schema"
)

// Config configures the dashboard. The zero value is an open, writable
// dashboard of the default schema mounted at the root: fine behind your
// own authentication, or on a loopback address.
type Config struct {
	// Schema holds the queue tables; "" means schema.DefaultSchema.
	Schema string
	// ReadOnly hides the action buttons and refuses every POST (403).
	ReadOnly bool
	// Auth, when set, is required of every request.
	Auth Auth
	// BasePath is the path the handler is mounted at ("/skiplock"), ""
	// for the root. The handler strips it itself: mount it with
	// mux.Handle("/skiplock/", h).
	BasePath string
	// TrustedOrigins are other origins ("https://ops.example.com") whose
	// pages may POST to the dashboard, as behind a proxy that rewrites
	// the Host header; by default only the dashboard's own origin may.
	TrustedOrigins []string
	// QueuesTTL is how long the queue counts are reused between
	// requests; 0 means 2 seconds, negative never.
	QueuesTTL time.Duration
	// Logger hears failed requests (database errors); nil is
	// slog.Default().
	Logger *slog.Logger
	// Metrics, when set, counts the jobs cancelled through the dashboard
	// (skiplock_jobs_cancelled_total).
	Metrics *metrics.Metrics
}

// Auth is the credentials the dashboard requires: a bearer token, a
// basic-auth user and password, or both (either is then accepted).
type Auth struct {
	// Token is accepted as "Authorization: Bearer TOKEN".
	Token string
	// User and Password are accepted as basic auth, which browsers ask
	// for.
	User, Password string
}

// enabled reports whether any credential is required.
func (a Auth) enabled() bool { return a.Token != "" || a.User != "" }

// Server is the dashboard, an http.Handler.
type Server struct {
	cfg    Config
	db     *skiplock.DB
	admin  *admin.Admin
	schema string
	csrf   string
	mux    *http.ServeMux
	pages  map[string]*template.Template
	cop    *http.CrossOriginProtection
	// queues caches admin.ListQueues' pages for cfg.QueuesTTL, from qAt.
	qmu     sync.Mutex
	qAt     time.Time
	qCached map[admin.QueueFilter]*admin.QueuePage
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the dashboard of db's schema. It fails when the schema is
// not migrated or the config is wrong.
func New(ctx context.Context, db *skiplock.DB, cfg *Config) (*Server, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Logger = logs.OrDefault(c.Logger).With("component", "ui")
	if c.Schema == "" {
		c.Schema = schema.DefaultSchema
	}
	if c.QueuesTTL == 0 {
		c.QueuesTTL = 2 * time.Second
	}
	if c.Auth.User == "" && c.Auth.Password != "" {
		return nil, usage.Errorf("ui: Auth.Password is set without Auth.User: set both for basic auth")
	}
	if c.Auth.User != "" && c.Auth.Password == "" {
		return nil, usage.Errorf("ui: Auth.User %q has no password: set Auth.Password", c.Auth.User)
	}
	c.BasePath = strings.TrimRight(c.BasePath, "/")
	if c.BasePath != "" && !strings.HasPrefix(c.BasePath, "/") {
		return nil, usage.Errorf("ui: BasePath %q must start with /", c.BasePath)
	}
	a, err := admin.New(ctx, db, c.Schema)
	if err != nil {
		return nil, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("ui: make a CSRF token: %w", err)
	}
	s := &Server{cfg: c, db: db, admin: a, schema: c.Schema, csrf: hex.EncodeToString(b[:]),
		mux: http.NewServeMux(), cop: http.NewCrossOriginProtection()}
	// Refusals of cross-origin POSTs say why, as JSON.
	s.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused: use the dashboard's own pages, or send no Origin header from scripts")
	}))
	for _, o := range c.TrustedOrigins {
		if err := s.cop.AddTrustedOrigin(o); err != nil {
			return nil, usage.Errorf("ui: TrustedOrigins: %v", err)
		}
	}
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.overviewPage)
	s.mux.HandleFunc("GET /jobs", s.jobsPage)
	s.mux.HandleFunc("GET /jobs/{id}", s.jobPage)
	s.mux.HandleFunc("GET /queues/{name}", s.queuePage)
	s.mux.HandleFunc("GET /workflows/{id}", s.workflowPage)
	s.mux.HandleFunc("GET /periodic", s.periodicPage)
	s.mux.HandleFunc("GET /clients", s.clientsPage)

	s.mux.HandleFunc("GET /api/csrf", s.apiCSRF)
	s.mux.HandleFunc("GET /api/queues", s.apiQueues)
	s.mux.HandleFunc("GET /api/queues/{name}", s.apiQueue)
	s.mux.HandleFunc("GET /api/workflows/{id}", s.apiWorkflow)
	s.mux.HandleFunc("GET /api/jobs", s.apiJobs)
	s.mux.HandleFunc("GET /api/jobs/{id}", s.apiJob)
	s.mux.HandleFunc("GET /api/periodic", s.apiPeriodic)
	s.mux.HandleFunc("GET /api/clients", s.apiClients)
	s.mux.HandleFunc("GET /api/rollups", s.apiRollups)
	s.mux.HandleFunc("POST /api/jobs/{id}/{action}", s.apiJobAction)
	s.mux.HandleFunc("POST /api/jobs/{action}", s.apiJobsAction)
	s.mux.HandleFunc("POST /api/queues/{name}/{action}", s.apiQueueAction)
}

// ServeHTTP serves the dashboard: security headers, authentication,
// then for POSTs the read-only, cross-origin and CSRF checks.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if s.cfg.BasePath != "" {
		p := strings.TrimPrefix(r.URL.Path, s.cfg.BasePath)
		if len(p) == len(r.URL.Path) || (p != "" && p[0] != '/') {
			http.NotFound(w, r)
			return
		}
		http.StripPrefix(s.cfg.BasePath, http.HandlerFunc(s.serve)).ServeHTTP(w, r)
		return
	}
	s.serve(w, r)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" {
		http.Redirect(w, r, s.cfg.BasePath+"/", http.StatusFound)
		return
	}
	if !s.authorized(r) {
		if s.cfg.Auth.User != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="skiplock", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="skiplock"`)
		}
		writeError(w, http.StatusUnauthorized, "authentication required: send Authorization: Bearer TOKEN or basic auth")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if s.cfg.ReadOnly {
			writeError(w, http.StatusForbidden, "the dashboard is read-only: actions are refused")
			return
		}
		if err := s.cop.Check(r); err != nil {
			writeError(w, http.StatusForbidden, "cross-origin request refused: use the dashboard's own pages, or send no Origin header from scripts")
			return
		}
		if !equal(r.Header.Get("X-CSRF-Token"), s.csrf) {
			writeError(w, http.StatusForbidden, "missing or wrong CSRF token: send the X-CSRF-Token header with the token from GET /api/csrf")
			return
		}
	}
	if err := checkQuery(r.URL.Path, r.URL.RawQuery); err != nil {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeError(w, http.StatusBadRequest, err.Error())
		} else {
			s.failPage(w, r, err)
		}
		return
	}
	s.mux.ServeHTTP(w, r)
}

// authorized checks the request's credentials against Config.Auth.
func (s *Server) authorized(r *http.Request) bool {
	a := s.cfg.Auth
	if !a.enabled() {
		return true
	}
	// Schemes are case-insensitive (RFC 7235): "bearer" is "Bearer", as
	// BasicAuth takes "basic" for "Basic".
	scheme, tok, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if strings.EqualFold(scheme, "Bearer") && a.Token != "" {
		return equal(strings.TrimSpace(tok), a.Token)
	}
	if user, pass, ok := r.BasicAuth(); ok && a.User != "" {
		// Both compared, always: the time says nothing about which was wrong.
		u, p := equal(user, a.User), equal(pass, a.Password)
		return u && p
	}
	return false
}

// equal compares secrets in constant time; hashing first hides their
// lengths too.
func equal(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1 && want != ""
}

// queues returns a page of admin.ListQueues, reused for cfg.QueuesTTL.
// The pages cached are those asked for within the TTL: a few at most.
func (s *Server) queues(ctx context.Context, f admin.QueueFilter) (*admin.QueuePage, error) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.cfg.QueuesTTL <= 0 || time.Since(s.qAt) >= s.cfg.QueuesTTL {
		s.qCached, s.qAt = nil, time.Now()
	}
	if p, ok := s.qCached[f]; ok {
		return p, nil
	}
	p, err := s.admin.ListQueues(ctx, f)
	if err != nil {
		return nil, err
	}
	if s.cfg.QueuesTTL > 0 {
		if s.qCached == nil {
			s.qCached = map[admin.QueueFilter]*admin.QueuePage{}
		}
		s.qCached[f] = p
	}
	return p, nil
}

// forgetQueues drops the cached counts after an action changed them.
func (s *Server) forgetQueues() {
	s.qmu.Lock()
	s.qCached = nil
	s.qmu.Unlock()
}

// status maps an error to an HTTP status: 400 for a bad request, 404
// for an unknown job, 409 for an action the job's state refuses.
func status(err error) int {
	var se *skiplock.StateError
	switch {
	case admin.IsNoJob(err):
		return http.StatusNotFound
	case errors.As(err, &se):
		return http.StatusConflict
	case usage.Is(err):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
