package httpapi

import (
	"net/http"
	"path"
	"strings"
)

// errUncleanPath is the whole body of the refusal: it names neither the path nor the
// query, so a token in the query never comes back.
const errUncleanPath = "bad request: the path is not in canonical form"

// refuseUncleanPaths answers 400 to a request whose path is not already clean, before
// next (a ServeMux) sees it. ServeMux would answer such a path with a redirect to the
// cleaned path whose Location repeats the query: a metadata token included. No client of
// ours sends an unclean path; iPXE, Talos and the agents use the URLs the provider wrote.
func refuseUncleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cleanRequestPath(r) {
			http.Error(w, errUncleanPath, http.StatusBadRequest)

			return
		}

		next.ServeHTTP(w, r)
	})
}

// cleanRequestPath reports whether r's path is clean both as sent (what ServeMux
// matches and redirects on) and decoded (what handlers read: %2e%2e is ".."), and holds
// no encoded slash, which would make one segment read as two after decoding.
func cleanRequestPath(r *http.Request) bool {
	escaped := r.URL.EscapedPath()

	return isCleanPath(escaped) && isCleanPath(r.URL.Path) && !strings.Contains(strings.ToLower(escaped), "%2f")
}

// isCleanPath reports whether p is rooted and path.Clean leaves it as it is, but for a
// trailing slash, which Clean strips and which is clean here (/ui/, the console's prefix).
// That refuses //, /./, /../ and a trailing /. or /.. anywhere in p.
func isCleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}

	clean := path.Clean(p)
	if clean != "/" && strings.HasSuffix(p, "/") {
		clean += "/"
	}

	return clean == p
}
