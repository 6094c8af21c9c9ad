package pxe

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Lease is an address handed to a MAC address in full DHCP mode.
type Lease struct {
	// MAC is the client's hardware address, lower-case colon form.
	MAC      string
	Address  netip.Addr
	Hostname string
	Expires  time.Time
}

// LeaseStore keeps leases across restarts.
type LeaseStore interface {
	Lookup(ctx context.Context, mac string) (Lease, bool, error)
	List(ctx context.Context) ([]Lease, error)
	// Put must be durable when it returns: the server acknowledges after it.
	Put(ctx context.Context, l Lease) error
	Delete(ctx context.Context, mac string) error
}

// StateLeases is a LeaseStore over the provider's COSI state (resources.DHCPLease resources
// in the persistent namespace, whose writes are committed to BoltDB before they return).
type StateLeases struct {
	st state.State
}

// NewStateLeases returns a LeaseStore over st.
func NewStateLeases(st state.State) *StateLeases {
	return &StateLeases{st: st}
}

func leasePointer(mac string) resource.Pointer {
	return resource.NewMetadata(resources.NamespaceName, resources.DHCPLeaseType, mac, resource.VersionUndefined)
}

func leaseFromResource(r *resources.DHCPLease) (Lease, error) {
	spec := r.TypedSpec()

	addr, err := netip.ParseAddr(spec.Address)
	if err != nil {
		return Lease{}, fmt.Errorf("error parsing address of lease %s: %w", r.Metadata().ID(), err)
	}

	return Lease{MAC: r.Metadata().ID(), Address: addr, Hostname: spec.Hostname, Expires: spec.Expires}, nil
}

// Lookup implements LeaseStore.
func (s *StateLeases) Lookup(ctx context.Context, mac string) (Lease, bool, error) {
	r, err := safe.StateGet[*resources.DHCPLease](ctx, s.st, leasePointer(mac))
	if err != nil {
		if state.IsNotFoundError(err) {
			return Lease{}, false, nil
		}

		return Lease{}, false, fmt.Errorf("error reading lease %s: %w", mac, err)
	}

	l, err := leaseFromResource(r)

	return l, err == nil, err
}

// List implements LeaseStore.
func (s *StateLeases) List(ctx context.Context) ([]Lease, error) {
	list, err := safe.StateListAll[*resources.DHCPLease](ctx, s.st)
	if err != nil {
		return nil, fmt.Errorf("error listing leases: %w", err)
	}

	out := make([]Lease, 0, list.Len())

	for r := range list.All() {
		l, err := leaseFromResource(r)
		if err != nil {
			return nil, err
		}

		out = append(out, l)
	}

	return out, nil
}

// Put implements LeaseStore.
func (s *StateLeases) Put(ctx context.Context, l Lease) error {
	err := safe.StateModify(ctx, s.st, resources.NewDHCPLease(l.MAC), func(r *resources.DHCPLease) error {
		spec := r.TypedSpec()
		spec.MAC = l.MAC
		spec.Address = l.Address.String()
		spec.Hostname = l.Hostname
		spec.Expires = l.Expires.UTC()

		return nil
	})
	if err != nil {
		return fmt.Errorf("error writing lease %s: %w", l.MAC, err)
	}

	return nil
}

// Delete implements LeaseStore. Deleting a missing lease is not an error.
func (s *StateLeases) Delete(ctx context.Context, mac string) error {
	if err := s.st.Destroy(ctx, leasePointer(mac)); err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error deleting lease %s: %w", mac, err)
	}

	return nil
}
