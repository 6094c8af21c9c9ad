// Package powerapi serves the lab's machines' power over the HTTP power API the
// provider's api backend speaks (provider/internal/power/api): the lab's stand-in for a
// BMC, for machines whose power owner is the lab rather than a simulated BMC.
package powerapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/powerwire"
)

// Machine is one machine's power, as the lab drives it.
type Machine interface {
	Running() bool
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Reset(ctx context.Context) error
	SetNextBootNetwork(on bool) error
}

// Lookup finds a machine by its SMBIOS UUID.
type Lookup func(uuid string) (Machine, bool)

// maxBody bounds a request body: the requests are a few bytes of JSON.
const maxBody = 4 << 10

// Handler serves the power API for the machines lookup finds.
func Handler(lookup Lookup, logger *zap.Logger) http.Handler {
	s := &server{lookup: lookup, logger: logger}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /machines/{uuid}/power", s.getPower)
	mux.HandleFunc("POST /machines/{uuid}/power", s.postPower)
	mux.HandleFunc("POST /machines/{uuid}/boot", s.postBoot)

	return mux
}

type server struct {
	lookup Lookup
	logger *zap.Logger
}

func (s *server) machine(w http.ResponseWriter, r *http.Request) (Machine, bool) {
	m, ok := s.lookup(r.PathValue("uuid"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no machine %q", r.PathValue("uuid")))
	}

	return m, ok
}

func (s *server) getPower(w http.ResponseWriter, r *http.Request) {
	m, ok := s.machine(w, r)
	if !ok {
		return
	}

	state := "off"
	if m.Running() {
		state = "on"
	}

	writeJSON(w, http.StatusOK, powerwire.PowerReply{State: state})
}

func (s *server) postPower(w http.ResponseWriter, r *http.Request) {
	m, ok := s.machine(w, r)
	if !ok {
		return
	}

	var req powerwire.PowerRequest
	if !decode(w, r, &req) {
		return
	}

	// Power actions outlive the request: a client that gives up must not leave QEMU
	// half started.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()

	var err error

	switch req.Action {
	case powerwire.ActionOn:
		if !m.Running() {
			err = m.Start(ctx)
		}
	case powerwire.ActionOff:
		if m.Running() {
			err = m.Stop(ctx)
		}
	case powerwire.ActionCycle:
		if m.Running() {
			err = m.Reset(ctx)
		} else {
			err = m.Start(ctx)
		}
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("action %q is not one of on, off, cycle", req.Action))

		return
	}

	if err != nil {
		s.logger.Warn("power action failed", zap.String("machine", r.PathValue("uuid")), zap.String("action", req.Action), zap.Error(err))
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("%s: %v", req.Action, err))

		return
	}

	s.logger.Info("power", zap.String("machine", r.PathValue("uuid")), zap.String("action", req.Action))
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) postBoot(w http.ResponseWriter, r *http.Request) {
	m, ok := s.machine(w, r)
	if !ok {
		return
	}

	var req powerwire.BootRequest
	if !decode(w, r, &req) {
		return
	}

	switch {
	case req.Device != "network":
		writeError(w, http.StatusBadRequest, fmt.Sprintf("boot device %q is not supported (only network)", req.Device))

		return
	case !req.Once:
		writeError(w, http.StatusBadRequest, "only a one-time boot override is supported")

		return
	case req.Mode != "" && req.Mode != "legacy" && req.Mode != "uefi":
		writeError(w, http.StatusBadRequest, fmt.Sprintf("boot mode %q is not one of legacy, uefi", req.Mode))

		return
	}

	if err := m.SetNextBootNetwork(true); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())

		return
	}

	s.logger.Info("next boot network", zap.String("machine", r.PathValue("uuid")))
	w.WriteHeader(http.StatusNoContent)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()

	if err := dec.Decode(v); err != nil {
		msg := "the body is not valid JSON: " + err.Error()
		if errors.Is(err, io.EOF) {
			msg = "the body is empty"
		}

		writeError(w, http.StatusBadRequest, msg)

		return false
	}

	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) //nolint:errcheck,errchkjson // the client went away: nothing to do
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, powerwire.ErrorReply{Error: msg})
}
