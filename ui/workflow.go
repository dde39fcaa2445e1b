package ui

import (
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/admin"
	"github.com/skiplock/skiplock/internal/usage"
)

// maxGraphJobs is the most jobs a workflow page draws: past it the page
// lists the jobs only (a graph of thousands of boxes reads as none).
const maxGraphJobs = 400

// workflowView is the workflow page's data.
type workflowView struct {
	*admin.Workflow
	// Graph is the drawing of the jobs and what waits on what; "" when
	// the workflow is too large to draw (maxGraphJobs).
	Graph template.HTML
}

// workflowPage shows a workflow: its jobs counted by state, its graph
// (each job a box in its state's colour, an arrow from each dependency to
// the job that waits on it) and its jobs listed.
func (s *Server) workflowPage(w http.ResponseWriter, r *http.Request) {
	wf, err := s.workflow(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	v := workflowView{Workflow: wf}
	if len(wf.Jobs) <= maxGraphJobs {
		v.Graph = workflowGraph(wf, s.cfg.BasePath)
	}
	s.render(w, r, http.StatusOK, "workflow", "Workflow "+wf.ID, v)
}

// apiWorkflow is GET /api/workflows/{id}: the workflow page's data as
// JSON (admin.Workflow, as `workflows show --json` says it).
func (s *Server) apiWorkflow(w http.ResponseWriter, r *http.Request) {
	wf, err := s.workflow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wf)
}

// workflow reads the workflow the path names.
func (s *Server) workflow(r *http.Request) (*admin.Workflow, error) {
	id := r.PathValue("id")
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return nil, usage.Errorf("the path's workflow id %q is not a workflow id (a decimal integer)", id)
	}
	return s.admin.WorkflowShow(r.Context(), id)
}

// Sizes of the graph's drawing, in pixels.
const (
	nodeW, nodeH = 150, 30
	colGap       = 60
	rowGap       = 14
	graphPad     = 10
)

// workflowGraph draws wf's jobs in columns by depth (a job one column
// right of its deepest dependency), each box linked to its job's page and
// classed by its state, with a line from each dependency to each job that
// depends on it. Names are escaped; the rest is numbers.
func workflowGraph(wf *admin.Workflow, base string) template.HTML {
	index := map[string]int{}
	for i, j := range wf.Jobs {
		index[j.Name] = i
	}
	depth := make([]int, len(wf.Jobs))
	for i := range depth {
		depth[i] = -1
	}
	// Longest path from a root, by iteration: the workflow has no cycle
	// (its insert refused them), so each pass fixes at least one more
	// job's depth.
	for changed := true; changed; {
		changed = false
		for i, j := range wf.Jobs {
			d := 0
			for _, n := range j.DependsOnNames {
				k, ok := index[n]
				if !ok {
					continue // retention deleted it
				}
				if depth[k] < 0 {
					d = -1
					break
				}
				d = max(d, depth[k]+1)
			}
			if d >= 0 && d != depth[i] {
				depth[i], changed = d, true
			}
		}
	}
	rows := map[int]int{}
	x, y := make([]int, len(wf.Jobs)), make([]int, len(wf.Jobs))
	width, height := 0, 0
	for i := range wf.Jobs {
		d := max(depth[i], 0)
		x[i] = graphPad + d*(nodeW+colGap)
		y[i] = graphPad + rows[d]*(nodeH+rowGap)
		rows[d]++
		width, height = max(width, x[i]+nodeW+graphPad), max(height, y[i]+nodeH+graphPad)
	}
	esc := template.HTMLEscapeString
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="wf-graph" id="workflow-graph" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="the workflow's jobs and their dependencies">`, width, height, width, height)
	for i, j := range wf.Jobs {
		for _, n := range j.DependsOnNames {
			if k, ok := index[n]; ok {
				// A curve leaving the dependency rightwards and entering the
				// job from the left, so that lines skirt the boxes between.
				x1, y1, x2, y2 := x[k]+nodeW, y[k]+nodeH/2, x[i], y[i]+nodeH/2
				fmt.Fprintf(&b, `<path class="wf-edge" d="M%d,%d C%d,%d %d,%d %d,%d"/>`, x1, y1, x1+colGap/2, y1, x2-colGap/2, y2, x2, y2)
			}
		}
	}
	for i, j := range wf.Jobs {
		label := j.Name
		if len(label) > 20 {
			label = label[:19] + "…"
		}
		fmt.Fprintf(&b, `<a href="%s/jobs/%s"><g class="wf-node st-%s" data-name="%s" data-state="%s"><title>%s: %s</title>`+
			`<rect x="%d" y="%d" width="%d" height="%d" rx="4"/><text x="%d" y="%d">%s</text></g></a>`,
			esc(base), esc(j.ID), esc(j.State), esc(j.Name), esc(j.State), esc(j.Name), esc(j.State),
			x[i], y[i], nodeW, nodeH, x[i]+8, y[i]+nodeH/2+4, esc(label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped names
}
