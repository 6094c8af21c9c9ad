package httpapi

import (
	"io"
	"net/http"
	"path"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

func (s *Server) handleStart(w http.ResponseWriter, _ *http.Request) {
	writeScript(w, http.StatusOK, s.opts.Scripts.StartScript())
}

func (s *Server) handleBoot(w http.ResponseWriter, r *http.Request) {
	req, err := boot.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.metrics.badRequests.Inc()
		s.opts.Logger.Debug("refused boot-script request", zap.String("remote", r.RemoteAddr), zap.Error(err))
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	select {
	case <-s.opts.View.Ready():
	default:
		// Until the view holds the state every machine would look unknown; iPXE retries.
		http.Error(w, "the provider is starting", http.StatusServiceUnavailable)

		return
	}

	m := lifecycle.Machine{ID: req.MachineID}
	if e := s.opts.View.Get(req.MachineID); e != nil {
		m = *e
	}

	now := time.Now()
	addr := remoteIP(r)
	decision := m.Boot(s.opts.Policy)
	script := s.opts.Scripts.Render(r.Context(), req, decision, token.Claims{Issued: now})

	s.metrics.scriptsByKind[decision.Boot].Inc()

	if !script.AgentToken.Issued.IsZero() {
		s.opts.View.NoteAgentBoot(req.MachineID, script.AgentToken.Issued)
	}

	s.opts.Trace.MarkScript(req.MachineID, req.MAC, addr, req.Firmware, string(decision.Boot))

	if script.Handoff {
		s.opts.Trace.Mark(req.MachineID, boottrace.PhaseHandoff, req.Firmware, "ipxe")
	}

	obs := controllers.PXEObservation{
		MachineID: req.MachineID, UUID: req.UUID, MAC: req.MAC, Arch: req.Arch, Firmware: req.Firmware,
		Address: addr, Decision: string(decision.Boot), At: now, AgentIssued: script.AgentToken.Issued,
	}

	// Most boots repeat what is recorded already: only news goes to the controller.
	if obs.Changes(m.Machine) {
		if m.Machine == nil || m.Machine.LastDecision != obs.Decision {
			s.opts.Logger.Info("boot", zap.String("machine", req.MachineID), zap.String("mac", req.MAC),
				zap.String("arch", req.Arch), zap.String("firmware", req.Firmware),
				zap.String("decision", obs.Decision), zap.String("reason", decision.Reason))
		}

		s.observe(obs)
	}

	writeScript(w, script.Status, script.Body)
}

func (s *Server) observe(obs controllers.PXEObservation) {
	select {
	case s.opts.Observations <- obs:
	default:
		s.metrics.observationsLost.Inc()
	}
}

func (s *Server) handleAgentAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name != path.Base(name) || !s.opts.Scripts.Assets.Has(name) {
		http.Error(w, "no such agent asset", http.StatusNotFound)

		return
	}

	http.ServeFile(w, r, filepath.Join(s.opts.Scripts.Assets.Dir, name)) //nolint:gosec // name is one of the assets' own file names, checked above

	// iPXE fetches the initramfs last: served whole, the agent's assets are in.
	if s.opts.Trace != nil && r.Context().Err() == nil && s.agentInitramfs(name) {
		s.opts.Trace.MarkFrom(remoteIP(r), boottrace.PhaseAgentAssets, "")
	}
}

// handleBootFile serves an EFI boot binary to a UEFI HTTP boot client. An unknown name is
// a 404, which sends the firmware on to its next boot option.
func (s *Server) handleBootFile(w http.ResponseWriter, r *http.Request) {
	p, ok := s.opts.BootFiles[r.PathValue("name")]
	if !ok {
		http.Error(w, "no such boot file", http.StatusNotFound)

		return
	}

	http.ServeFile(w, r, p)
}

// agentInitramfs says whether name is the initramfs of one of the agent's asset sets.
func (s *Server) agentInitramfs(name string) bool {
	for _, arch := range []string{"amd64", "arm64"} {
		if set, ok := s.opts.Scripts.Assets.For(arch); ok && set.Initramfs == name {
			return true
		}
	}

	return false
}

// Header values of every script, shared by all answers (net/http only reads them):
// Header().Set would allocate them on each request.
var (
	scriptContentType  = []string{"text/plain; charset=utf-8"}
	scriptCacheControl = []string{"no-store"}
)

func writeScript(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h["Content-Type"] = scriptContentType
	h["Cache-Control"] = scriptCacheControl
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body) // the client went away: nothing to do
}
