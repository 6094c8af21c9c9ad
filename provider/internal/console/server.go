// Package console is the provider's web console: a table of the machines, live, and a
// page per machine with its hardware, BMC, erase reports, allocation, boot timeline and
// recent events, with the operator's actions on it.
//
// Pages are rendered on the server from Go templates; the only script of ours follows
// the live updates (server-sent events carrying re-rendered fragments), so every action
// works as a plain form post. Everything is embedded in the binary: no CDN, no build
// step. Every action goes through the transitions service, the same rules and refusals
// as anvilctl; in Omni mode the actions Omni owns are not offered.
package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the console.
type Options struct {
	// State is the provider's state (read), Transitions what actions go through.
	State       state.State
	Transitions *transitions.Service
	// Policy is the provider's, for each machine's phase.
	Policy lifecycle.Policy
	// Trace is the boot timeline and recent events of each machine (nil: none shown).
	Trace *boottrace.Recorder
	// TokenHash is the SHA-256 of the login token (LoadToken).
	TokenHash [sha256.Size]byte
	// OmniURL is Omni's address in Omni mode: the actions it owns are not offered and
	// the pages link to it. Empty when standalone.
	OmniURL string
	Logger  *zap.Logger
	// Now is time.Now when nil.
	Now func() time.Time
}

// Server serves the console.
type Server struct {
	opts     Options
	sessions *sessions
	pages    *template.Template
	live     *broadcast
	logger   *zap.Logger
	now      func() time.Time
}

// New returns the console.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	now := opts.Now
	if now == nil {
		now = time.Now
	}

	pages, err := template.New("").Funcs(funcs(now)).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("error parsing the console's templates: %w", err)
	}

	return &Server{opts: opts, sessions: newSessions(now), pages: pages, live: newBroadcast(), logger: opts.Logger, now: now}, nil
}

// Handler returns the console's routes, all under /ui/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()

	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}

	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", s.loginPage)
	mux.HandleFunc("POST /ui/login", s.login)
	mux.HandleFunc("POST /ui/logout", s.authenticated(s.logout))
	mux.HandleFunc("GET /ui/{$}", s.authenticated(s.machinesPage))
	mux.HandleFunc("GET /ui/machines/{id}", s.authenticated(s.machinePage))
	mux.HandleFunc("POST /ui/machines/{id}/{action}", s.authenticated(s.action))
	mux.HandleFunc("GET /ui/live", s.authenticated(s.liveUpdates))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})

	return securityHeaders(mux)
}

// securityHeaders keep the pages from being framed, sniffed or given scripts from
// elsewhere: everything the console loads is its own.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Strict-Transport-Security", "max-age=31536000")

		next.ServeHTTP(w, r)
	})
}

type handlerWithSession func(http.ResponseWriter, *http.Request, *session)

// authenticated sends a request without a session to the login page (a 401 for the
// live stream and for posts, which a redirect would turn into a silent GET).
func (s *Server) authenticated(h handlerWithSession) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.session(w, r)
		if sess == nil {
			if r.Method == http.MethodGet && r.URL.Path != "/ui/live" {
				http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)

				return
			}

			http.Error(w, "log in first: the console needs a session", http.StatusUnauthorized)

			return
		}

		h(w, r, sess)
	}
}

// Run follows the state, telling the live pages of every change, until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	return s.live.follow(ctx, s.opts.State, s.opts.Trace, s.logger)
}

// Serve serves the console on lis until ctx is done.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: the live stream is long-lived; it ends with its page.
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx },
		// Browsers drop TLS connections they opened ahead: not news above debug.
		ErrorLog: stdLogAt(s.logger.Named("http")),
	}

	go func() {
		<-ctx.Done()

		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()

		srv.Shutdown(shutdown) //nolint:errcheck // closing: nothing left to tell
	}()

	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("error serving the console: %w", err)
	}

	return nil
}

func stdLogAt(logger *zap.Logger) *log.Logger {
	l, err := zap.NewStdLogAt(logger, zapcore.DebugLevel)
	if err != nil {
		return zap.NewStdLog(logger)
	}

	return l
}
