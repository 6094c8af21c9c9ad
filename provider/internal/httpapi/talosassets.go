package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
)

// handleTalosAsset serves a Talos boot asset (kernel, initramfs, cmdline) of a schematic
// and version from the image cache, which fetches it from the Image Factory once
// however many machines ask at a time. GET and HEAD, ranges and ETag (the digest) as
// http.ServeContent does them. Only the schematics and versions the provider boots are
// served: anyone on the provisioning network asks, and each other one would be a
// download of hundreds of megabytes into the cache.
func (s *Server) handleTalosAsset(w http.ResponseWriter, r *http.Request) {
	if s.opts.ImageCache == nil {
		http.Error(w, "no image cache", http.StatusServiceUnavailable)

		return
	}

	k := imagecache.Key{Schematic: r.PathValue("schematic"), Version: r.PathValue("version"), File: r.PathValue("file")}
	if err := k.Validate(); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)

		return
	}

	if !s.bootsTalos(k.Schematic, k.Version) {
		http.Error(w, "no machine of this provider boots Talos "+k.Version+" of that schematic", http.StatusNotFound)

		return
	}

	f, blob, err := s.opts.ImageCache.Open(r.Context(), k)
	if err != nil {
		s.talosAssetError(w, r, k, err)

		return
	}

	defer f.Close()

	contentType := "application/octet-stream"
	if strings.HasPrefix(k.File, "cmdline-") {
		contentType = "text/plain; charset=utf-8"
	}

	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Etag", `"`+blob.Digest+`"`)

	http.ServeContent(w, r, "", blob.FetchedAt, f)

	// Agent-mode Talos is the agent: its initramfs, fetched last and served whole, is the
	// agent's assets in, as the agent initramfs' is.
	if s.opts.Trace != nil && r.Context().Err() == nil && strings.HasPrefix(k.File, "initramfs-") && r.Header.Get("Range") == "" &&
		s.opts.Scripts.IsAgentTalos(k.Schematic, k.Version) {
		s.opts.Trace.MarkFrom(remoteIP(r), boottrace.PhaseAgentAssets, "")
	}
}

// bootsTalos says whether the provider boots Talos of the schematic at the version: an
// allocation's, or the agent's (agent-mode Talos).
func (s *Server) bootsTalos(schematic, version string) bool {
	return s.opts.Scripts.IsAgentTalos(schematic, version) || (s.opts.View != nil && s.opts.View.Serves(schematic, version))
}

// talosAssetError answers what the cache could not serve: 404 for what cannot exist or
// the factory does not have, 503 while the cache has no download or room to spare for
// it, 502 when the factory failed us, nothing when the client left.
func (s *Server) talosAssetError(w http.ResponseWriter, r *http.Request, k imagecache.Key, err error) {
	var fe *imagecache.FactoryStatusError

	switch {
	case errors.Is(err, imagecache.ErrInvalidKey):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.As(err, &fe) && fe.Status == http.StatusNotFound:
		http.Error(w, "no such boot asset at the image factory", http.StatusNotFound)
	case r.Context().Err() != nil:
		// The client went away; the download goes on for the others.
	case errors.Is(err, imagecache.ErrClosed):
		http.Error(w, "stopping", http.StatusServiceUnavailable)
	case errors.Is(err, imagecache.ErrBusy), errors.Is(err, imagecache.ErrFull):
		s.opts.Logger.Warn("Talos boot asset not cached: the image cache has no download or room to spare for it now", zap.Stringer("key", k), zap.Error(err))
		w.Header().Set("Retry-After", "10")
		http.Error(w, "the image cache has no download or room to spare for the boot asset now: ask again", http.StatusServiceUnavailable)
	default:
		s.opts.Logger.Warn("error serving Talos boot asset", zap.Stringer("key", k), zap.String("remote", r.RemoteAddr), zap.Error(err))

		msg := "the image factory could not be reached and the boot asset is not cached"
		if fe != nil {
			msg = "the image factory failed to serve the boot asset"
		}

		http.Error(w, msg, http.StatusBadGateway)
	}
}
