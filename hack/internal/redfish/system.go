package redfish

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

func (s *Service) getSystem(w http.ResponseWriter, r *http.Request, sys *system) {
	sys.mu.Lock()
	defer sys.mu.Unlock()

	s.writeSystem(w, r, sys)
}

// writeSystem answers with the system as its machine is now; sys.mu is held.
func (s *Service) writeSystem(w http.ResponseWriter, r *http.Request, sys *system) {
	on, err := sys.Machine.PowerState(r.Context())
	if err != nil {
		machineError(w, sys, "reading the power state", err)

		return
	}

	network, err := sys.Machine.NextBootNetwork(r.Context())
	if err != nil {
		machineError(w, sys, "reading the boot override", err)

		return
	}

	writeJSON(w, http.StatusOK, s.systemDoc(sys, on, bootState{networkOnce: network, mode: sys.mode}))
}

// patchSystem sets the boot override: the only writable part of the system.
func (s *Service) patchSystem(w http.ResponseWriter, r *http.Request, sys *system) {
	var body map[string]json.RawMessage
	if !readJSON(w, r, &body) {
		return
	}

	for name := range body {
		if name != "Boot" {
			writeError(w, http.StatusBadRequest, "PropertyNotWritable",
				fmt.Sprintf("The property %s is not writable; only Boot is.", name))

			return
		}
	}

	var boot map[string]json.RawMessage
	if err := json.Unmarshal(body["Boot"], &boot); err != nil || boot == nil {
		writeError(w, http.StatusBadRequest, "PropertyValueTypeError", "Boot must be an object.")

		return
	}

	allowed := map[string][]string{
		"BootSourceOverrideEnabled": {"Disabled", "Once"},
		"BootSourceOverrideTarget":  {"None", "Pxe"},
	}
	if !s.opts.NoBootMode {
		allowed["BootSourceOverrideMode"] = []string{"Legacy", "UEFI"}
	}

	values := map[string]string{}

	for name, raw := range boot {
		choices, known := allowed[name]
		if !known {
			writeError(w, http.StatusBadRequest, "PropertyUnknown",
				fmt.Sprintf("The property Boot/%s is not known or not writable on this system.", name))

			return
		}

		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
				fmt.Sprintf("Boot/%s must be a string.", name))

			return
		}

		if !slices.Contains(choices, v) {
			writeError(w, http.StatusBadRequest, "PropertyValueNotInList",
				fmt.Sprintf("The value %q of Boot/%s is not supported; allowed: %v.", v, name, choices))

			return
		}

		values[name] = v
	}

	sys.mu.Lock()
	defer sys.mu.Unlock()

	pending, err := sys.Machine.NextBootNetwork(r.Context())
	if err != nil {
		machineError(w, sys, "reading the boot override", err)

		return
	}

	enabled, target := "Disabled", "None"
	if pending {
		enabled, target = "Once", "Pxe"
	}

	if v, ok := values["BootSourceOverrideTarget"]; ok {
		target = v
		// A target alone arms it once: what clients that send only the target mean.
		if _, ok := values["BootSourceOverrideEnabled"]; !ok && v != "None" {
			enabled = "Once"
		}
	}

	if v, ok := values["BootSourceOverrideEnabled"]; ok {
		enabled = v
	}

	if err := sys.Machine.SetNextBootNetwork(r.Context(), enabled == "Once" && target == "Pxe"); err != nil {
		machineError(w, sys, "setting the boot override", err)

		return
	}

	if v, ok := values["BootSourceOverrideMode"]; ok {
		sys.mode = v
	}

	s.writeSystem(w, r, sys)
}

func (s *Service) reset(w http.ResponseWriter, r *http.Request, sys *system) {
	var body struct{ ResetType *string }
	if !readJSON(w, r, &body) {
		return
	}

	if body.ResetType == nil {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing", "The Reset action needs a ResetType.")

		return
	}

	resetType := *body.ResetType
	if !slices.Contains(s.opts.ResetTypes, resetType) {
		writeError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
			fmt.Sprintf("The ResetType %q is not supported by this system; allowed: %v.", resetType, s.opts.ResetTypes))

		return
	}

	sys.mu.Lock()
	defer sys.mu.Unlock()

	ctx := r.Context()

	on, err := sys.Machine.PowerState(ctx)
	if err != nil {
		machineError(w, sys, "reading the power state", err)

		return
	}

	switch resetType {
	case ResetOn, ResetForceOn:
		if !on {
			err = sys.Machine.PowerOn(ctx)
		}
	case ResetForceOff, ResetGracefulShutdown:
		// The lab's machines have no guest agent to ask: a graceful shutdown is a cut.
		if on {
			err = sys.Machine.ForceOff(ctx)
		}
	case ResetForceRestart, ResetGracefulRestart:
		if !on {
			writeError(w, http.StatusConflict, "ResourceInUse",
				fmt.Sprintf("The system is off; %s needs it on.", resetType))

			return
		}

		err = sys.Machine.Reset(ctx)
	case ResetPowerCycle:
		if on {
			err = sys.Machine.ForceOff(ctx)
		}

		if err == nil {
			err = sys.Machine.PowerOn(ctx)
		}
	case ResetPushPowerButton:
		if on {
			err = sys.Machine.ForceOff(ctx)
		} else {
			err = sys.Machine.PowerOn(ctx)
		}
	}

	if err != nil {
		machineError(w, sys, resetType, err)

		return
	}

	w.WriteHeader(http.StatusNoContent)
}

func machineError(w http.ResponseWriter, sys *system, doing string, err error) {
	writeError(w, http.StatusInternalServerError, "InternalError",
		fmt.Sprintf("Error %s of system %s: %v.", doing, sys.ID, err))
}
