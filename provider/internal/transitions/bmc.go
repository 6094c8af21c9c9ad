package transitions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// BMC is how to reach a machine's BMC, as a person gives it.
type BMC struct {
	// Backend is how the BMC is spoken to: ipmi, redfish, api or none.
	Backend  power.Backend
	Address  string
	Port     uint32
	Username string
	Password string
	Insecure bool
	SystemID string
	// Owner, when set, is a claimant setting the BMC of a machine it holds: refused
	// unless the machine is allocated to it.
	Owner string
}

// SetBMC stores how to reach a machine's BMC, and returns it as an endpoint (without
// its password); the password goes to the BMCSecret, which the state API never serves.
// The machine need not be known yet: a BMC may be given before the machine first boots.
func (s *Service) SetBMC(ctx context.Context, id string, bmc BMC) (power.Endpoint, error) {
	if err := validateMachineID(id); err != nil {
		return power.Endpoint{}, invalid(err)
	}

	ep, err := validateBMC(id, bmc)
	if err != nil {
		return power.Endpoint{}, invalid(err)
	}

	if err = validateOwner(bmc.Owner); err != nil {
		return power.Endpoint{}, invalid(err)
	}

	st, unlock, err := s.lock(ctx)
	if err != nil {
		return power.Endpoint{}, err
	}

	defer unlock()

	if bmc.Owner != "" {
		if err = s.holds(ctx, id, bmc.Owner); err != nil {
			return power.Endpoint{}, err
		}
	}

	if _, err := safe.StateModifyWithResult(ctx, st, resources.NewBMCSecret(id), func(sec *resources.BMCSecret) error {
		sec.TypedSpec().Password = bmc.Password

		return nil
	}); err != nil {
		return power.Endpoint{}, fmt.Errorf("error storing the BMC secret of machine %q: %w", id, err)
	}

	if _, err := safe.StateModifyWithResult(ctx, st, resources.NewBMCConfig(id), func(c *resources.BMCConfig) error {
		*c.TypedSpec() = resources.BMCConfigSpec{
			Kind: string(ep.Backend), Address: ep.Address, Port: bmc.Port, Username: ep.Username,
			Insecure: ep.Insecure, SystemID: ep.SystemID, Source: resources.BMCSourceUser, UpdatedAt: s.now(),
			HasPassword: bmc.Password != "",
		}

		return nil
	}); err != nil {
		return power.Endpoint{}, fmt.Errorf("error storing the BMC config of machine %q: %w", id, err)
	}

	// ep.String has no password.
	s.logger.Info("transition", zap.String("transition", "bmc"), zap.String("machine", id), zap.Stringer("bmc", ep))

	ep.Password = ""

	return ep, nil
}

// holds refuses unless machine id is allocated to owner; the caller holds s.mu.
func (s *Service) holds(ctx context.Context, id, owner string) error {
	intent, err := s.current(ctx, id)
	if err != nil {
		return err
	}

	if a := intent.Allocation; a == nil || a.Owner != owner {
		return refused(fmt.Sprintf("machine %q is not allocated to %s: only its holder sets its BMC", id, owner))
	}

	return nil
}

// RemoveBMC forgets a machine's BMC and its password: its power is manual from now on.
func (s *Service) RemoveBMC(ctx context.Context, id string) error {
	if err := validateMachineID(id); err != nil {
		return invalid(err)
	}

	st, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}

	defer unlock()

	for _, ptr := range []resource.Pointer{resources.NewBMCConfig(id).Metadata(), resources.NewBMCSecret(id).Metadata()} {
		if err := st.Destroy(ctx, ptr); err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("error removing the BMC config of machine %q: %w", id, err)
		}
	}

	s.logger.Info("transition", zap.String("transition", "bmc"), zap.String("machine", id), zap.String("kind", "removed"))

	return nil
}

// validateBMC checks a BMC and returns it as an endpoint.
func validateBMC(id string, bmc BMC) (power.Endpoint, error) {
	ep := power.Endpoint{
		Backend: bmc.Backend, Address: strings.TrimSpace(bmc.Address), Port: int(bmc.Port),
		Username: bmc.Username, Password: bmc.Password, Insecure: bmc.Insecure, SystemID: bmc.SystemID,
		MachineUUID: id,
	}

	if bmc.Port > 65535 {
		return ep, fmt.Errorf("port %d is out of range", bmc.Port)
	}

	switch ep.Backend {
	case power.BackendNone:
		return ep, nil
	case power.BackendRedfish, power.BackendIPMI:
		if ep.Address == "" {
			return ep, errors.New("a BMC address is required")
		}

		if ep.Backend == power.BackendRedfish && strings.Contains(ep.Address, "://") {
			// A Redfish service may be given as a URL (http, or a path-less https).
			u, err := url.Parse(ep.Address)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
				return ep, fmt.Errorf("Redfish address %q is not a host, an IP or an http(s)://host URL", ep.Address) //nolint:staticcheck // ST1005: Redfish is a name
			}

			break
		}

		if strings.ContainsAny(ep.Address, "/ ") || (strings.Contains(ep.Address, ":") && net.ParseIP(ep.Address) == nil) {
			return ep, fmt.Errorf("BMC address %q is not a host name or IP (give the port apart)", ep.Address)
		}
	case power.BackendAPI:
		u, err := url.Parse(ep.Address)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return ep, fmt.Errorf("power API address %q is not an http(s) URL", ep.Address)
		}
	default:
		return ep, fmt.Errorf("BMC kind %q is not one of ipmi, redfish, api, none", ep.Backend)
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
	Password string
}

// StoreAgentBMC records the credentials an agent provisioned in-band. A user's
// credentials are never replaced (it reports false then); an address or port the user
// gave is kept, the agent's fill in what is missing.
func (s *Service) StoreAgentBMC(ctx context.Context, id string, bmc AgentBMC) (bool, error) {
	if err := validateMachineID(id); err != nil {
		return false, invalid(err)
	}

	// Under the transitions' lock: a user's credentials must never be half replaced by
	// an agent's.
	st, unlock, err := s.lock(ctx)
	if err != nil {
		return false, err
	}

	defer unlock()

	cur, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, id)
	if err != nil && !state.IsNotFoundError(err) {
		return false, fmt.Errorf("error reading the BMC config of machine %q: %w", id, err)
	}

	if cur != nil && cur.TypedSpec().Username != "" {
		return false, nil
	}

	// The secret first: a config that says it has a password must find it.
	if _, err = safe.StateModifyWithResult(ctx, st, resources.NewBMCSecret(id), func(sec *resources.BMCSecret) error {
		sec.TypedSpec().Password = bmc.Password

		return nil
	}); err != nil {
		return false, fmt.Errorf("error storing the BMC secret of machine %q: %w", id, err)
	}

	if _, err = safe.StateModifyWithResult(ctx, st, resources.NewBMCConfig(id), func(c *resources.BMCConfig) error {
		spec := c.TypedSpec()
		spec.Kind = string(power.BackendIPMI)
		if spec.Address == "" {
			spec.Address = bmc.Address
		}

		if spec.Port == 0 {
			spec.Port = bmc.Port
		}

		spec.Username, spec.HasPassword = bmc.User, bmc.Password != ""
		spec.Source, spec.UpdatedAt = resources.BMCSourceAgent, s.now()

		return nil
	}); err != nil {
		return false, fmt.Errorf("error storing the BMC config of machine %q: %w", id, err)
	}

	return true, nil
}
