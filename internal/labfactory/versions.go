package labfactory

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// The versions the stand-in offers by default: the lab's Talos, and a Kubernetes that
// Talos supports (Talos v1.9 supports Kubernetes 1.27–1.32), so that Omni, which
// offers a Talos version only with a compatible Kubernetes, lists it.
var (
	DefaultTalosVersions      = []string{"v1.9.0"}
	DefaultKubernetesVersions = []string{"v1.31.4", "v1.32.0"}
)

// The registry repositories the stand-in lists tags of, as the factory's and Sidero
// Labs' registries do: Omni reads the Kubernetes versions from kubelet's tags
// (--kubernetes-registry); installer's tags are the Talos versions.
const (
	kubeletRepo   = "siderolabs/kubelet"
	installerRepo = "siderolabs/installer"
)

var (
	versionPathRe = regexp.MustCompile(`^/version/([^/]+)/(extensions|overlays)/official$`)
	tagsPathRe    = regexp.MustCompile(`^/v2/(.+)/tags/list$`)
)

// WithTalosVersions sets the Talos versions the stand-in offers (GET /versions), each
// with a leading v; without it, DefaultTalosVersions.
func WithTalosVersions(versions ...string) Option {
	return func(f *Factory) { f.talosVersions = slices.Clone(versions) }
}

// WithKubernetesVersions sets the Kubernetes versions the stand-in's registry offers
// (the tags of siderolabs/kubelet), each with a leading v; without it,
// DefaultKubernetesVersions.
func WithKubernetesVersions(versions ...string) Option {
	return func(f *Factory) { f.kubernetesVersions = slices.Clone(versions) }
}

// versions answers GET /versions: the Talos versions. The factory marks broken versions
// with ?broken=true; the stand-in has none.
func (f *Factory) versions(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("broken") == "true" {
		writeJSON(w, []string{})

		return
	}

	writeJSON(w, f.talosVersions)
}

// officialList answers GET /version/<v>/{extensions,overlays}/official: the stand-in has
// no official extensions or overlays to list, for a version it offers. Omni asks with
// the version as its TalosVersion resources hold it, without the leading v.
func (f *Factory) officialList(w http.ResponseWriter, r *http.Request) {
	m := versionPathRe.FindStringSubmatch(r.URL.Path)
	if m == nil || !slices.Contains(f.talosVersions, "v"+strings.TrimPrefix(m[1], "v")) {
		http.NotFound(w, r)

		return
	}

	writeJSON(w, []struct{}{})
}

// registry answers the part of the OCI distribution API that lists versions: the base
// (GET /v2/, which clients ping first) and GET /v2/<repo>/tags/list.
func (f *Factory) registry(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")

	if r.URL.Path == "/v2/" || r.URL.Path == "/v2" {
		writeJSON(w, struct{}{})

		return
	}

	var tags []string

	m := tagsPathRe.FindStringSubmatch(r.URL.Path)

	// Real Talos' installer images are in a registry of their own; kubelet's and the
	// installer's tag lists stay the stand-in's.
	if f.talos != nil && (m == nil || (m[1] != kubeletRepo && m[1] != installerRepo)) {
		f.talos.registry(w, r, f)

		return
	}

	switch {
	case m == nil:
	case m[1] == kubeletRepo:
		tags = f.kubernetesVersions
	case m[1] == installerRepo:
		tags = f.talosVersions
	}

	if tags == nil {
		registryError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository name not known to registry")

		return
	}

	writeJSON(w, map[string]any{"name": m[1], "tags": tags})
}

// registryError answers with the distribution API's error document.
func registryError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	writeJSONBody(w, map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}

func isRegistryPath(path string) bool { return path == "/v2" || strings.HasPrefix(path, "/v2/") }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	writeJSONBody(w, v)
}

func writeJSONBody(w http.ResponseWriter, v any) {
	json.NewEncoder(w).Encode(v) //nolint:errcheck,errchkjson // the client went away: nothing to do
}
