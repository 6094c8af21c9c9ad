package httpapi

import (
	"errors"
	"net/http"
	"path"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	anvilstate "github.com/anvil-metal/anvil/provider/internal/state"
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

	in, err := s.inputs(r, req.MachineID)
	if err != nil {
		s.opts.Logger.Error("error reading machine state", zap.String("machine", req.MachineID), zap.Error(err))
		http.Error(w, "error reading machine state", http.StatusServiceUnavailable)

		return
	}

	now := time.Now()
	decision := boot.Decide(in)
	script := s.opts.Scripts.Render(req, decision, token.Claims{Issued: now})

	s.metrics.scripts.WithLabelValues(string(decision.Kind)).Inc()

	if in.Machine == nil || in.Machine.LastDecision != string(decision.Kind) {
		s.opts.Logger.Info("boot", zap.String("machine", req.MachineID), zap.String("mac", req.MAC),
			zap.String("arch", req.Arch), zap.String("firmware", req.Firmware),
			zap.String("decision", string(decision.Kind)), zap.String("reason", decision.Reason))
	}

	s.observe(controllers.PXEObservation{
		MachineID: req.MachineID, UUID: req.UUID, MAC: req.MAC, Arch: req.Arch, Firmware: req.Firmware,
		Address: remoteIP(r), Decision: string(decision.Kind), At: now, AgentIssued: script.AgentToken.Issued,
	})

	writeScript(w, script.Status, script.Body)
}

func (s *Server) inputs(r *http.Request, id resource.ID) (boot.Inputs, error) {
	ctx := r.Context()

	var in boot.Inputs

	machine, err := safe.StateGetByID[*anvilstate.Machine](ctx, s.opts.State, id)
	if err != nil {
		if state.IsNotFoundError(err) {
			return in, nil
		}

		return in, err
	}

	in.Machine = machine.TypedSpec()

	intent, err := safe.StateGetByID[*anvilstate.MachineIntent](ctx, s.opts.State, id)
	if err == nil {
		in.Intent = intent.TypedSpec()
	} else if !state.IsNotFoundError(err) {
		return in, err
	}

	status, err := safe.StateGetByID[*anvilstate.MachineStatus](ctx, s.opts.State, id)
	if err == nil {
		in.Status = status.TypedSpec()
	} else if !state.IsNotFoundError(err) {
		return in, err
	}

	return in, nil
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

	http.ServeFile(w, r, filepath.Join(s.opts.Scripts.Assets.Dir, name))
}

func writeScript(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write([]byte(body)) //nolint:errcheck
}

var errNoMachine = errors.New("machine is not known")
