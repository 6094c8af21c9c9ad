//go:build lab

package manager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/internal/testprovider"
	"github.com/anvil-metal/anvil/provider/internal/capi/controllers"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/controlclient"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

const (
	talosVersion = "v1.13.0"
	namespace    = "default"
	clusterName  = "rack"
	// wait bounds every step: the provider's power, the simulated wipes and the
	// managers' reconciles take seconds; a shared, loaded host takes more.
	wait = 90 * time.Second
	tick = 250 * time.Millisecond
	// bmcPassword must appear in no log.
	bmcPassword = "s3cr3t-bmc-password"
)

func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

func controllerConfig() config.Controller { return config.Controller{SkipNameValidation: ptr.To(true)} }

// lab is the scenarios' world: a real provider with simulated machines, a real API
// server, and the managers under test.
type lab struct {
	t     *testing.T
	p     *testprovider.Provider
	fleet *testprovider.Fleet
	k     client.Client
	st    state.State
	tr    controlv1.TransitionServiceClient
}

// TestLabClusterAPI drives the manager through its scenarios on one provider, one fleet of
// four simulated machines and one API server: Servers exported; claims by reference and by
// selector; two MetalMachines under two managers racing for one server; a bootstrap data
// change; a manager restart that lost its status mid-provision; Anvil unreachable; a
// deletion that wipes the server and frees it again.
func TestLabClusterAPI(t *testing.T) {
	cfg, k := startAPIServer(t)

	p := testprovider.NewWith(t, testprovider.Options{AgentAssets: true},
		"--disable-dhcp-proxy", "--disable-tftp", "--image-cache-size", "0", "--kexec", "never",
		"--min-reboot-interval", "1s", "--power-poll-interval", "2s", "--power-timeout", "2s",
	)
	p.Start()

	fleet := testprovider.StartFleet(t, p.HTTPURL, 4, 17, "-kexec=false", "-wipe-fast", "1s", "-boot-retry", "500ms", "-reboot-delay", "300ms")

	socket := filepath.Join(p.StateDir, "control.sock")
	conn, err := controlclient.Dial(controlclient.Options{Endpoint: "unix://" + socket})
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	l := &lab{t: t, p: p, fleet: fleet, k: k, st: controlclient.State(conn), tr: controlclient.Transitions(conn)}
	m0, m1, m2, m3 := fleet.UUIDs[0], fleet.UUIDs[1], fleet.UUIDs[2], fleet.UUIDs[3]

	for _, id := range fleet.UUIDs {
		l.waitAnvil(id, "registered", func(intent *resources.MachineIntentSpec, _ *resources.MachineStatusSpec) bool { return true }, true)
		p.MustAnvilctl("machine", "bmc", "set", id, "--kind", "api", "--address", fleet.PowerURL)
		p.MustAnvilctl("machine", "accept", id)
	}

	mgrA := startManager(t, cfg, socket)
	mgrB := startManager(t, cfg, socket)

	// Servers: every accepted machine, once wiped, is an Available Server with its
	// hardware and Anvil's labels.
	for _, id := range fleet.UUIDs {
		s := l.waitServer(id, "available", func(s *infrav1.Server) bool { return s.Status.State == infrav1.ServerAvailable })
		assert.NotEmpty(t, s.Status.Hardware.Disks, "server %s has its disks", id)
		assert.NotZero(t, s.Status.Hardware.MemoryMiB, "server %s has its memory", id)
		assert.Contains(t, strings.Join(keys(s.Labels), ","), "anvil.dev/", "server %s has Anvil's derived labels", id)
	}

	l.createCluster()

	t.Run("claim by reference, with a BMC override", func(t *testing.T) {
		// The same power API under another name: Anvil must take the MetalMachine's.
		bmcURL := strings.Replace(fleet.PowerURL, "127.0.0.1", "localhost", 1)
		require.NoError(t, k.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bmc-by-ref", Namespace: namespace},
			Data:       map[string][]byte{"username": []byte("admin"), "password": []byte(bmcPassword)},
		}))

		mm := l.createMachine("by-ref", "boot-by-ref", configWith("by-ref"), func(s *infrav1.MetalMachineSpec) {
			s.ServerRef = &infrav1.ServerReference{Name: m0}
			s.BMC = &infrav1.BMC{Kind: "api", Address: bmcURL, CredentialsSecretName: "bmc-by-ref"}
		})
		mm = l.waitMetalMachine(mm.Name, "claimed", func(mm *infrav1.MetalMachine) bool { return mm.Status.ServerName != "" })
		require.Equal(t, m0, mm.Status.ServerName)
		assert.Equal(t, "anvil://"+m0, mm.Spec.ProviderID)

		alloc := l.allocation(m0)
		require.NotNil(t, alloc)
		assert.Equal(t, controllers.OwnerOf(mm), alloc.Owner)
		assert.Equal(t, mm.Status.AllocationID, alloc.ID)
		assert.Contains(t, alloc.Config, "by-ref", "Anvil serves the bootstrap data")
		assert.Contains(t, alloc.Config, "anvil://"+m0, "with the kubelet's provider ID")

		assert.Contains(t, p.MustAnvilctl("get", "machines", "-o", "wide"), controllers.OwnerOf(mm), "anvilctl names the owner")

		bmc, err := safe.StateGetByID[*resources.BMCConfig](t.Context(), l.st, m0)
		require.NoError(t, err)
		assert.Equal(t, bmcURL, bmc.TypedSpec().Address, "the MetalMachine's BMC details given to Anvil")
		assert.Equal(t, "admin", bmc.TypedSpec().Username)
		assert.True(t, bmc.TypedSpec().HasPassword)

		l.waitServer(m0, "allocated to it", func(s *infrav1.Server) bool {
			return s.Status.Allocation != nil && s.Status.Allocation.Owner == controllers.OwnerOf(mm)
		})

		// Talos' event sink says installed; MarkInstalled says the same.
		_, err = l.tr.MarkInstalled(t.Context(), &controlv1.MarkInstalledRequest{MachineId: m0})
		require.NoError(t, err)

		mm = l.waitMetalMachine(mm.Name, "provisioned", func(mm *infrav1.MetalMachine) bool {
			return ptr.Deref(mm.Status.Initialization.Provisioned, false)
		})
		assert.True(t, mm.Status.Ready)
		assert.NotEmpty(t, mm.Status.Addresses)
		assert.True(t, apimeta.IsStatusConditionTrue(mm.Status.Conditions, infrav1.ReadyCondition))
		assert.NotContains(t, p.Log(), bmcPassword, "the BMC password is never logged by the provider")
		assert.NotContains(t, managerLogged(), bmcPassword, "nor by the managers")
		assert.NotEmpty(t, managerLogged())
	})

	t.Run("a MetalMachine before its Machine waits", func(t *testing.T) {
		// As a MachineSet makes them: the MetalMachine from the template first.
		mm := &infrav1.MetalMachine{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: namespace}}
		require.NoError(t, k.Create(t.Context(), mm))

		mm = l.waitMetalMachine(mm.Name, "seen, and left alone", func(mm *infrav1.MetalMachine) bool {
			return isFalse(mm, infrav1.PausedCondition, infrav1.NotPausedReason)
		})
		assert.Empty(t, mm.Status.ServerName)
		assert.Empty(t, mm.Finalizers, "nothing held, nothing to release")

		require.NoError(t, k.Delete(t.Context(), mm))
		l.waitGone(mm.Name)
	})

	t.Run("claim by selector", func(t *testing.T) {
		p.MustAnvilctl("machine", "label", m1, "rack=r7")
		l.waitServer(m1, "labelled", func(s *infrav1.Server) bool { return s.Labels["rack"] == "r7" })

		mm := l.createMachine("by-selector", "boot-by-selector", configWith("by-selector"), func(s *infrav1.MetalMachineSpec) {
			s.ServerSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r7"}}
		})
		mm = l.waitMetalMachine(mm.Name, "claimed", func(mm *infrav1.MetalMachine) bool { return mm.Status.ServerName != "" })
		assert.Equal(t, m1, mm.Status.ServerName)
	})

	t.Run("two MetalMachines race for one server", func(t *testing.T) {
		a := l.createMachine("race-a", "boot-race-a", configWith("race-a"), func(s *infrav1.MetalMachineSpec) { s.ServerRef = &infrav1.ServerReference{Name: m2} })
		b := l.createMachine("race-b", "boot-race-b", configWith("race-b"), func(s *infrav1.MetalMachineSpec) { s.ServerRef = &infrav1.ServerReference{Name: m2} })

		var winner, loser *infrav1.MetalMachine

		if !assert.Eventually(t, func() bool {
			a, b = l.metalMachine(a.Name), l.metalMachine(b.Name)

			switch {
			case a.Status.ServerName != "" && isFalse(b, infrav1.ServerClaimedCondition, infrav1.ServerUnavailableReason):
				winner, loser = a, b
			case b.Status.ServerName != "" && isFalse(a, infrav1.ServerClaimedCondition, infrav1.ServerUnavailableReason):
				winner, loser = b, a
			}

			return winner != nil
		}, wait, tick, "one MetalMachine claims %s, the other is told it is taken", m2) {
			t.Fatalf("race-a: %+v\nrace-b: %+v", a.Status, b.Status)
		}

		assert.Equal(t, controllers.OwnerOf(winner), l.allocation(m2).Owner)
		assert.Empty(t, loser.Status.ServerName)
		assert.Equal(t, 1, l.held(controllers.OwnerOf(winner)), "one server held by the winner")
		assert.Zero(t, l.held(controllers.OwnerOf(loser)), "none by the loser")

		require.NoError(t, k.Delete(t.Context(), loser)) // it would take m3 otherwise
		l.waitGone(loser.Name)
	})

	t.Run("bootstrap data change", func(t *testing.T) {
		before := l.allocation(m1)
		l.setBootstrap("by-selector", "boot-by-selector-2", configWith("by-selector-second"))

		l.waitAnvil(m1, "the new bootstrap data", func(intent *resources.MachineIntentSpec, _ *resources.MachineStatusSpec) bool {
			return intent.Allocation != nil && strings.Contains(intent.Allocation.Config, "by-selector-second")
		}, false)
		assert.Equal(t, before.ID, l.allocation(m1).ID, "the same claim, with the new data")

		l.waitMetalMachine("by-selector", "the new data's hash recorded", func(mm *infrav1.MetalMachine) bool {
			return mm.Status.BootstrapDataHash == controllers.Hash([]byte(configWith("by-selector-second")))
		})
	})

	t.Run("manager restart that lost the status mid-provision", func(t *testing.T) {
		// m3 matches the selector too: a manager that did not find its claim would take it.
		p.MustAnvilctl("machine", "label", m3, "rack=r7")
		l.waitServer(m3, "labelled", func(s *infrav1.Server) bool { return s.Labels["rack"] == "r7" })

		mgrA.halt()
		mgrB.halt()

		// The claim was made, its record in the status lost (the manager died between the two).
		mm := l.metalMachine("by-selector")
		lost := mm.DeepCopy()
		lost.Status.ServerName, lost.Status.AllocationID = "", ""
		require.NoError(t, k.Status().Patch(t.Context(), lost, client.MergeFrom(mm)))

		mgrA = startManager(l.t, cfg, socket) // the whole test's, not this step's

		mm = l.waitMetalMachine("by-selector", "its claim found again", func(mm *infrav1.MetalMachine) bool { return mm.Status.ServerName != "" })
		assert.Equal(t, m1, mm.Status.ServerName)
		assert.Equal(t, l.allocation(m1).ID, mm.Status.AllocationID)
		assert.Equal(t, 1, l.held(controllers.OwnerOf(mm)), "one server held, not two")
		assert.Nil(t, l.allocation(m3), "the free server the selector matches stays free")
	})

	t.Run("clusterctl move: the MetalMachine made again under a new UID keeps its claim", func(t *testing.T) {
		// What clusterctl move does between management clusters: pause, make each object
		// again on the target (spec, status; a new UID), drop the source's finalizer and
		// delete it, unpause.
		old := l.metalMachine("by-selector")
		alloc := l.allocation(m1)

		paused := old.DeepCopy()
		paused.Annotations = map[string]string{clusterv1.PausedAnnotation: "true"}
		require.NoError(t, k.Patch(t.Context(), paused, client.MergeFrom(old)))
		l.waitMetalMachine(old.Name, "paused", func(mm *infrav1.MetalMachine) bool {
			c := apimeta.FindStatusCondition(mm.Status.Conditions, infrav1.PausedCondition)

			return c != nil && c.Status == metav1.ConditionTrue
		})

		old = l.metalMachine(old.Name)
		released := old.DeepCopy()
		released.Finalizers = nil
		require.NoError(t, k.Patch(t.Context(), released, client.MergeFrom(old)))
		require.NoError(t, k.Delete(t.Context(), released))
		l.waitGone(old.Name)

		moved := &infrav1.MetalMachine{ObjectMeta: metav1.ObjectMeta{
			Name: old.Name, Namespace: old.Namespace, Labels: old.Labels, Annotations: old.Annotations,
			OwnerReferences: old.OwnerReferences, Finalizers: old.Finalizers,
		}, Spec: old.Spec}
		require.NoError(t, k.Create(t.Context(), moved))
		require.NotEqual(t, old.UID, moved.UID)

		created := moved.DeepCopy()
		moved.Status = old.Status
		require.NoError(t, k.Status().Patch(t.Context(), moved, client.MergeFrom(created)))

		unpaused := moved.DeepCopy()
		unpaused.Annotations = nil
		require.NoError(t, k.Patch(t.Context(), unpaused, client.MergeFrom(moved)))

		mm := l.waitMetalMachine(old.Name, "unpaused, its claim its own", func(mm *infrav1.MetalMachine) bool {
			c := apimeta.FindStatusCondition(mm.Status.Conditions, infrav1.PausedCondition)

			return c != nil && c.Status == metav1.ConditionFalse
		})
		assert.Nil(t, mm.Status.FailureReason, "not taken for released")
		assert.Equal(t, m1, mm.Status.ServerName)
		assert.Equal(t, alloc.ID, l.allocation(m1).ID, "the same claim")
		assert.Equal(t, 1, l.held(controllers.OwnerOf(mm)))
		assert.False(t, isFalse(mm, infrav1.ServerClaimedCondition, infrav1.ServerReleasedReason))
	})

	t.Run("Anvil unreachable", func(t *testing.T) {
		p.Kill()

		mm := l.createMachine("while-down", "boot-while-down", configWith("while-down"), func(s *infrav1.MetalMachineSpec) {
			s.ServerRef = &infrav1.ServerReference{Name: m3}
		})
		l.waitMetalMachine(mm.Name, "told Anvil is unreachable", func(mm *infrav1.MetalMachine) bool {
			return isFalse(mm, infrav1.ReadyCondition, infrav1.AnvilUnreachableReason)
		})

		p.Start()

		mm = l.waitMetalMachine(mm.Name, "claimed once Anvil is back", func(mm *infrav1.MetalMachine) bool { return mm.Status.ServerName != "" })
		assert.Equal(t, m3, mm.Status.ServerName)
	})

	t.Run("deletion releases and wipes the server", func(t *testing.T) {
		mm := l.metalMachine("by-ref")
		wiped := l.wipedID(m0)

		require.NoError(t, k.Delete(t.Context(), mm))
		l.waitGone(mm.Name)

		assert.Nil(t, l.allocation(m0), "released in Anvil")
		l.waitAnvil(m0, "wiped again", func(_ *resources.MachineIntentSpec, st *resources.MachineStatusSpec) bool {
			return st != nil && st.WipedID != wiped
		}, false)
		l.waitServer(m0, "available again", func(s *infrav1.Server) bool {
			return s.Status.State == infrav1.ServerAvailable && s.Status.Allocation == nil
		})
	})
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}

	return out
}

// configWith is a Talos machine configuration carrying marker, to be recognised.
func configWith(marker string) string {
	return fmt.Sprintf("version: v1alpha1\nmachine:\n  type: worker\n  nodeLabels:\n    marker: %s\n", marker)
}

func isFalse(mm *infrav1.MetalMachine, typ, reason string) bool {
	c := apimeta.FindStatusCondition(mm.Status.Conditions, typ)

	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
}

// createCluster makes the Cluster and its MetalCluster, and plays the core controllers'
// part: the Cluster's infrastructure is provisioned once the MetalCluster says so.
func (l *lab) createCluster() {
	t, ctx := l.t, l.t.Context()

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: namespace},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "MetalCluster", Name: clusterName,
		}},
	}
	require.NoError(t, l.k.Create(ctx, cluster))

	mc := &infrav1.MetalCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: clusterName, Namespace: namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: clusterName, UID: cluster.UID}},
		},
		Spec: infrav1.MetalClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: "10.5.0.10", Port: 6443}},
	}
	require.NoError(t, l.k.Create(ctx, mc))

	require.Eventually(t, func() bool {
		require.NoError(t, l.k.Get(ctx, client.ObjectKeyFromObject(mc), mc))

		return ptr.Deref(mc.Status.Initialization.Provisioned, false) && mc.Status.Ready
	}, wait, tick, "the MetalCluster is provisioned")

	before := cluster.DeepCopy()
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	require.NoError(t, l.k.Status().Patch(ctx, cluster, client.MergeFrom(before)))
}

// createMachine makes a Machine with bootstrap data and its MetalMachine, as a
// MachineDeployment would.
func (l *lab) createMachine(name, secret, data string, spec func(*infrav1.MetalMachineSpec)) *infrav1.MetalMachine {
	t, ctx := l.t, l.t.Context()

	require.NoError(t, l.k.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: namespace},
		Data:       map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")},
	}))

	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(secret)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "MetalMachine", Name: name,
			},
		},
	}
	require.NoError(t, l.k.Create(ctx, machine))

	mm := &infrav1.MetalMachine{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: machine.UID, Controller: ptr.To(true),
		}},
	}}
	spec(&mm.Spec)
	require.NoError(t, l.k.Create(ctx, mm))

	return mm
}

// setBootstrap points the Machine at new bootstrap data, as its bootstrap provider would.
func (l *lab) setBootstrap(name, secret, data string) {
	t, ctx := l.t, l.t.Context()

	require.NoError(t, l.k.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: namespace},
		Data:       map[string][]byte{"value": []byte(data)},
	}))

	var machine clusterv1.Machine
	require.NoError(t, l.k.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &machine))

	before := machine.DeepCopy()
	machine.Spec.Bootstrap.DataSecretName = ptr.To(secret)
	require.NoError(t, l.k.Patch(ctx, &machine, client.MergeFrom(before)))
}

func (l *lab) metalMachine(name string) *infrav1.MetalMachine {
	var mm infrav1.MetalMachine
	require.NoError(l.t, l.k.Get(l.t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, &mm))

	return &mm
}

func (l *lab) waitMetalMachine(name, what string, ok func(*infrav1.MetalMachine) bool) *infrav1.MetalMachine {
	l.t.Helper()

	var mm *infrav1.MetalMachine

	if !assert.Eventually(l.t, func() bool {
		mm = l.metalMachine(name)

		return ok(mm)
	}, wait, tick, "MetalMachine %s: %s", name, what) {
		l.t.Fatalf("MetalMachine %s as it stands: spec %+v, status %+v", name, mm.Spec, mm.Status)
	}

	return mm
}

func (l *lab) waitGone(name string) {
	l.t.Helper()

	require.Eventually(l.t, func() bool {
		var mm infrav1.MetalMachine

		return client.IgnoreNotFound(l.k.Get(l.t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, &mm)) == nil &&
			mm.Name == ""
	}, wait, tick, "MetalMachine %s is deleted", name)
}

func (l *lab) waitServer(name, what string, ok func(*infrav1.Server) bool) *infrav1.Server {
	l.t.Helper()

	var s infrav1.Server

	require.Eventually(l.t, func() bool {
		return l.k.Get(l.t.Context(), client.ObjectKey{Name: name}, &s) == nil && ok(&s)
	}, wait, tick, "server %s: %s", name, what)

	return &s
}

// waitAnvil waits until Anvil's intent and status of machine id satisfy ok (absent ones
// nil); anyResource waits only for the machine to exist.
func (l *lab) waitAnvil(id, what string, ok func(*resources.MachineIntentSpec, *resources.MachineStatusSpec) bool, anyResource bool) {
	l.t.Helper()

	require.Eventually(l.t, func() bool {
		ctx := l.t.Context()

		if anyResource {
			_, err := safe.StateGetByID[*resources.Machine](ctx, l.st, id)

			return err == nil
		}

		intent, err := safe.StateGetByID[*resources.MachineIntent](ctx, l.st, id)
		if err != nil {
			return false
		}

		var st *resources.MachineStatusSpec
		if status, err := safe.StateGetByID[*resources.MachineStatus](ctx, l.st, id); err == nil {
			st = status.TypedSpec()
		}

		return ok(intent.TypedSpec(), st)
	}, wait, tick, "machine %s in Anvil: %s", id, what)
}

func (l *lab) allocation(id string) *resources.Allocation {
	intent, err := safe.StateGetByID[*resources.MachineIntent](l.t.Context(), l.st, id)
	require.NoError(l.t, err)

	return intent.TypedSpec().Allocation
}

func (l *lab) wipedID(id string) string {
	status, err := safe.StateGetByID[*resources.MachineStatus](l.t.Context(), l.st, id)
	require.NoError(l.t, err)

	return status.TypedSpec().WipedID
}

// held counts the machines Anvil has allocated to owner.
func (l *lab) held(owner string) int {
	list, err := safe.StateListAll[*resources.MachineIntent](l.t.Context(), l.st)
	require.NoError(l.t, err)

	n := 0

	for intent := range list.All() {
		if a := intent.TypedSpec().Allocation; a != nil && a.Owner == owner {
			n++
		}
	}

	return n
}

// TestLabClusterAPIOmniMode: against a provider managed by Omni (its transitions with
// ManagedBy set, served by its control server), the manager exports the servers but
// claims nothing, and says why on the MetalMachine.
func TestLabClusterAPIOmniMode(t *testing.T) {
	cfg, k := startAPIServer(t)

	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)

	st, err := resources.Open(ctx, t.TempDir())
	require.NoError(t, err)

	const id = "6b9a2f1e-4c3d-4e5f-8a7b-9c0d1e2f3a4b"

	m := resources.NewMachine(id)
	m.TypedSpec().UUID = id
	require.NoError(t, st.Create(ctx, m))

	svc := transitions.New(st, transitions.Options{ManagedBy: "omni"})
	_, err = svc.Owner().Accept(ctx, id, true) // as Omni's acceptance is applied
	require.NoError(t, err)

	socket := filepath.Join(t.TempDir(), "control.sock")
	served := make(chan error, 1)

	go func() { served <- control.New(st, svc, control.Options{SocketPath: socket}).Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
		require.NoError(t, st.Close())
	})

	require.Eventually(t, func() bool {
		_, err := os.Stat(socket)

		return err == nil
	}, wait, tick, "the control socket")

	conn, err := controlclient.Dial(controlclient.Options{Endpoint: "unix://" + socket})
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	l := &lab{t: t, k: k, st: controlclient.State(conn), tr: controlclient.Transitions(conn)}

	startManager(t, cfg, socket)
	l.waitServer(id, "exported", func(s *infrav1.Server) bool { return s.Status.State == infrav1.ServerAvailable })
	l.createCluster()

	mm := l.createMachine("in-omni-mode", "boot-in-omni-mode", configWith("omni"), func(*infrav1.MetalMachineSpec) {})
	mm = l.waitMetalMachine(mm.Name, "told Omni decides", func(mm *infrav1.MetalMachine) bool {
		return isFalse(mm, infrav1.ServerClaimedCondition, infrav1.AnvilManagedReason)
	})

	assert.Empty(t, mm.Status.ServerName)
	assert.Empty(t, mm.Spec.ProviderID)
	assert.Nil(t, l.allocation(id), "nothing claimed")
	assert.Contains(t, apimeta.FindStatusCondition(mm.Status.Conditions, infrav1.ServerClaimedCondition).Message, "Omni")
}
