package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/provider/internal/capi/anvilclient"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=servers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=servers/status,verbs=get;update;patch

// ServerReconciler mirrors Anvil's accepted machines as Server objects: it is their only
// writer, and puts back what anyone else changes. A machine Anvil no longer has accepted
// loses its Server.
type ServerReconciler struct {
	Client client.Client
	Anvil  *anvilclient.Client
	// Changes carries the machines Anvil changed (ServerWatch feeds it).
	Changes <-chan event.GenericEvent
}

// SetupWithManager registers the reconciler.
func (r *ServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.Server{}).
		WatchesRawSource(source.Channel(r.Changes, &handler.EnqueueRequestForObject{})).
		Named("server").
		Complete(r)
}

// Reconcile makes the Server named req.Name what Anvil has of that machine.
func (r *ServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()

	m, err := r.Anvil.Get(ctx, req.Name)

	switch {
	case errors.Is(err, anvilclient.ErrNotFound) || (err == nil && !m.Accepted()):
		return ctrl.Result{}, r.remove(ctx, req.Name)
	case errors.Is(err, anvilclient.ErrUnreachable):
		return ctrl.Result{RequeueAfter: unreachableRetry}, nil // the watch sends it again once Anvil answers
	case err != nil:
		return ctrl.Result{}, err
	}

	want := ServerFor(m)

	var cur infrav1.Server

	err = r.Client.Get(ctx, client.ObjectKey{Name: req.Name}, &cur)

	switch {
	case apierrors.IsNotFound(err):
		created := &infrav1.Server{ObjectMeta: metav1.ObjectMeta{Name: req.Name, Labels: want.Labels}}
		if err = r.Client.Create(ctx, created); err != nil {
			return ctrl.Result{}, fmt.Errorf("error creating server %s: %w", req.Name, err)
		}

		created.Status = want.Status

		return ctrl.Result{}, r.Client.Status().Update(ctx, created)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("error reading server %s: %w", req.Name, err)
	}

	// Patches without a resourceVersion: what Anvil says wins over whatever the Server
	// held, so there is nothing to conflict over (a second manager writes the same).
	if !maps.Equal(cur.Labels, want.Labels) {
		base := cur.DeepCopy()

		cur.Labels = want.Labels
		if err = r.Client.Patch(ctx, &cur, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("error updating the labels of server %s: %w", req.Name, err)
		}
	}

	if !equality.Semantic.DeepEqual(cur.Status, want.Status) {
		base := cur.DeepCopy()

		cur.Status = want.Status
		if err = r.Client.Status().Patch(ctx, &cur, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("error updating the status of server %s: %w", req.Name, err)
		}
	}

	return ctrl.Result{}, nil
}

func (r *ServerReconciler) remove(ctx context.Context, name string) error {
	err := r.Client.Delete(ctx, &infrav1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("error deleting server %s: %w", name, err)
	}

	return nil
}

// ServerFor is the Server of an accepted machine: its labels are the machine's
// effective labels, its status what Anvil has of it.
func ServerFor(m anvilclient.Machine) infrav1.Server {
	s := infrav1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: string(m.ID), Labels: maps.Clone(m.Labels)},
		Status: infrav1.ServerStatus{
			UUID:  string(m.ID),
			State: serverState(m),
			Power: m.Power,
			BMC:   m.BMC,
		},
	}

	if len(s.Labels) == 0 {
		s.Labels = nil
	}

	if m.Intent != nil {
		s.Status.Cordoned = m.Intent.Cordoned
	}

	if a := m.Allocation(); a != nil {
		s.Status.Allocation = &infrav1.ServerAllocation{
			ID: a.ID, Owner: a.Owner, TalosVersion: a.TalosVersion, Installed: m.Installed(),
		}

		if !a.AllocatedAt.IsZero() {
			at := metav1.NewTime(a.AllocatedAt)
			s.Status.Allocation.AllocatedAt = &at
		}
	}

	if m.Machine.Machine != nil {
		s.Status.Hardware.Architecture = m.Machine.Machine.Arch
	}

	if inv := m.Inventory; inv != nil {
		s.Status.Hardware = hardwareOf(*inv, s.Status.Hardware.Architecture)
	}

	s.Status.Addresses = addressesOf(m)

	return s
}

// serverState maps Anvil's lifecycle phase onto the Server's states (only accepted
// machines have a Server). The provider's policy is not known here: BMC provisioning
// owed does not show as Preparing, only a wipe owed does.
func serverState(m anvilclient.Machine) infrav1.ServerState {
	switch m.Phase(lifecycle.Policy{}) {
	case lifecycle.PhaseInstalled:
		return infrav1.ServerInstalled
	case lifecycle.PhaseAllocated:
		return infrav1.ServerAllocated
	case lifecycle.PhasePreparing:
		return infrav1.ServerPreparing
	case lifecycle.PhaseReady:
		return infrav1.ServerAvailable
	case lifecycle.PhaseUnknown, lifecycle.PhasePending, lifecycle.PhaseRejected:
	}

	return ""
}

func hardwareOf(inv resources.MachineInventorySpec, arch string) infrav1.ServerHardware {
	hw := infrav1.ServerHardware{
		Manufacturer: inv.System.Manufacturer,
		Product:      inv.System.Product,
		SerialNumber: inv.System.Serial,
		Architecture: arch,
		Sockets:      int32(min(len(inv.CPUs), 1<<16)),
		MemoryMiB:    int64(min(inv.MemoryMiB, 1<<40)),
	}

	for _, cpu := range inv.CPUs {
		hw.Cores += int32(min(cpu.Cores, 1<<16))
		hw.Threads += int32(min(cpu.Threads, 1<<16))
		hw.CPUModel = cmp.Or(hw.CPUModel, cpu.Model)
	}

	for _, d := range inv.Disks {
		if d.CDROM || len(hw.Disks) == 256 {
			continue
		}

		hw.Disks = append(hw.Disks, infrav1.ServerDisk{
			Name: d.Name, SizeBytes: int64(min(d.Size, 1<<62)), Model: d.Model, Serial: d.Serial,
			Transport: d.Transport, Rotational: d.Rotational,
		})
	}

	for _, n := range inv.NICs {
		if len(hw.NICs) == 64 {
			break
		}

		hw.NICs = append(hw.NICs, infrav1.ServerNIC{Name: n.Name, MAC: n.MAC, Driver: n.Driver})
	}

	return hw
}

// addressesOf are the machine's addresses: where it last booted from, and its hostname.
func addressesOf(m anvilclient.Machine) []infrav1.MachineAddress {
	var out []infrav1.MachineAddress

	for _, a := range m.Addresses() {
		out = append(out, infrav1.MachineAddress{Type: infrav1.MachineInternalIP, Address: a})
	}

	if m.Inventory != nil && m.Inventory.Hostname != "" {
		out = append(out, infrav1.MachineAddress{Type: infrav1.MachineHostName, Address: m.Inventory.Hostname})
	}

	slices.SortStableFunc(out, func(a, b infrav1.MachineAddress) int { return strings.Compare(string(a.Type), string(b.Type)) })

	return out
}
