package fleetbench

import (
	"context"

	"gopkg.in/yaml.v3"

	"github.com/anvil-metal/anvil/bench/internal/httpbench"
)

// The provider's resource types read (provider/internal/resources).
const (
	machineType       = "Machines.anvil.dev"
	machineIntentType = "MachineIntents.anvil.dev"
	machineStatusType = "MachineStatuses.anvil.dev"
)

// intent is what the bench reads of a MachineIntent's spec.
type intent struct {
	Acceptance string `yaml:"acceptance"`
	WipeID     string `yaml:"wipeID"`
	Allocation *struct {
		ID string `yaml:"id"`
	} `yaml:"allocation"`
}

// status is what the bench reads of a MachineStatus's spec.
type status struct {
	WipedID  string `yaml:"wipedID"`
	LastWipe *struct {
		ID    string `yaml:"id"`
		Disks []struct {
			Device string `yaml:"device"`
		} `yaml:"disks"`
	} `yaml:"lastWipe"`
}

// machineRecord is a machine as the provider's state has it.
type machineRecord struct {
	Known  bool
	Intent intent
	Status status
}

// records reads every machine's identity, intent and status.
func records(ctx context.Context, ctl *httpbench.Control) (map[string]*machineRecord, error) {
	out := map[string]*machineRecord{}
	get := func(id string) *machineRecord {
		if out[id] == nil {
			out[id] = &machineRecord{}
		}

		return out[id]
	}

	for _, typ := range []string{machineType, machineIntentType, machineStatusType} {
		err := ctl.List(ctx, typ, func(id, spec string) error {
			r := get(id)

			switch typ {
			case machineType:
				r.Known = true
			case machineIntentType:
				return yaml.Unmarshal([]byte(spec), &r.Intent)
			case machineStatusType:
				return yaml.Unmarshal([]byte(spec), &r.Status)
			}

			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	return out, nil
}
