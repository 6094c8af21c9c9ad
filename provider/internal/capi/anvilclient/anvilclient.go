// Package anvilclient is Anvil's control API as the Cluster API manager uses it: machines
// read from the COSI state API (with the lifecycle rules' view of each), their changes
// watched, and claims made and released through the transition service, each refusal
// sorted into what the manager does about it.
package anvilclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Errors the manager tells apart. Each wraps the provider's own message.
var (
	// ErrManaged: the provider is managed by Omni, which decides allocations.
	ErrManaged = errors.New("the Anvil provider is managed by Omni, which decides allocations")
	// ErrUnreachable: the control API did not answer.
	ErrUnreachable = errors.New("the Anvil control API is unreachable")
	// ErrTaken: the machine is not free (allocated to another, cordoned, not accepted).
	ErrTaken = errors.New("the machine is not free")
	// ErrNotFound: Anvil does not know the machine.
	ErrNotFound = errors.New("the machine is not known to Anvil")
	// ErrInvalid: Anvil refused the request as malformed.
	ErrInvalid = errors.New("anvil refused the request")
)

// callTimeout bounds each call to the control API (a watch excepted): a hung provider is
// unreachable, and the reconcile still has time to say so.
const callTimeout = 20 * time.Second

// OwnerHoldsError is a claim refused because its owner holds another machine already:
// the claimant takes that one (another manager, or itself before a restart, claimed it).
type OwnerHoldsError struct {
	// Machine is the machine the owner holds.
	Machine string

	err error
}

func (e *OwnerHoldsError) Error() string { return e.err.Error() }

func (e *OwnerHoldsError) Unwrap() error { return e.err }

// Machine is one machine as the manager sees it.
type Machine struct {
	lifecycle.Machine

	// Labels are its effective labels (static, inventory-derived, the user's).
	Labels map[string]string
	// Inventory is what its agent reported; nil until it did.
	Inventory *resources.MachineInventorySpec
	// Power is the power its BMC last reported (on, off, unknown), "" when not read.
	Power string
	// BMC is how Anvil reaches its BMC (backend and endpoint), "" when it does not.
	BMC string
}

// Accepted says whether the machine is accepted: only accepted machines are exported.
func (m Machine) Accepted() bool { return m.Machine.Accepted() }

// Addresses are the addresses Anvil saw the machine boot from.
func (m Machine) Addresses() []string {
	if m.Machine.Machine == nil || m.Machine.Machine.LastAddress == "" {
		return nil
	}

	return []string{m.Machine.Machine.LastAddress}
}

// Client reads and changes machines through the control API.
type Client struct {
	st state.State
	tr controlv1.TransitionServiceClient
}

// New returns a client over the state and transition services.
func New(st state.State, tr controlv1.TransitionServiceClient) *Client {
	return &Client{st: st, tr: tr}
}

// Get reads one machine; ErrNotFound when Anvil has no intent for it (it never booted
// or was forgotten).
func (c *Client) Get(ctx context.Context, id string) (Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	m, err := lifecycle.Read(ctx, c.st, id)
	if err != nil {
		return Machine{}, classify(fmt.Errorf("error reading machine %q: %w", id, err))
	}

	if m.Intent == nil && m.Machine == nil {
		return Machine{}, fmt.Errorf("machine %q: %w", id, ErrNotFound)
	}

	out := Machine{Machine: m}

	labels, err := safe.StateGetByID[*resources.MachineLabels](ctx, c.st, id)

	switch {
	case err == nil:
		out.Labels = labels.TypedSpec().Effective()
	case !state.IsNotFoundError(err):
		return Machine{}, classify(fmt.Errorf("error reading the labels of machine %q: %w", id, err))
	}

	inv, err := safe.StateGetByID[*resources.MachineInventory](ctx, c.st, id)

	switch {
	case err == nil:
		out.Inventory = inv.TypedSpec()
	case !state.IsNotFoundError(err):
		return Machine{}, classify(fmt.Errorf("error reading the inventory of machine %q: %w", id, err))
	}

	power, err := safe.StateGetByID[*resources.PowerStatus](ctx, c.st, id)

	switch {
	case err == nil:
		out.Power = string(power.TypedSpec().State)
		out.BMC = power.TypedSpec().Backend

		if ep := power.TypedSpec().Endpoint; ep != "" {
			out.BMC += " " + ep
		}
	case !state.IsNotFoundError(err):
		return Machine{}, classify(fmt.Errorf("error reading the power of machine %q: %w", id, err))
	}

	return out, nil
}

// watched are the resources a Server is made of: a change to any is a change to it.
var watched = []resource.Type{
	resources.MachineType, resources.MachineIntentType, resources.MachineStatusType,
	resources.MachineLabelsType, resources.MachineInventoryType, resources.PowerStatusType,
}

// Watch sends the ID of every machine whose resources change, and of every machine
// there is when it starts (the watches' bootstrap), until ctx ends or a watch fails:
// the caller watches again, which sends everything again.
func (c *Client) Watch(ctx context.Context, changed chan<- string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	events := make(chan state.Event)

	for _, typ := range watched {
		md := resource.NewMetadata(resources.NamespaceName, typ, "", resource.VersionUndefined)
		if err := c.st.WatchKind(ctx, md, events, state.WithBootstrapContents(true)); err != nil {
			return classify(fmt.Errorf("error watching %s: %w", typ, err))
		}
	}

	for {
		var ev state.Event

		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		}

		switch ev.Type {
		case state.Errored:
			return classify(fmt.Errorf("error watching machines: %w", ev.Error))
		case state.Bootstrapped, state.Noop:
			continue
		case state.Created, state.Updated, state.Destroyed:
		}

		select {
		case changed <- ev.Resource.Metadata().ID():
		case <-ctx.Done():
			return nil
		}
	}
}

// Claim is what an owner asks of a machine it claims.
type Claim struct {
	// Owner names the claimant; the same owner claiming again gets the same allocation.
	Owner        string
	TalosVersion string
	Extensions   []string
	KernelArgs   []string
	// Config is the Talos machine configuration Anvil's metadata server serves it.
	Config []byte
	// InstallDisk selects the install disk among the machine's disks (a disk selector).
	InstallDisk string
}

// Claim allocates the machine to the claim's owner; it returns the allocation ID.
// ErrTaken when someone else holds it (or it cannot be handed out), ErrManaged when
// Omni decides.
func (c *Client) Claim(ctx context.Context, id string, cl Claim) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	resp, err := c.tr.Allocate(ctx, &controlv1.AllocateRequest{
		MachineId: id, Owner: cl.Owner, TalosVersion: cl.TalosVersion, Extensions: cl.Extensions,
		KernelArgs: cl.KernelArgs, Config: cl.Config, InstallDisk: cl.InstallDisk,
	})
	if err != nil {
		return "", classify(fmt.Errorf("error claiming machine %q: %w", id, err))
	}

	return resp.GetIntent().GetAllocation().GetId(), nil
}

// Release takes back the owner's claim: Anvil wipes the machine and hands it out again.
// A machine not allocated is released already; one Anvil does not know is gone.
func (c *Client) Release(ctx context.Context, id, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	_, err := c.tr.Deallocate(ctx, &controlv1.DeallocateRequest{MachineId: id, Owner: owner})
	if err != nil {
		return classify(fmt.Errorf("error releasing machine %q: %w", id, err))
	}

	return nil
}

// BMC is how Anvil should reach a machine's BMC.
type BMC struct {
	Kind, Address      string
	Port               uint32
	Username, Password string
	Insecure           bool
	// Owner is the claimant: Anvil refuses unless the machine is allocated to it.
	Owner string
}

// SetBMC gives Anvil the BMC details of a machine the BMC's owner holds (the password is
// stored encrypted).
func (c *Client) SetBMC(ctx context.Context, id string, bmc BMC) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	_, err := c.tr.SetBMC(ctx, &controlv1.SetBMCRequest{
		MachineId: id, Kind: bmc.Kind, Address: bmc.Address, Port: bmc.Port,
		Username: bmc.Username, Password: bmc.Password, Insecure: bmc.Insecure, Owner: bmc.Owner,
	})
	if err != nil {
		// The provider never quotes a password; redacted all the same, as it goes to logs.
		st := status.Convert(err)

		msg := st.Message()
		if bmc.Password != "" {
			msg = strings.ReplaceAll(msg, bmc.Password, "<redacted>")
		}

		return classify(fmt.Errorf("error setting the BMC of machine %q: %w", id, status.Error(st.Code(), msg)))
	}

	return nil
}

// classify wraps err with the sentinel the manager acts on.
func classify(err error) error {
	if _, managed := controlv1.ErrorInfo(err, controlv1.ReasonManaged); managed {
		return errors.Join(ErrManaged, err)
	}

	if meta, holds := controlv1.ErrorInfo(err, controlv1.ReasonOwnerHolds); holds && meta["machine"] != "" {
		return &OwnerHoldsError{Machine: meta["machine"], err: err}
	}

	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return errors.Join(ErrUnreachable, err)
	case codes.FailedPrecondition:
		return errors.Join(ErrTaken, err)
	case codes.NotFound:
		return errors.Join(ErrNotFound, err)
	case codes.InvalidArgument:
		return errors.Join(ErrInvalid, err)
	}

	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return errors.Join(ErrUnreachable, err)
	}

	return err
}

// RetryAfter is how long the watch waits before watching again after a failure.
const RetryAfter = 2 * time.Second

// OwnedBy returns the machine allocated to owner, "" when none is: what a claimant that
// lost track of its claim (a restart before it recorded it) finds it by.
func (c *Client) OwnedBy(ctx context.Context, owner string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	id, err := resources.MachineHeldBy(ctx, c.st, owner)
	if err != nil {
		return "", classify(err)
	}

	return id, nil
}
