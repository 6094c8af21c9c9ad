package httpapi

import (
	"context"
	"io"
	"net/http"
	"path"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

func (s *Server) handleStart(w http.ResponseWriter, _ *http.Request) {
	writeScript(w, http.StatusOK, s.opts.Scripts.StartScript())
}

func (s *Server) handleBoot(w http.ResponseWriter, r *http.Request) {
	req, m, ok := s.bootRequest(w, r, r.URL.RawQuery)
	if !ok {
		return
	}

	m, decision, ok := s.decide(w, r, m)
	if !ok {
		return
	}

	now := time.Now()
	script := s.opts.Scripts.Render(r.Context(), req, decision, token.Claims{Issued: now})

	s.metrics.scriptsByKind[decision.Boot].Inc()
	s.recordBoot(r, req, m, decision, now, script.AgentToken.Issued)

	if script.Handoff {
		s.opts.Trace.Mark(req.MachineID, boottrace.PhaseHandoff, req.Firmware, "ipxe")
	}

	writeScript(w, script.Status, script.Body)
}

// bootRequest reads a boot request (a boot-script query, or a UKI path put as one) and
// what the provider knows of the machine; false, with the answer written, for a bad
// request or while the provider is starting.
func (s *Server) bootRequest(w http.ResponseWriter, r *http.Request, rawQuery string) (boot.Request, lifecycle.Machine, bool) {
	req, err := boot.ParseQuery(rawQuery)
	if err != nil {
		s.metrics.badRequests.Inc()
		s.opts.Logger.Debug("refused boot request", zap.String("remote", r.RemoteAddr), untrusted.String("path", r.URL.Path), zap.Error(err))
		http.Error(w, err.Error(), http.StatusBadRequest)

		return req, lifecycle.Machine{}, false
	}

	// Until the view holds the state every machine would look unknown, and a view that
	// may be stale could send a machine that owes a wipe to its disk; iPXE retries.
	if err := s.opts.View.Serving(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)

		return req, lifecycle.Machine{}, false
	}

	m := lifecycle.Machine{ID: req.MachineID}
	if e := s.opts.View.Get(req.MachineID); e != nil {
		m = *e
	}

	return req, m, true
}

// confirmTimeout bounds the read of a machine's intent that confirms a boot away from
// the agent; past it the boot is answered 503 and iPXE asks again.
const confirmTimeout = 2 * time.Second

// decide is the machine's boot decision. One that sends the machine anywhere but its
// agent (its disk, Talos) is decided again on its intent read from the state, not the
// view: on a site, a replica cut off from etcd serves from its view until its health
// probe notices (seconds), and a machine deallocated through another replica meanwhile
// would be sent to its disk instead of its wipe. The read is etcd's linearizable one, so
// a replica that cannot confirm answers 503. The agent is always safe to boot.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, m lifecycle.Machine) (lifecycle.Machine, lifecycle.BootDecision, bool) {
	decision := m.Boot(s.opts.Policy)
	if decision.Boot == lifecycle.BootAgent || s.opts.State == nil || m.Intent == nil {
		return m, decision, true
	}

	ctx, cancel := context.WithTimeout(r.Context(), confirmTimeout)
	defer cancel()

	intent, err := safe.StateGetByID[*resources.MachineIntent](ctx, s.opts.State, m.ID)

	switch {
	case state.IsNotFoundError(err):
		m.Intent = nil
	case err != nil:
		s.metrics.unconfirmed.Inc()
		s.opts.Logger.Warn("boot decision not confirmed", zap.String("machine", m.ID), zap.String("decision", string(decision.Boot)), zap.Error(err))
		http.Error(w, "the provider cannot confirm this machine's boot: the state does not answer", http.StatusServiceUnavailable)

		return m, decision, false
	default:
		m.Intent = intent.TypedSpec()
	}

	return m, m.Boot(s.opts.Policy), true
}

// recordBoot notes what a boot request got: the agent token it carries, the machine's
// boot timeline, and, when it is news, an observation for the machine's controller.
func (s *Server) recordBoot(r *http.Request, req boot.Request, m lifecycle.Machine, decision lifecycle.BootDecision, now, agentIssued time.Time) {
	addr := remoteIP(r)

	if !agentIssued.IsZero() {
		s.opts.View.NoteAgentBoot(req.MachineID, agentIssued)
	}

	s.opts.Trace.MarkScript(req.MachineID, req.MAC, addr, req.Firmware, string(decision.Boot))

	obs := controllers.PXEObservation{
		MachineID: req.MachineID, UUID: req.UUID, MAC: req.MAC, Arch: req.Arch, Firmware: req.Firmware,
		Address: addr, Decision: string(decision.Boot), At: now, AgentIssued: agentIssued,
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

	// name is one of the assets' own file names, checked above.
	http.ServeFile(w, r, filepath.Join(s.opts.Scripts.Assets.Dir, name))

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
