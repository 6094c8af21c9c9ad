// Package redfish is the lab's BMC: a Redfish service of our own that manages machines
// through a small interface (the lab's QEMU machines, or in-memory fakes), as OpenStack's
// sushy-tools does for libvirt. Its documents are shaped after the DMTF Redfish schema:
// the service root, the Systems collection, ComputerSystem with its boot override and
// Reset action, and the SessionService. Options select vendor-shaped variations (several
// systems, fewer reset types, session-only auth, no boot mode, other system ids), so a
// Redfish client can be tested against what real BMCs differ in.
package redfish

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Machine is one computer system the service manages.
type Machine interface {
	UUID() string
	Name() string
	// PowerState reports whether the machine is on.
	PowerState(ctx context.Context) (on bool, err error)
	// PowerOn starts a machine that is off.
	PowerOn(ctx context.Context) error
	// ForceOff cuts the power of a running machine.
	ForceOff(ctx context.Context) error
	// Reset restarts a running machine at once (the reset button).
	Reset(ctx context.Context) error
	// SetNextBootNetwork makes the next boot (power on or reset), and only that one, a
	// network boot; false cancels it.
	SetNextBootNetwork(ctx context.Context, on bool) error
	// NextBootNetwork reports whether a network boot is pending.
	NextBootNetwork(ctx context.Context) (bool, error)
}

// System is a ComputerSystem the service serves.
type System struct {
	// ID is the system's Redfish Id; empty: its position in Options.Systems from 1.
	ID      string
	Machine Machine

	Manufacturer, Model, SerialNumber string
	// BootMode is the firmware's mode as BootSourceOverrideMode reports it until a PATCH
	// sets one: "Legacy" or "UEFI" (empty: UEFI).
	BootMode string
}

// Reset types (the DMTF ResetType values the service knows).
const (
	ResetOn               = "On"
	ResetForceOn          = "ForceOn"
	ResetForceOff         = "ForceOff"
	ResetGracefulShutdown = "GracefulShutdown"
	ResetForceRestart     = "ForceRestart"
	ResetGracefulRestart  = "GracefulRestart"
	ResetPowerCycle       = "PowerCycle"
	ResetPushPowerButton  = "PushPowerButton"
)

// DefaultResetTypes are the reset types offered unless Options.ResetTypes says otherwise.
var DefaultResetTypes = []string{
	ResetOn, ResetForceOff, ResetGracefulShutdown, ResetGracefulRestart, ResetForceRestart,
	ResetForceOn, ResetPushPowerButton, ResetPowerCycle,
}

// Options shape one service instance after a vendor's BMC.
type Options struct {
	// Username and Password are the one account; empty Username: no authentication.
	Username, Password string
	// SessionOnly refuses basic authentication: only session tokens are accepted.
	SessionOnly bool
	// NoSessions has no SessionService: only basic authentication.
	NoSessions bool
	// ResetTypes are the reset types the Reset action offers and accepts; nil: all of
	// DefaultResetTypes.
	ResetTypes []string
	// NoResetAllowableValues leaves ResetType@Redfish.AllowableValues out of the Reset
	// action, as some BMCs do; the service still refuses the types it does not offer.
	NoResetAllowableValues bool
	// NoBootMode leaves BootSourceOverrideMode out and refuses it in a PATCH.
	NoBootMode bool
	// Systems are the machines served, in collection order.
	Systems []System
}

// Service is the Redfish service: an http.Handler.
type Service struct {
	opts    Options
	systems []*system

	mu       sync.Mutex
	sessions map[string]string // session id → token
	nextID   int
}

type system struct {
	System

	// mu serialises what is done to the machine: a lab machine's power is not safe
	// to drive from two requests at once.
	mu   sync.Mutex
	mode string
}

// New checks the options and makes the service.
func New(opts Options) (*Service, error) {
	if len(opts.Systems) == 0 {
		return nil, fmt.Errorf("a Redfish service needs at least one system")
	}

	if opts.SessionOnly && opts.NoSessions {
		return nil, fmt.Errorf("session-only and no sessions exclude each other")
	}

	if opts.ResetTypes == nil {
		opts.ResetTypes = DefaultResetTypes
	}

	for _, rt := range opts.ResetTypes {
		if !slices.Contains(DefaultResetTypes, rt) {
			return nil, fmt.Errorf("unknown reset type %q", rt)
		}
	}

	s := &Service{opts: opts, sessions: map[string]string{}}

	seen := map[string]bool{}

	for i, sys := range opts.Systems {
		if sys.Machine == nil {
			return nil, fmt.Errorf("system %d has no machine", i+1)
		}

		if sys.ID == "" {
			sys.ID = strconv.Itoa(i + 1)
		}

		if url.PathEscape(sys.ID) != sys.ID || seen[sys.ID] {
			return nil, fmt.Errorf("system id %q is not unique or not a plain path segment", sys.ID)
		}

		seen[sys.ID] = true

		mode := sys.BootMode
		if mode == "" {
			mode = "UEFI"
		}

		if mode != "UEFI" && mode != "Legacy" {
			return nil, fmt.Errorf("system %s: boot mode %q (Legacy or UEFI)", sys.ID, mode)
		}

		s.systems = append(s.systems, &system{System: sys, mode: mode})
	}

	return s, nil
}

// Paths of the service.
const (
	rootPath     = "/redfish/v1"
	systemsPath  = rootPath + "/Systems"
	sessionSvc   = rootPath + "/SessionService"
	sessionsPath = sessionSvc + "/Sessions"
	resetSuffix  = "/Actions/ComputerSystem.Reset"
)

// ServeHTTP routes a request. The service root and the login are open, as the Redfish
// specification asks; everything else needs a session token or basic authentication.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")

	switch {
	case path == "/redfish":
		s.only(w, r, http.MethodGet, func() { writeJSON(w, http.StatusOK, map[string]string{"v1": rootPath + "/"}) })

		return
	case path == rootPath:
		s.only(w, r, http.MethodGet, func() { writeJSON(w, http.StatusOK, s.serviceRoot()) })

		return
	case path == sessionsPath && r.Method == http.MethodPost && !s.opts.NoSessions:
		s.login(w, r)

		return
	}

	if !s.authorized(r) {
		if !s.opts.SessionOnly {
			w.Header().Set("WWW-Authenticate", `Basic realm="anvil lab BMC"`)
		}

		writeError(w, http.StatusUnauthorized, "NoValidSession",
			"There is no valid session or the credentials are wrong.")

		return
	}

	switch {
	case path == systemsPath:
		s.only(w, r, http.MethodGet, func() { writeJSON(w, http.StatusOK, s.systemCollection()) })
	case strings.HasPrefix(path, systemsPath+"/"):
		s.serveSystem(w, r, strings.TrimPrefix(path, systemsPath+"/"))
	case !s.opts.NoSessions && path == sessionSvc:
		s.only(w, r, http.MethodGet, func() { writeJSON(w, http.StatusOK, sessionServiceDoc()) })
	case !s.opts.NoSessions && path == sessionsPath:
		s.only(w, r, http.MethodGet, func() { writeJSON(w, http.StatusOK, s.sessionCollection()) })
	case !s.opts.NoSessions && strings.HasPrefix(path, sessionsPath+"/"):
		s.serveSession(w, r, strings.TrimPrefix(path, sessionsPath+"/"))
	default:
		notFound(w, r)
	}
}

func (s *Service) serveSystem(w http.ResponseWriter, r *http.Request, rest string) {
	id, action, _ := strings.Cut(rest, "/")

	sys := s.system(id)
	if sys == nil {
		notFound(w, r)

		return
	}

	switch action {
	case "":
		switch r.Method {
		case http.MethodGet:
			s.getSystem(w, r, sys)
		case http.MethodPatch:
			s.patchSystem(w, r, sys)
		default:
			methodNotAllowed(w, "GET, PATCH")
		}
	case strings.TrimPrefix(resetSuffix, "/"):
		s.only(w, r, http.MethodPost, func() { s.reset(w, r, sys) })
	default:
		notFound(w, r)
	}
}

func (s *Service) system(id string) *system {
	for _, sys := range s.systems {
		if sys.ID == id {
			return sys
		}
	}

	return nil
}

// only runs serve for the one method the resource allows.
func (s *Service) only(w http.ResponseWriter, r *http.Request, method string, serve func()) {
	if r.Method != method {
		methodNotAllowed(w, method)

		return
	}

	serve()
}

func (s *Service) authorized(r *http.Request) bool {
	if s.opts.Username == "" {
		return true
	}

	if token := r.Header.Get("X-Auth-Token"); token != "" && !s.opts.NoSessions {
		s.mu.Lock()
		defer s.mu.Unlock()

		for _, t := range s.sessions {
			if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
				return true
			}
		}

		return false
	}

	user, password, ok := r.BasicAuth()

	return ok && !s.opts.SessionOnly && s.credentialsMatch(user, password)
}

func (s *Service) credentialsMatch(user, password string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(s.opts.Username))
	p := subtle.ConstantTimeCompare([]byte(password), []byte(s.opts.Password))

	return u&p == 1
}

func (s *Service) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UserName *string
		Password *string
	}

	if !readJSON(w, r, &body) {
		return
	}

	if body.UserName == nil || body.Password == nil {
		writeError(w, http.StatusBadRequest, "PropertyMissing", "A session needs UserName and Password.")

		return
	}

	if s.opts.Username != "" && !s.credentialsMatch(*body.UserName, *body.Password) {
		writeError(w, http.StatusUnauthorized, "NoValidSession", "The user name or password is wrong.")

		return
	}

	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError", "No randomness for a session token.")

		return
	}

	token := hex.EncodeToString(raw)

	s.mu.Lock()
	s.nextID++
	id := strconv.Itoa(s.nextID)
	s.sessions[id] = token
	s.mu.Unlock()

	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", sessionsPath+"/"+id)
	writeJSON(w, http.StatusCreated, sessionDoc(id, *body.UserName))
}

func (s *Service) serveSession(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	_, ok := s.sessions[id]
	s.mu.Unlock()

	if !ok {
		notFound(w, r)

		return
	}

	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, sessionDoc(id, s.opts.Username))
	case http.MethodDelete:
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		methodNotAllowed(w, "GET, DELETE")
	}
}

// Sessions counts the open sessions (for tests: a client logs out).
func (s *Service) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()

	return len(s.sessions)
}

func (s *Service) sessionCollection() map[string]any {
	s.mu.Lock()
	ids := make([]string, 0, len(s.sessions))

	for id := range s.sessions {
		ids = append(ids, id)
	}
	s.mu.Unlock()

	slices.Sort(ids)

	members := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		members = append(members, odataID(sessionsPath+"/"+id))
	}

	return map[string]any{
		"@odata.id":           sessionsPath,
		"@odata.type":         "#SessionCollection.SessionCollection",
		"Name":                "Session Collection",
		"Members":             members,
		"Members@odata.count": len(members),
	}
}
