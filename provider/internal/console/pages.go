package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/fleet"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// filter is the machine table's: a label selector and free text.
type filter struct {
	Selector string
	Text     string
	query    resource.LabelQuery
}

func parseFilter(selector, text string) (filter, error) {
	q, err := resources.ParseSelector(selector)
	if err != nil {
		return filter{Selector: selector, Text: text}, fmt.Errorf("label selector: %w", err)
	}

	return filter{Selector: selector, Text: strings.TrimSpace(text), query: q}, nil
}

// row is one machine in the table.
type row struct {
	fleet.Record

	Phase     lifecycle.Phase
	Vendor    string
	Model     string
	Serial    string
	UserLabel []string
	// Derived are the provider's own labels (anvil.dev/…), shown apart.
	Derived []string
}

// pageData is what every page's layout reads.
type pageData struct {
	Title   string
	CSRF    string
	Who     string
	OmniURL string
	Error   string
	Notice  string
}

type machinesData struct {
	pageData

	Filter  filter
	Rows    []row
	Total   int
	LiveURL string
}

func (s *Server) newRow(r fleet.Record) row {
	out := row{Record: r, Phase: r.Lifecycle().Phase(s.opts.Policy)}

	if inv := r.Inventory; inv != nil {
		out.Vendor, out.Model, out.Serial = inv.System.Manufacturer, inv.System.Product, inv.System.Serial
	}

	for k, v := range r.Labels {
		l := k
		if v != "" {
			l += "=" + v
		}

		if strings.HasPrefix(k, resources.LabelPrefix) {
			out.Derived = append(out.Derived, l)
		} else {
			out.UserLabel = append(out.UserLabel, l)
		}
	}

	slices.Sort(out.UserLabel)
	slices.Sort(out.Derived)

	return out
}

// matches is the free-text filter: any of the words, case-insensitive, in what the
// table shows or the machine's MACs.
func (r row) matches(text string) bool {
	if text == "" {
		return true
	}

	hay := strings.ToLower(strings.Join(append([]string{
		r.ID, r.Vendor, r.Model, r.Serial, string(r.Phase), r.PowerSummary(), r.Machine.LastAddress, r.Machine.LastDecision,
		strings.Join(r.UserLabel, " "), strings.Join(r.Derived, " "),
	}, r.MACs()...), " "))

	for word := range strings.FieldsSeq(strings.ToLower(text)) {
		if !strings.Contains(hay, word) {
			return false
		}
	}

	return true
}

func (s *Server) machinesData(ctx context.Context, f filter) (machinesData, error) {
	records, err := fleet.List(ctx, s.opts.State, fleet.Options{Query: f.query})
	if err != nil {
		return machinesData{}, err
	}

	data := machinesData{Filter: f, Total: len(records)}

	for _, r := range records {
		if rw := s.newRow(r); rw.matches(f.Text) {
			data.Rows = append(data.Rows, rw)
		}
	}

	v := url.Values{"view": {"machines"}, "selector": {f.Selector}, "q": {f.Text}}
	data.LiveURL = "/ui/live?" + v.Encode()

	return data, nil
}

func (s *Server) machinesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	status := http.StatusOK

	f, ferr := parseFilter(q.Get("selector"), q.Get("q"))

	var data machinesData

	if ferr == nil {
		var err error

		data, err = s.machinesData(r.Context(), f)
		if err != nil {
			s.serverError(w, "listing the machines", err)

			return
		}
	} else {
		data.Filter = f
		status = http.StatusBadRequest
	}

	data.pageData = s.page(sess, "Machines")
	if ferr != nil {
		data.Error = ferr.Error()
	}

	s.render(w, status, "machines", data)
}

// machineData is a machine's page.
type machineData struct {
	pageData

	Row      row
	Timeline []timelineStep
	Events   []boottrace.Event
	LiveURL  string
	// Owned says the actions Omni owns are not offered (Omni mode).
	Owned      bool
	WipeModes  []string
	WipeScopes []string
	KexecModes []string
	// Form holds what a refused form had, to fill it again.
	Form url.Values
}

// timelineStep is one phase of the machine's boot.
type timelineStep struct {
	Phase boottrace.Phase
	At    time.Time
	// Since is the time from the previous step.
	Since  time.Duration
	Detail string
}

func (s *Server) machineData(ctx context.Context, id string, form url.Values) (machineData, error) {
	records, err := fleet.List(ctx, s.opts.State, fleet.Options{ID: id})
	if err != nil {
		return machineData{}, err
	}

	data := machineData{
		Row: s.newRow(records[0]), Owned: s.opts.OmniURL != "", Form: form,
		WipeModes: resources.WipeModes, WipeScopes: resources.WipeScopes, KexecModes: resources.KexecModes,
		LiveURL: "/ui/live?" + url.Values{"view": {"machine"}, "id": {id}}.Encode(),
		Events:  s.opts.Trace.Events(id),
	}

	var prev time.Time

	for _, m := range s.opts.Trace.Timeline(id) {
		step := timelineStep{Phase: m.Phase, At: m.At, Detail: m.Detail}
		if !prev.IsZero() {
			step.Since = m.At.Sub(prev)
		}

		prev = m.At
		data.Timeline = append(data.Timeline, step)
	}

	return data, nil
}

func (s *Server) machinePage(w http.ResponseWriter, r *http.Request, sess *session) {
	s.renderMachine(w, r, sess, http.StatusOK, "", r.URL.Query().Get("done"), nil)
}

// renderMachine renders a machine's page with a message: an action's refusal (with the
// form as it was sent) or what was done.
func (s *Server) renderMachine(w http.ResponseWriter, r *http.Request, sess *session, status int, errMsg, notice string, form url.Values) {
	id := r.PathValue("id")

	data, err := s.machineData(r.Context(), id, form)
	if err != nil {
		var nf fleet.ErrNotFound
		if errors.As(err, &nf) {
			s.render(w, http.StatusNotFound, "notfound", struct {
				pageData
				ID string
			}{s.page(sess, "Not found"), id})

			return
		}

		s.serverError(w, "reading machine "+id, err)

		return
	}

	data.pageData = s.page(sess, id)
	data.Error, data.Notice = errMsg, notice

	s.render(w, status, "machine", data)
}

func (s *Server) page(sess *session, title string) pageData {
	p := pageData{Title: title, OmniURL: s.opts.OmniURL}
	if sess != nil {
		p.CSRF, p.Who = sess.csrf, sess.who
	}

	return p
}

// render executes a page into a buffer first: a failing template never sends half a
// page under a 200.
func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer

	if err := s.pages.ExecuteTemplate(&buf, name, data); err != nil {
		s.serverError(w, "rendering the "+name+" page", err)

		return
	}

	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) //nolint:errcheck // the client went away: nothing to do
}

func (s *Server) serverError(w http.ResponseWriter, what string, err error) {
	s.logger.Error("console error", zap.String("doing", what), zap.Error(err))
	http.Error(w, "error "+what+": "+err.Error(), http.StatusInternalServerError)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	// A verified client certificate needs no token.
	if sess := s.session(w, r); sess != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther) //nolint:gosec // safeNext keeps it in the console

		return
	}

	s.render(w, http.StatusOK, "login", struct {
		pageData
		Next string
	}{s.page(nil, "Log in"), r.URL.Query().Get("next")})
}

// loginAttemptDelay slows a guessing loop; the token's 256 bits do the rest.
const loginAttemptDelay = 500 * time.Millisecond

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)

	if !sameOrigin(r) {
		http.Error(w, "cross-site login refused", http.StatusForbidden)

		return
	}

	next := r.PostFormValue("next")

	if !tokenMatches(s.opts.TokenHash, r.PostFormValue("token")) {
		s.logger.Info("console login refused", zap.String("remote", r.RemoteAddr))
		time.Sleep(loginAttemptDelay)

		s.render(w, http.StatusUnauthorized, "login", struct {
			pageData
			Next string
		}{pageData{Title: "Log in", Error: "That is not the console's token. It is in the file ui-token of the provider's state directory."}, next})

		return
	}

	id, _, err := s.sessions.create("token")
	if err != nil {
		s.serverError(w, "starting a session", err)

		return
	}

	s.logger.Info("console login", zap.String("remote", r.RemoteAddr))
	setSessionCookie(w, id)
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther) //nolint:gosec // safeNext keeps it in the console
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, sess *session) {
	if !checkCSRF(r, sess) {
		http.Error(w, "the form is stale or from another site: reload the page", http.StatusForbidden)

		return
	}

	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.remove(c.Value)
	}

	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/ui/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/ui/"
	}

	return next
}
