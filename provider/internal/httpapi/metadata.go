package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

// handleMetadata serves a machine's Talos configuration (talos.config=) to a request that
// carries the machine's token for its current allocation, from the address that first
// used that token. The token travels on a kernel line, which a host on the provisioning
// network may read (a boot script fetched for the machine's UUID): bound to its first
// user, a stolen token serves the thief or the machine, never both, and the loser's
// request is the alarm — the machine is held, its allocation never completed.
func (s *Server) handleMetadata(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("machine")

	claims, err := s.opts.Scripts.VerifyToken(r.URL.Query().Get("token"))
	if err != nil || (claims.Kind != token.KindMetadata && claims.Kind != token.KindKexecMetadata) || claims.MachineID != id {
		s.metrics.metadata.WithLabelValues("forbidden").Inc()
		s.opts.Logger.Warn("metadata request with an invalid token", untrusted.String("machine", id), zap.String("remote", r.RemoteAddr))
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

	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}

	// The allocation's Talos was given the provider's CA and an https:// URL: a request
	// over plain HTTP is someone else's, who could read the configuration on the wire.
	// Refused before the token is bound to its first user, so the machine's own fetch
	// still gets it.
	if r.TLS == nil && s.opts.Scripts.ConfigOverTLS(intent.TypedSpec().Allocation.TalosVersion) {
		s.refuseMetadata(w, r, "tls-required", "this machine's configuration is served over HTTPS only", tamper.Event{
			Machine: id, Kind: tamper.PlainConfigFetch, Remote: host,
			Detail: fmt.Sprintf("the configuration token of allocation %s was presented over plain HTTP from %s, where the machine's Talos fetches it over HTTPS: someone read its boot script; refused",
				claims.Binding, host),
		})

		return
	}

	if why := intent.TypedSpec().Held; why != "" {
		s.metrics.metadata.WithLabelValues("held").Inc()
		s.opts.Logger.Warn("metadata request for a held machine", zap.String("machine", id), zap.String("remote", r.RemoteAddr))
		http.Error(w, "machine is held after a security event", http.StatusForbidden)

		return
	}

	kexec := claims.Kind == token.KindKexecMetadata
	entry := s.opts.View.Get(id)

	path := resources.ConfigPathBootScript
	if kexec {
		path = resources.ConfigPathKexec
	}

	// A machine handed over by kexec got the kexec kind of token over its agent's pinned
	// channel; a boot script's token for it comes from whoever fetched the script.
	if !kexec && s.kexecOnly(entry, claims.Binding, host) {
		s.refuseMetadata(w, r, "kexec-only", "the machine is handed over by kexec: a boot script's token is refused", tamper.Event{
			Machine: id, Kind: tamper.BootScriptToken, Remote: host,
			Detail: fmt.Sprintf("a boot script's configuration token for allocation %s was presented from %s while the machine is handed over by kexec: someone read its boot script; refused",
				claims.Binding, host),
		})

		return
	}

	// Bound before the configuration is looked at: a Talos asking for one that is not
	// there yet (an allocation without a config, Omni's join config not known yet) is
	// still the machine's Talos, whose install events count.
	record, allowed, err := s.opts.Installs.UseConfigToken(r.Context(), id, claims.Binding, path, host)
	if err != nil {
		http.Error(w, "error recording the configuration's fetch", http.StatusServiceUnavailable)

		return
	}

	if !allowed {
		s.refuseMetadata(w, r, "replayed", "token already used", tamper.Event{
			Machine: id, Kind: tamper.ConfigReplay, Remote: host, Hold: true,
			Detail: fmt.Sprintf("the configuration token of allocation %s was used from %s after %s fetched the configuration with it at %s: the configuration may have leaked",
				claims.Binding, host, record.By, record.At.UTC().Format("2006-01-02T15:04:05Z")),
		})

		return
	}

	// Talos is up: a kexec handoff of the allocation is seen through (by the kexec, or by
	// the firmware's boot after a kexec order that never reached an agent), so that no
	// fallback power cycle interrupts it.
	if entry != nil && entry.HandoffPending() {
		if err = s.opts.Installs.RecordTalosSeen(r.Context(), id, claims.Binding); err != nil {
			s.opts.Logger.Warn("error recording Talos seen up", zap.String("machine", id), zap.Error(err))
		}
	}

	// Talos' install events come from the address it fetched its config from: over IPv6
	// that is not the address iPXE booted it from.
	s.opts.View.NoteTalosAddress(host, id, claims.Binding)

	config := intent.TypedSpec().Allocation.Config
	if config == "" && s.opts.JoinConfig != nil {
		config, _ = s.opts.JoinConfig()
	}

	if config == "" {
		s.metrics.metadata.WithLabelValues("empty").Inc()
		http.Error(w, "no configuration for this machine", http.StatusNotFound)

		return
	}

	s.metrics.metadata.WithLabelValues("served").Inc()
	s.opts.Logger.Info("served machine config", zap.String("machine", id), zap.String("remote", r.RemoteAddr))

	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(config)) // the client went away: nothing to do
}

// refuseMetadata answers a metadata request that is evidence of tampering: counted
// under result, raised as the security event ev, refused with 403 and msg.
func (s *Server) refuseMetadata(w http.ResponseWriter, r *http.Request, result, msg string, ev tamper.Event) {
	s.metrics.metadata.WithLabelValues(result).Inc()

	if err := s.opts.Tamper.Report(r.Context(), ev); err != nil {
		s.opts.Logger.Warn("error raising a security event", zap.String("machine", ev.Machine), zap.Error(err))
	}

	http.Error(w, msg, http.StatusForbidden)
}

// kexecOnly says whether the machine's configuration for the allocation goes to the kexec
// kind of token alone (lifecycle's KexecHandsOver), for a request from host: the address
// its kexec'd Talos already fetched from is exempt, as that Talos, rebooted through its
// firmware before it installed, asks with a boot script's token.
func (s *Server) kexecOnly(e *machineview.Entry, allocation, host string) bool {
	if e == nil || !e.KexecHandsOver(s.opts.Policy, time.Now()) {
		return false
	}

	if e.Status != nil {
		if f := e.Status.ConfigFetch; f != nil && f.AllocationID == allocation && f.By == host {
			return false
		}
	}

	return true
}
