package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Reboot asks for a reboot of an accepted machine. Pending and rejected machines are
// never touched.
func (t *Transitions) Reboot(ctx context.Context, req *controlv1.RebootRequest) (*controlv1.RebootResponse, error) {
	id := newID()

	in, err := t.transition(ctx, "reboot", req.GetMachineId(), func(spec *resources.MachineIntentSpec) error {
		if spec.Acceptance != resources.AcceptanceAccepted {
			return failedPrecondition("machine %q is %s: only accepted machines are rebooted", req.GetMachineId(), spec.Acceptance)
		}

		spec.RebootID = id

		return nil
	})
	if err != nil {
		return nil, err
	}

	return &controlv1.RebootResponse{Intent: in, RebootId: id}, nil
}

// bmcWrites serializes every write of a BMC config and its secret (a user's through
// SetBMC, an agent's through StoreAgentBMC): the two resources change together, and a
// user's credentials must never be half replaced by an agent's.
var bmcWrites sync.Mutex

// SetBMC stores how to reach a machine's BMC; the password goes to the BMCSecret, which
// the state API never serves. The machine need not be known yet.
func (t *Transitions) SetBMC(ctx context.Context, req *controlv1.SetBMCRequest) (*controlv1.SetBMCResponse, error) {
	id := req.GetMachineId()
	if err := validateMachineID(id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	bmcWrites.Lock()
	defer bmcWrites.Unlock()

	if req.GetKind() == "" {
		if err := t.destroyBMC(ctx, id); err != nil {
			return nil, err
		}

		t.logger.Info("transition", zap.String("transition", "bmc"), zap.String("machine", id), zap.String("kind", "removed"))

		return &controlv1.SetBMCResponse{MachineId: id}, nil
	}

	ep, err := validateBMC(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	now := time.Now()

	if _, err := safe.StateModifyWithResult(ctx, t.st, resources.NewBMCSecret(id), func(s *resources.BMCSecret) error {
		s.TypedSpec().Password = req.GetPassword()

		return nil
	}); err != nil {
		return nil, status.Errorf(codes.Internal, "error storing the BMC secret of machine %q: %v", id, err)
	}

	if _, err := safe.StateModifyWithResult(ctx, t.st, resources.NewBMCConfig(id), func(c *resources.BMCConfig) error {
		*c.TypedSpec() = resources.BMCConfigSpec{
			Kind: string(ep.Kind), Address: ep.Address, Port: uint32(ep.Port), Username: ep.Username, //nolint:gosec // validated ≤ 65535
			Insecure: ep.Insecure, SystemID: ep.SystemID, Source: resources.BMCSourceUser, UpdatedAt: now,
			HasPassword: req.GetPassword() != "",
		}

		return nil
	}); err != nil {
		return nil, status.Errorf(codes.Internal, "error storing the BMC config of machine %q: %v", id, err)
	}

	// ep.String has no password.
	t.logger.Info("transition", zap.String("transition", "bmc"), zap.String("machine", id), zap.Stringer("bmc", ep))

	return &controlv1.SetBMCResponse{MachineId: id, Kind: string(ep.Kind), Endpoint: ep.String()}, nil
}

func (t *Transitions) destroyBMC(ctx context.Context, id string) error {
	for _, ptr := range []resource.Pointer{resources.NewBMCConfig(id).Metadata(), resources.NewBMCSecret(id).Metadata()} {
		if err := t.st.Destroy(ctx, ptr); err != nil && !state.IsNotFoundError(err) {
			return status.Errorf(codes.Internal, "error removing the BMC config of machine %q: %v", id, err)
		}
	}

	return nil
}

// validateBMC checks a SetBMC request and returns it as an endpoint.
func validateBMC(req *controlv1.SetBMCRequest) (power.Endpoint, error) {
	ep := power.Endpoint{
		Kind: power.Kind(req.GetKind()), Address: strings.TrimSpace(req.GetAddress()), Port: int(req.GetPort()),
		Username: req.GetUsername(), Password: req.GetPassword(), Insecure: req.GetInsecure(), SystemID: req.GetSystemId(),
		MachineUUID: req.GetMachineId(),
	}

	if req.GetPort() > 65535 {
		return ep, fmt.Errorf("port %d is out of range", req.GetPort())
	}

	switch ep.Kind {
	case power.KindNone:
		return ep, nil
	case power.KindRedfish, power.KindIPMI:
		if ep.Address == "" {
			return ep, errors.New("a BMC address is required")
		}

		if ep.Kind == power.KindRedfish && strings.Contains(ep.Address, "://") {
			// A Redfish service may be given as a URL (http, or a path-less https).
			u, err := url.Parse(ep.Address)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
				return ep, fmt.Errorf("Redfish address %q is not a host, an IP or an http(s)://host URL", ep.Address)
			}

			break
		}

		if strings.ContainsAny(ep.Address, "/ ") || (strings.Contains(ep.Address, ":") && net.ParseIP(ep.Address) == nil) {
			return ep, fmt.Errorf("BMC address %q is not a host name or IP (give the port apart)", ep.Address)
		}
	case power.KindAPI:
		u, err := url.Parse(ep.Address)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return ep, fmt.Errorf("power API address %q is not an http(s) URL", ep.Address)
		}
	default:
		return ep, fmt.Errorf("BMC kind %q is not one of ipmi, redfish, api, none", ep.Kind)
	}

	if strings.ContainsAny(ep.Username, "\n\r\x00") {
		return ep, errors.New("the user name has a control character")
	}

	return ep, nil
}

// AgentBMC is what an agent provisioned on a machine's BMC.
type AgentBMC struct {
	Address  string
	Port     uint32
	User     string
	Password string //nolint:gosec // the provisioned credential, stored encrypted
}

// StoreAgentBMC records the credentials an agent provisioned in-band. A user's
// credentials are never replaced (it reports false then); an address or port the user
// gave is kept, the agent's fill in what is missing.
func StoreAgentBMC(ctx context.Context, st state.State, id string, bmc AgentBMC) (bool, error) {
	if err := validateMachineID(id); err != nil {
		return false, err
	}

	bmcWrites.Lock()
	defer bmcWrites.Unlock()

	cur, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, id)
	if err != nil && !state.IsNotFoundError(err) {
		return false, fmt.Errorf("error reading the BMC config of machine %q: %w", id, err)
	}

	if cur != nil && cur.TypedSpec().Username != "" {
		return false, nil
	}

	// The secret first: a config that says it has a password must find it.
	if _, err = safe.StateModifyWithResult(ctx, st, resources.NewBMCSecret(id), func(s *resources.BMCSecret) error {
		s.TypedSpec().Password = bmc.Password

		return nil
	}); err != nil {
		return false, fmt.Errorf("error storing the BMC secret of machine %q: %w", id, err)
	}

	if _, err = safe.StateModifyWithResult(ctx, st, resources.NewBMCConfig(id), func(c *resources.BMCConfig) error {
		spec := c.TypedSpec()
		spec.Kind = string(power.KindIPMI)
		if spec.Address == "" {
			spec.Address = bmc.Address
		}

		if spec.Port == 0 {
			spec.Port = bmc.Port
		}

		spec.Username, spec.HasPassword = bmc.User, bmc.Password != ""
		spec.Source, spec.UpdatedAt = resources.BMCSourceAgent, time.Now()

		return nil
	}); err != nil {
		return false, fmt.Errorf("error storing the BMC config of machine %q: %w", id, err)
	}

	return true, nil
}
