package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=metalclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=metalclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status,verbs=get;list;watch

// MetalClusterReconciler reports a MetalCluster provisioned: on bare metal the cluster's
// infrastructure is the machines and the control-plane endpoint the user gives, so there
// is nothing to create.
type MetalClusterReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *MetalClusterReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.MetalCluster{}).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(
			util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("MetalCluster"), mgr.GetClient(), &infrav1.MetalCluster{}))).
		Named("metalcluster").
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *MetalClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var mc infrav1.MetalCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &mc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	cluster, err := util.GetOwnerCluster(ctx, r.Client, mc.ObjectMeta)

	switch {
	case apierrors.IsNotFound(err) || (err == nil && cluster == nil):
		return ctrl.Result{}, nil // Cluster API sets the owner; the Cluster's watch brings us back
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("error reading the owner cluster: %w", err)
	}

	base := mc.DeepCopy()

	if annotations.IsPaused(cluster, &mc) {
		setCondition(&mc.Status.Conditions, mc.Generation, infrav1.PausedCondition, true, infrav1.PausedReason, "the cluster or the MetalCluster is paused")

		return ctrl.Result{}, r.patchStatus(ctx, base, &mc)
	}

	setCondition(&mc.Status.Conditions, mc.Generation, infrav1.PausedCondition, false, infrav1.NotPausedReason, "")

	if !mc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // nothing of ours to take down
	}

	mc.Status.Ready = true
	mc.Status.Initialization.Provisioned = ptr.To(true)

	msg := "the control plane answers at " + mc.Spec.ControlPlaneEndpoint.Host
	if mc.Spec.ControlPlaneEndpoint.IsZero() {
		msg = "no control-plane endpoint given: the control plane provider sets the Cluster's"
	}

	setCondition(&mc.Status.Conditions, mc.Generation, infrav1.ReadyCondition, true, infrav1.ProvisionedReason, msg)

	return ctrl.Result{}, r.patchStatus(ctx, base, &mc)
}

func (r *MetalClusterReconciler) patchStatus(ctx context.Context, base, mc *infrav1.MetalCluster) error {
	if err := r.Client.Status().Patch(ctx, mc, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("error patching the status of MetalCluster %s: %w", mc.Name, err)
	}

	return nil
}

// setCondition sets one condition; its transition time moves only when its status does.
func setCondition(conds *[]metav1.Condition, generation int64, typ string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}

	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
}
