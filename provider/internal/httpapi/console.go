package httpapi

import (
	"net"
	"net/http"
	"net/url"
)

// handleConsoleRedirect sends a browser that came to the API port's /ui/ to the web
// console, which is served over HTTPS on a port of its own (this port's TLS is the
// agents'): same host as the browser used, the console's port, the same path.
func (s *Server) handleConsoleRedirect(w http.ResponseWriter, r *http.Request) {
	console, err := url.Parse(s.opts.ConsoleURL)
	if s.opts.ConsoleURL == "" || err != nil {
		http.Error(w, "the web console is off on this provider (--ui-listen-address)", http.StatusNotFound)

		return
	}

	host := console.Hostname()
	if h, _, err := net.SplitHostPort(r.Host); err == nil && h != "" {
		host = h
	} else if r.Host != "" && err != nil {
		host = r.Host
	}

	target := url.URL{Scheme: "https", Host: net.JoinHostPort(host, console.Port()), Path: r.URL.Path, RawQuery: r.URL.RawQuery}

	http.Redirect(w, r, target.String(), http.StatusTemporaryRedirect)
}
