package fleetbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

// The provider's resource namespace and the types read (provider/internal/resources).
const (
	stateNamespace    = "metal"
	machineType       = "Machines.anvil.dev"
	machineIntentType = "MachineIntents.anvil.dev"
	machineStatusType = "MachineStatuses.anvil.dev"
)

// control is a connection to the provider's control socket.
type control struct {
	conn        *grpc.ClientConn
	transitions controlv1.TransitionServiceClient
	state       v1alpha1.StateClient
}

func dialControl(path string) (*control, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", path, err)
	}

	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", path, err)
	}

	return &control{conn: conn, transitions: controlv1.NewTransitionServiceClient(conn), state: v1alpha1.NewStateClient(conn)}, nil
}

func (c *control) Close() error { return c.conn.Close() }

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
func (c *control) records(ctx context.Context) (map[string]*machineRecord, error) {
	out := map[string]*machineRecord{}
	get := func(id string) *machineRecord {
		if out[id] == nil {
			out[id] = &machineRecord{}
		}

		return out[id]
	}

	for _, typ := range []string{machineType, machineIntentType, machineStatusType} {
		err := c.list(ctx, typ, func(id, spec string) error {
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

func (c *control) list(ctx context.Context, typ string, each func(id, spec string) error) error {
	stream, err := c.state.List(ctx, &v1alpha1.ListRequest{Namespace: stateNamespace, Type: typ})
	if err != nil {
		return fmt.Errorf("error listing %s: %w", typ, err)
	}

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return fmt.Errorf("error listing %s: %w", typ, err)
		}

		r := msg.GetResource()
		if err = each(r.GetMetadata().GetId(), r.GetSpec().GetYamlSpec()); err != nil {
			return fmt.Errorf("error reading %s %s: %w", typ, r.GetMetadata().GetId(), err)
		}
	}
}
