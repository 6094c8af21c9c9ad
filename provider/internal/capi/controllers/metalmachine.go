package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/provider/internal/capi/anvilclient"
	"github.com/anvil-metal/anvil/provider/internal/configpatch"
)

// serverNameIndex indexes MetalMachines by the Server they claimed.
const serverNameIndex = "status.serverName"

// errInvalidSpec: the MetalMachine asks what cannot be done; Anvil was not asked.
var errInvalidSpec = errors.New("the MetalMachine's spec cannot be met")

// Retry periods: errors are conditions and a requeue, never a crash loop.
const (
	// reconcileTimeout bounds one reconcile: a hung Anvil is unreachable, not a stuck
	// worker (each call to Anvil is bounded shorter, so the reconcile can say so).
	reconcileTimeout = 2 * time.Minute
	// patchTimeout bounds writing the reconcile's outcome, apart from the reconcile's own
	// bound, so that an outcome found late is still written.
	patchTimeout      = 30 * time.Second
	noServerRetry     = 30 * time.Second
	managedRetry      = 5 * time.Minute
	refusedRetry      = time.Minute
	provisioningCheck = time.Minute
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=metalmachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=metalmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=servers,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;machines/status,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// MetalMachineReconciler provisions a MetalMachine on a server Anvil hands out: it claims
// a free accepted server through Anvil's control API once the owner Machine has bootstrap
// data, with that data (the Talos machine configuration) as what Anvil's metadata server
// serves it; Anvil wipes, powers and boots it. It reports the machine provisioned once
// Talos reports installed, and releases the server (Anvil wipes it) when deleted.
//
// A claim is exclusive in Anvil (one allocation per machine and one machine per owner,
// checked under Anvil's lock), named by the MetalMachine's namespace and name, and asked
// again by the same owner it is the same claim: managers racing or restarting never hold
// one server twice, nor two servers for one MetalMachine.
type MetalMachineReconciler struct {
	Client client.Client
	Anvil  *anvilclient.Client
	// TalosVersion is the Talos of MetalMachines that name none.
	TalosVersion string
}

// SetupWithManager registers the reconciler and its index.
func (r *MetalMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.MetalMachine{}, serverNameIndex, func(o client.Object) []string {
		if name := o.(*infrav1.MetalMachine).Status.ServerName; name != "" { //nolint:forcetypeassert // the indexer's type
			return []string{name}
		}

		return nil
	}); err != nil {
		return fmt.Errorf("error indexing MetalMachines by server: %w", err)
	}

	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.MetalMachine{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(
			util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("MetalMachine")))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToMetalMachines)).
		Watches(&infrav1.Server{}, handler.EnqueueRequestsFromMapFunc(r.serverToMetalMachines)).
		Named("metalmachine").
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *MetalMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()

	var mm infrav1.MetalMachine
	if err := r.Client.Get(ctx, req.NamespacedName, &mm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	machine, err := util.GetOwnerMachine(ctx, r.Client, mm.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("error reading the owner machine: %w", err)
	}

	var cluster *clusterv1.Cluster

	if machine != nil {
		if cluster, err = util.GetClusterFromMetadata(ctx, r.Client, machine.ObjectMeta); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("error reading the cluster: %w", err)
		}
	}

	base := mm.DeepCopy()

	defer func() {
		gone, err := r.patch(ctx, base, &mm)
		if err != nil {
			res, retErr = ctrl.Result{}, errors.Join(retErr, err)
		}

		if gone && mm.Status.ServerName != "" && mm.Status.ServerName != base.Status.ServerName {
			// Claimed for a MetalMachine deleted meanwhile (a stale cache): give it back.
			r.releaseOrphan(ctx, &mm)
		}
	}()

	// The MetalMachine can come before its owner (a MachineSet creates it from the template,
	// then the Machine) or outlive it: with no Cluster, only its own annotation pauses it.
	paused := annotations.HasPaused(&mm)
	if cluster != nil {
		paused = annotations.IsPaused(cluster, &mm)
	}

	if paused {
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.PausedCondition, true, infrav1.PausedReason, "the cluster or the MetalMachine is paused")

		return ctrl.Result{}, nil
	}

	setCondition(&mm.Status.Conditions, mm.Generation, infrav1.PausedCondition, false, infrav1.NotPausedReason, "")

	if !mm.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, &mm)
	}

	if machine == nil || cluster == nil {
		return ctrl.Result{}, nil // Cluster API sets the owner; the Machine's watch brings us back
	}

	// The finalizer is written before anything is claimed: a MetalMachine deleted while
	// it claims then waits for its release rather than leaving a claim behind.
	if controllerutil.AddFinalizer(&mm, infrav1.MetalMachineFinalizer) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}

	return r.reconcileNormal(ctx, &mm, machine, cluster)
}

func (r *MetalMachineReconciler) reconcileNormal(ctx context.Context, mm *infrav1.MetalMachine, machine *clusterv1.Machine, cluster *clusterv1.Cluster) (ctrl.Result, error) {
	if !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		r.notClaimed(mm, infrav1.WaitingForClusterInfrastructureReason, "the cluster's infrastructure is not provisioned yet")

		return ctrl.Result{}, nil
	}

	if machine.Spec.Bootstrap.DataSecretName == nil {
		r.notClaimed(mm, infrav1.WaitingForBootstrapDataReason, "the Machine has no bootstrap data yet")

		return ctrl.Result{}, nil
	}

	data, err := r.bootstrapData(ctx, mm.Namespace, *machine.Spec.Bootstrap.DataSecretName)
	if err != nil {
		r.notClaimed(mm, infrav1.WaitingForBootstrapDataReason, err.Error())

		return ctrl.Result{RequeueAfter: refusedRetry}, nil
	}

	provisioned := ptr.Deref(mm.Status.Initialization.Provisioned, false)

	if provisioned {
		if Hash(data) != mm.Status.BootstrapDataHash {
			setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerProvisionedCondition, true, infrav1.BootstrapDataOutdatedReason,
				"the bootstrap data changed after Talos was installed with the earlier one: Talos machines are replaced, not reconfigured")
		}

		return r.observe(ctx, mm)
	}

	if mm.Status.ServerName == "" || Hash(data) != mm.Status.BootstrapDataHash {
		if res, done := r.claim(ctx, mm, data); done {
			return res, nil
		}
	}

	if err = r.applyBMC(ctx, mm); err != nil {
		return r.anvilFailed(ctx, mm, err), nil
	}

	return r.observe(ctx, mm)
}

// claim claims a server for mm, or asks again for the one it holds (its bootstrap data
// changed): done says the reconcile ends here, with res.
func (r *MetalMachineReconciler) claim(ctx context.Context, mm *infrav1.MetalMachine, data []byte) (res ctrl.Result, done bool) {
	owner := OwnerOf(mm)

	candidates, held, err := r.candidates(ctx, mm, owner)
	if err != nil {
		return r.anvilFailed(ctx, mm, err), true
	}

	if len(candidates) == 0 {
		reason, msg := infrav1.NoServerAvailableReason, "no free server matches the selector"
		if mm.Spec.ServerRef != nil {
			reason, msg = infrav1.ServerNotFoundReason, fmt.Sprintf("server %q is not an accepted machine in Anvil", mm.Spec.ServerRef.Name)
		}

		r.notClaimed(mm, reason, msg)

		return ctrl.Result{RequeueAfter: noServerRetry}, true
	}

	for _, id := range candidates {
		alloc, err := r.claimOne(ctx, mm, id, held, data)

		var holds *anvilclient.OwnerHoldsError
		if errors.As(err, &holds) && !held {
			// Another manager (or this one, before a restart) claimed a server for this
			// MetalMachine meanwhile: that claim is this one's.
			log.FromContext(ctx).Info("this MetalMachine holds a server already: taking it", "server", holds.Machine)

			id, held = holds.Machine, true
			alloc, err = r.claimOne(ctx, mm, id, held, data)
		}

		switch {
		case errors.Is(err, configpatch.ErrNotMachineConfig):
			// The error names what is wrong, never the data (it carries the cluster's secrets).
			r.notClaimed(mm, infrav1.WaitingForBootstrapDataReason, err.Error())

			return ctrl.Result{RequeueAfter: refusedRetry}, true
		case errors.Is(err, anvilclient.ErrTaken) && !held:
			log.FromContext(ctx).V(1).Info("server taken, trying the next", "server", id, "reason", err.Error())

			continue
		case err != nil:
			return r.anvilFailed(ctx, mm, err), true
		}

		mm.Status.ServerName = id
		mm.Status.AllocationID = alloc
		mm.Status.BootstrapDataHash = Hash(data)
		mm.Spec.ProviderID = ProviderID(id)

		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerClaimedCondition, true, infrav1.ServerClaimedReason,
			fmt.Sprintf("server %s claimed (allocation %s)", id, alloc))

		return ctrl.Result{}, false
	}

	r.notClaimed(mm, infrav1.ServerUnavailableReason, "every matching server was claimed by another owner first")

	return ctrl.Result{RequeueAfter: noServerRetry}, true
}

// claimOne claims server id for mm with data, the provider ID added; held says mm holds
// it already. It returns the allocation ID.
func (r *MetalMachineReconciler) claimOne(ctx context.Context, mm *infrav1.MetalMachine, id string, held bool, data []byte) (string, error) {
	version, err := r.claimTalosVersion(ctx, mm, id, held)
	if err != nil {
		return "", err
	}

	config, err := configpatch.WithProviderID(data, ProviderID(id))
	if err != nil {
		return "", err
	}

	return r.Anvil.Claim(ctx, id, anvilclient.Claim{
		Owner: OwnerOf(mm), TalosVersion: version, Extensions: mm.Spec.Extensions,
		KernelArgs: mm.Spec.KernelArgs, Config: config, InstallDisk: mm.Spec.InstallDisk,
	})
}

// candidates are the servers to try, in order: the one mm holds (in its status, or in
// Anvil under its owner name after a restart lost the status; held says so), else the
// one its serverRef names, else the free ones its selector matches.
func (r *MetalMachineReconciler) candidates(ctx context.Context, mm *infrav1.MetalMachine, owner string) (ids []string, held bool, err error) {
	if mm.Status.ServerName != "" {
		return []string{mm.Status.ServerName}, true, nil
	}

	id, err := r.Anvil.OwnedBy(ctx, owner)
	if err != nil {
		return nil, false, err
	}

	if id != "" {
		return []string{id}, true, nil
	}

	var servers infrav1.ServerList
	if err = r.Client.List(ctx, &servers); err != nil {
		return nil, false, fmt.Errorf("error listing servers: %w", err)
	}

	// A named server is asked for whatever its Server says: Anvil decides, and says why
	// not (taken, cordoned) where a stale Server might not.
	if ref := mm.Spec.ServerRef; ref != nil {
		for _, s := range servers.Items {
			if s.Name == ref.Name {
				return []string{ref.Name}, false, nil
			}
		}

		return nil, false, nil
	}

	sel := labels.Everything()

	if mm.Spec.ServerSelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(mm.Spec.ServerSelector); err != nil {
			return nil, false, errors.Join(errInvalidSpec, fmt.Errorf("serverSelector: %w", err))
		}
	}

	return Candidates(owner, sel, servers.Items), false, nil
}

// observe reads the claimed server back from Anvil: provisioned once Talos reports
// installed for the claim.
func (r *MetalMachineReconciler) observe(ctx context.Context, mm *infrav1.MetalMachine) (ctrl.Result, error) {
	m, err := r.Anvil.Get(ctx, mm.Status.ServerName)
	if err != nil {
		return r.anvilFailed(ctx, mm, err), nil
	}

	if a := m.Allocation(); a == nil || a.Owner != OwnerOf(mm) {
		// Someone released the server (anvilctl deallocate): this machine has lost it,
		// for good, as a cloud machine deleted under its Machine has.
		msg := fmt.Sprintf("server %s is no longer allocated to this MetalMachine in Anvil", mm.Status.ServerName)
		mm.Status.FailureReason = ptr.To(infrav1.ServerReleasedReason)
		mm.Status.FailureMessage = ptr.To(msg)
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerClaimedCondition, false, infrav1.ServerReleasedReason, msg)
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ReadyCondition, false, infrav1.ServerReleasedReason, msg)

		return ctrl.Result{}, nil
	}

	mm.Status.Addresses = addressesOf(m)

	if !m.Installed() {
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerProvisionedCondition, false, infrav1.ProvisioningReason,
			fmt.Sprintf("Anvil is booting Talos %s on server %s", m.Allocation().TalosVersion, mm.Status.ServerName))
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ReadyCondition, false, infrav1.ProvisioningReason, "waiting for Talos to report installed")

		return ctrl.Result{RequeueAfter: provisioningCheck}, nil // the Server's watch brings us back sooner
	}

	mm.Status.Ready = true
	mm.Status.Initialization.Provisioned = ptr.To(true)

	if c := findCondition(mm.Status.Conditions, infrav1.ServerProvisionedCondition); c == nil || c.Reason != infrav1.BootstrapDataOutdatedReason {
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerProvisionedCondition, true, infrav1.ProvisionedReason,
			fmt.Sprintf("Talos is installed on server %s", mm.Status.ServerName))
	}

	setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ReadyCondition, true, infrav1.ProvisionedReason, "")

	return ctrl.Result{}, nil
}

func (r *MetalMachineReconciler) reconcileDelete(ctx context.Context, mm *infrav1.MetalMachine) (ctrl.Result, error) {
	setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ReadyCondition, false, infrav1.DeletingReason, "releasing the server")

	owner := OwnerOf(mm)

	id := mm.Status.ServerName
	if id == "" {
		held, err := r.Anvil.OwnedBy(ctx, owner)
		if err != nil {
			return r.anvilFailed(ctx, mm, err), nil
		}

		id = held
	}

	if id != "" {
		err := r.Anvil.Release(ctx, id, owner)

		switch {
		case err == nil, errors.Is(err, anvilclient.ErrNotFound):
		case errors.Is(err, anvilclient.ErrTaken):
			log.FromContext(ctx).Info("server held by another owner: nothing of ours to release", "server", id, "reason", err.Error())
		default:
			return r.anvilFailed(ctx, mm, err), nil
		}
	}

	controllerutil.RemoveFinalizer(mm, infrav1.MetalMachineFinalizer)

	return ctrl.Result{}, nil
}

// anvilFailed turns a failed call to Anvil into the MetalMachine's condition and a
// retry: Anvil down, Anvil managed by Omni, or a request Anvil refused.
func (r *MetalMachineReconciler) anvilFailed(ctx context.Context, mm *infrav1.MetalMachine, err error) ctrl.Result {
	log := log.FromContext(ctx)

	switch {
	case errors.Is(err, anvilclient.ErrManaged):
		r.notClaimed(mm, infrav1.AnvilManagedReason,
			"the Anvil provider is managed by Omni, which decides which machines are allocated: use Omni's own cluster management, or a standalone Anvil")

		return ctrl.Result{RequeueAfter: managedRetry}
	case errors.Is(err, anvilclient.ErrUnreachable) && ptr.Deref(mm.Status.Initialization.Provisioned, false):
		// Talos runs without Anvil: a provisioned machine stays Ready, or every Machine
		// would be unavailable (and rollouts stall) while Anvil restarts.
		log.Info("Anvil is unreachable; the provisioned machine is left as it is", "reason", err.Error())

		return ctrl.Result{RequeueAfter: unreachableRetry}
	case errors.Is(err, anvilclient.ErrUnreachable):
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ReadyCondition, false, infrav1.AnvilUnreachableReason, err.Error())

		if mm.Status.ServerName == "" {
			setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerClaimedCondition, false, infrav1.AnvilUnreachableReason, err.Error())
		}

		return ctrl.Result{RequeueAfter: unreachableRetry}
	case errors.Is(err, anvilclient.ErrTaken), errors.Is(err, anvilclient.ErrNotFound):
		r.notClaimed(mm, infrav1.ServerUnavailableReason, err.Error())

		return ctrl.Result{RequeueAfter: noServerRetry}
	case errors.Is(err, errInvalidSpec):
		r.notClaimed(mm, infrav1.InvalidSpecReason, err.Error())

		return ctrl.Result{RequeueAfter: refusedRetry}
	default:
		r.notClaimed(mm, infrav1.AnvilRefusedReason, err.Error())

		return ctrl.Result{RequeueAfter: refusedRetry}
	}
}

func (r *MetalMachineReconciler) notClaimed(mm *infrav1.MetalMachine, reason, msg string) {
	if mm.Status.ServerName == "" {
		setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ServerClaimedCondition, false, reason, msg)
	}

	setCondition(&mm.Status.Conditions, mm.Generation, infrav1.ReadyCondition, false, reason, msg)
}

// bootstrapData reads the Machine's bootstrap data: the "value" of its secret.
func (r *MetalMachineReconciler) bootstrapData(ctx context.Context, namespace, name string) ([]byte, error) {
	var s corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("error reading bootstrap data secret %s: %w", name, err)
	}

	data, ok := s.Data["value"]
	if !ok || len(data) == 0 {
		return nil, fmt.Errorf("bootstrap data secret %s has no value", name)
	}

	return data, nil
}

// applyBMC gives Anvil the MetalMachine's BMC override for the server it holds, once
// per change of the override or of its credentials Secret. Only after the claim: Anvil
// takes a claimant's BMC for a machine it holds, never for one it might not get.
func (r *MetalMachineReconciler) applyBMC(ctx context.Context, mm *infrav1.MetalMachine) error {
	b := mm.Spec.BMC
	if b == nil || mm.Status.ServerName == "" {
		return nil
	}

	var s corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: mm.Namespace, Name: b.CredentialsSecretName}, &s); err != nil {
		return errors.Join(errInvalidSpec, fmt.Errorf("error reading BMC credentials secret %s: %w", b.CredentialsSecretName, err))
	}

	// What was given, named without the credentials: a hash of a password could be
	// guessed back.
	applied := Hash(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%t\x00%s\x00%s\x00%s",
		b.Kind, b.Address, b.Port, b.Insecure, s.UID, s.ResourceVersion, mm.Status.ServerName))
	if applied == mm.Status.BMCApplied {
		return nil
	}

	if err := r.Anvil.SetBMC(ctx, mm.Status.ServerName, anvilclient.BMC{
		Kind: b.Kind, Address: b.Address, Port: uint32(max(b.Port, 0)),
		Username: string(s.Data["username"]), Password: string(s.Data["password"]), Insecure: b.Insecure,
		Owner: OwnerOf(mm),
	}); err != nil {
		return err
	}

	mm.Status.BMCApplied = applied

	return nil
}

// claimTalosVersion is the Talos to claim server id with: the MetalMachine's, else, for
// a server it holds already, the one it was claimed with (the manager's default may have
// changed since, and Anvil keeps a claim's Talos), else the manager's default.
func (r *MetalMachineReconciler) claimTalosVersion(ctx context.Context, mm *infrav1.MetalMachine, id string, held bool) (string, error) {
	if mm.Spec.TalosVersion != "" {
		return mm.Spec.TalosVersion, nil
	}

	if held {
		m, err := r.Anvil.Get(ctx, id)
		if err != nil {
			return "", err
		}

		if a := m.Allocation(); a != nil && a.Owner == OwnerOf(mm) {
			return a.TalosVersion, nil
		}
	}

	return r.TalosVersion, nil
}

// patch writes what the reconcile changed: metadata and spec (finalizer, providerID),
// then the status; gone says the MetalMachine is no more. It has a bound of its own: the
// reconcile's may be spent on a hung Anvil, and its outcome must still be written.
func (r *MetalMachineReconciler) patch(ctx context.Context, base, mm *infrav1.MetalMachine) (gone bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patchTimeout)
	defer cancel()

	status := mm.Status.DeepCopy()

	if err = r.Client.Patch(ctx, mm, client.MergeFrom(base)); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}

		return false, fmt.Errorf("error patching MetalMachine %s: %w", mm.Name, err)
	}

	// The status' patch is against what was read, at the version the first patch left:
	// a merge patch that names no resourceVersion, so another writer never conflicts.
	statusBase := mm.DeepCopy()
	statusBase.Status = base.Status
	mm.Status = *status

	if err = r.Client.Status().Patch(ctx, mm, client.MergeFrom(statusBase)); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}

		return false, fmt.Errorf("error patching the status of MetalMachine %s: %w", mm.Name, err)
	}

	return false, nil
}

// releaseOrphan releases the claim just made for a MetalMachine that is gone.
func (r *MetalMachineReconciler) releaseOrphan(ctx context.Context, mm *infrav1.MetalMachine) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patchTimeout)
	defer cancel()

	if err := r.Anvil.Release(ctx, mm.Status.ServerName, OwnerOf(mm)); err != nil {
		log.FromContext(ctx).Error(err, "error releasing the claim of a deleted MetalMachine", "server", mm.Status.ServerName)

		return
	}

	log.FromContext(ctx).Info("released the claim of a MetalMachine deleted while it claimed", "server", mm.Status.ServerName)
}

func (r *MetalMachineReconciler) clusterToMetalMachines(ctx context.Context, o client.Object) []reconcile.Request {
	var list infrav1.MetalMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "error listing the cluster's MetalMachines")

		return nil
	}

	return requests(list.Items)
}

func (r *MetalMachineReconciler) serverToMetalMachines(ctx context.Context, o client.Object) []reconcile.Request {
	var list infrav1.MetalMachineList
	if err := r.Client.List(ctx, &list, client.MatchingFields{serverNameIndex: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "error listing the server's MetalMachines")

		return nil
	}

	return requests(list.Items)
}

func requests(items []infrav1.MetalMachine) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(items))
	for _, mm := range items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: mm.Namespace, Name: mm.Name}})
	}

	return out
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}

	return nil
}
