package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Files in the state directory.
const (
	// TokenFile holds the login token, written once on first start (mode 0600) for the
	// operator to read; the provider itself keeps only its hash (TokenHashFile), so the
	// file may be removed once the token is in a password manager.
	TokenFile     = "ui-token"
	TokenHashFile = "ui-token.sha256" //nolint:gosec // a file name, not a credential
)

const (
	sessionCookie = "anvil_console"
	// sessionTTL is how long a login lasts.
	sessionTTL = 12 * time.Hour
	// maxSessions bounds the logins kept: the oldest goes when a new one would pass it.
	maxSessions = 256
)

// LoadToken returns the SHA-256 of the console's login token, generating the token
// into dir/ui-token on first start (created reports that). Only the hash is kept in
// memory; the token is never logged.
func LoadToken(dir string) (hash [sha256.Size]byte, created bool, err error) {
	hashPath := filepath.Join(dir, TokenHashFile)

	data, err := os.ReadFile(hashPath)

	switch {
	case err == nil:
		b, err := hex.DecodeString(strings.TrimSpace(string(data)))
		if err != nil || len(b) != sha256.Size {
			return hash, false, fmt.Errorf("%s is not a SHA-256 in hex: remove it and %s to have a new token made", hashPath, TokenFile)
		}

		copy(hash[:], b)

		return hash, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return hash, false, fmt.Errorf("error reading the console token hash: %w", err)
	}

	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return hash, false, fmt.Errorf("error generating the console token: %w", err)
	}

	token := "anvil-" + base64.RawURLEncoding.EncodeToString(raw)
	hash = sha256.Sum256([]byte(token))

	// O_EXCL: a token file left without its hash (a crash between the two writes) is
	// not overwritten silently: the operator may already hold that token.
	tokenPath := filepath.Join(dir, TokenFile)

	f, err := os.OpenFile(tokenPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return hash, false, fmt.Errorf("error creating %s (remove it to have a new token made): %w", tokenPath, err)
	}

	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()

		return hash, false, fmt.Errorf("error writing %s: %w", tokenPath, err)
	}

	if err := f.Close(); err != nil {
		return hash, false, fmt.Errorf("error writing %s: %w", tokenPath, err)
	}

	if err := writeFileAtomic(hashPath, []byte(hex.EncodeToString(hash[:])+"\n"), 0o600); err != nil {
		return hash, false, fmt.Errorf("error writing the console token hash: %w", err)
	}

	return hash, true, nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"

	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}

	return os.Rename(tmp, path)
}

// session is one login.
type session struct {
	// csrf is the token every form of the session carries back.
	csrf    string
	who     string
	expires time.Time
}

// sessions are the logins, by the SHA-256 of their cookie (a dump of memory holds no
// usable cookie).
type sessions struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session
	now  func() time.Time
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{byID: map[[sha256.Size]byte]*session{}, now: now}
}

// create starts a session and returns its cookie value.
func (s *sessions) create(who string) (string, *session, error) {
	id, err := randomString()
	if err != nil {
		return "", nil, err
	}

	csrf, err := randomString()
	if err != nil {
		return "", nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	now := s.now()

	// Drop the expired, then the oldest if still full.
	if len(s.byID) >= maxSessions {
		var (
			oldestKey [sha256.Size]byte
			oldest    *session
		)

		for k, v := range s.byID {
			if now.After(v.expires) {
				delete(s.byID, k)

				continue
			}

			if oldest == nil || v.expires.Before(oldest.expires) {
				oldestKey, oldest = k, v
			}
		}

		if len(s.byID) >= maxSessions {
			delete(s.byID, oldestKey)
		}
	}

	sess := &session{csrf: csrf, who: who, expires: now.Add(sessionTTL)}
	s.byID[sha256.Sum256([]byte(id))] = sess

	return id, sess, nil
}

// get returns the live session of the cookie value, nil for none.
func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}

	key := sha256.Sum256([]byte(id))

	s.mu.Lock()
	defer s.mu.Unlock()

	sess := s.byID[key]
	if sess == nil {
		return nil
	}

	if s.now().After(sess.expires) {
		delete(s.byID, key)

		return nil
	}

	return sess
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	delete(s.byID, sha256.Sum256([]byte(id)))
}

func randomString() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("error generating a session secret: %w", err)
	}

	return base64.RawURLEncoding.EncodeToString(b), nil
}

// tokenMatches compares in constant time, through the hash: the token's length leaks
// nothing either.
func tokenMatches(hash [sha256.Size]byte, token string) bool {
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))

	return subtle.ConstantTimeCompare(got[:], hash[:]) == 1
}

// clientCertificate names the verified client certificate of the request (issued by the
// provider's CA, as anvilctl presents over TCP), "" without one.
func clientCertificate(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return ""
	}

	return "certificate " + r.TLS.VerifiedChains[0][0].Subject.CommonName
}

// session returns the request's session: its cookie's, or a new one for a verified
// client certificate (set on w). Nil means the request is not authenticated.
func (s *Server) session(w http.ResponseWriter, r *http.Request) *session {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if sess := s.sessions.get(c.Value); sess != nil {
			return sess
		}
	}

	who := clientCertificate(r)
	if who == "" {
		return nil
	}

	id, sess, err := s.sessions.create(who)
	if err != nil {
		s.logger.Error("error starting a console session")

		return nil
	}

	setSessionCookie(w, id)

	return sess
}

func setSessionCookie(w http.ResponseWriter, id string) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/ui/", MaxAge: int(sessionTTL.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
	})
}

// sameOrigin refuses a state-changing request another site's page could have sent: its
// Origin (or, without one, its Referer) must be this console. Browsers send Origin on
// every POST; a request with neither is from a tool, which the CSRF token still guards.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = r.Header.Get("Referer")
	}

	if origin == "" {
		return true
	}

	u, err := url.Parse(origin)
	if err != nil {
		return false
	}

	return u.Host == r.Host
}

// checkCSRF verifies a POST's CSRF token against its session's.
func checkCSRF(r *http.Request, sess *session) bool {
	got := r.PostFormValue("csrf")

	return sameOrigin(r) && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}
