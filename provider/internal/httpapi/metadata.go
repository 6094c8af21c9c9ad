package httpapi

import (
	"net"
	"net/http"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// handleMetadata serves a machine's Talos configuration (talos.config=) to a request that
// carries the machine's token for its current allocation.
func (s *Server) handleMetadata(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("machine")

	claims, err := s.opts.Scripts.VerifyToken(r.URL.Query().Get("token"))
	if err != nil || claims.Kind != token.KindMetadata || claims.MachineID != id {
		s.metrics.metadata.WithLabelValues("forbidden").Inc()
		s.opts.Logger.Warn("metadata request with an invalid token", zap.String("machine", id), zap.String("remote", r.RemoteAddr))
		http.Error(w, "invalid token", http.StatusForbidden)

		return
	}

	intent, err := safe.StateGetByID[*resources.MachineIntent](r.Context(), s.opts.State, id)
	if err != nil && !state.IsNotFoundError(err) {
		http.Error(w, "error reading machine state", http.StatusServiceUnavailable)

		return
	}

	if intent == nil || intent.TypedSpec().Allocation == nil || intent.TypedSpec().Allocation.ID != claims.Binding {
		s.metrics.metadata.WithLabelValues("superseded").Inc()
		http.Error(w, "token is not for the machine's current allocation", http.StatusForbidden)

		return
	}

	// Talos is up: a kexec handoff into it went through.
	if e := s.opts.View.Get(id); e != nil && e.HandoffPending() {
		if err = s.opts.Installs.RecordTalosSeen(r.Context(), id, claims.Binding); err != nil {
			s.opts.Logger.Warn("error recording Talos seen up", zap.String("machine", id), zap.Error(err))
		}
	}

	config := intent.TypedSpec().Allocation.Config
	if config == "" && s.opts.JoinConfig != nil {
		config, _ = s.opts.JoinConfig()
	}

	if config == "" {
		s.metrics.metadata.WithLabelValues("empty").Inc()
		http.Error(w, "no configuration for this machine", http.StatusNotFound)

		return
	}

	// Talos' install events come from the address it fetched its config from: over IPv6
	// that is not the address iPXE booted it from.
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		s.opts.View.NoteTalosAddress(host, id, claims.Binding)
	}

	s.metrics.metadata.WithLabelValues("served").Inc()
	s.opts.Logger.Info("served machine config", zap.String("machine", id), zap.String("remote", r.RemoteAddr))

	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(config)) // the client went away: nothing to do
}
