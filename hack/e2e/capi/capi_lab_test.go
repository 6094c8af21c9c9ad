//go:build lab

// Package capi is Anvil's Cluster API provider end to end on a lab VM: Cluster API's
// core manager and the Talos bootstrap provider (CABPT), built from their Go modules and
// run as processes against envtest's API server, with Anvil's capi-manager on the lab
// provider's control socket. A MachineDeployment of one replica ends with the VM booted
// into real Talos (make talos) from the factory, which loads CABPT's worker config from
// Anvil's metadata server, validates it, installs itself and runs from its disk on it;
// scaled to zero, the server is released and wiped back to Available.
package capi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	configpatcher "github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

const (
	// stepDeadline bounds each step of the agent and the managers: under TCG power-on to
	// the agent is ~30–60 s, and the host's two cores are shared.
	stepDeadline = 6 * time.Minute
	// startDeadline bounds the managers' start (caches, webhooks, CRD migration).
	startDeadline = 2 * time.Minute
	namespace     = "default"
	clusterName   = "lab"
	installDisk   = "/dev/vda"
)

// TestE2EClusterAPI: see the package comment. Timings are logged as "step: …".
func TestE2EClusterAPI(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	// envtest logs through controller-runtime's logger; the managers log to their buffers.
	log.SetLogger(logr.Discard())

	root := labtest.RepoRoot(t)
	start := time.Now()
	step := func(what string, since time.Time) {
		t.Logf("step: %-58s %6.1fs (t=%.1fs)", what, time.Since(since).Seconds(), time.Since(start).Seconds())
	}

	// 1. The binaries: the lab's, ours, the two upstream managers from their modules, and
	// real Talos.
	capiBin := capiCore.build(t, root)
	cabptBin := cabpt.build(t, root)
	talos := labtest.TalosAssets(t, root)
	talosVersion := talos.Version

	bin := t.TempDir()
	b := labtest.BuildBinaries(t, root, bin)
	// ANVIL_CAPI_MANAGER runs a capi-manager built elsewhere (a change under test).
	manager := os.Getenv("ANVIL_CAPI_MANAGER")
	if manager == "" {
		manager = filepath.Join(bin, "capi-manager")
		labtest.GoBuild(t, root, manager, "./provider/cmd/capi-manager")
	}
	step("binaries built", start)

	// 2. The lab, one BIOS machine of 2 GiB (real Talos' need) behind an IPMI BMC
	// (ipmi_sim), the factory serving real Talos: it boots the agent while the API
	// server and the managers start. The site's Talos kernel arguments name the serial
	// console, where the test reads Talos.
	dir, prefix := labtest.NewLab(t, "anvc", nil)

	cfg := b.Config(dir, prefix)
	cfg.Machines = 1
	cfg.Firmware = []machine.Firmware{machine.BIOS}
	cfg.BMC = []lab.PowerOwner{lab.OwnerIPMI}
	cfg.MemoryMB = 2048
	// One vCPU: real Talos' kernel under TCG with two sometimes hangs at boot.
	cfg.CPUs = 1
	cfg.TalosAssetsDir = talos.Dir
	// The factory's real Talos has no extension images: TCG's CPU would call for amd-ucode.
	cfg.ProviderArgs = []string{"--talos-kernel-args", labtest.TalosKernelArgs, "--detected-extensions=false"}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	poweredOn := time.Now()
	m := state.MachineList()[0]
	id := m.UUID
	ctl := labtest.Anvilctl(b.Anvilctl, state.ControlSocket())

	t0 := time.Now()
	work := t.TempDir()
	capiDir := moduleDir(t, root, capiCore.dir, "sigs.k8s.io/cluster-api")
	cabptDir := moduleDir(t, root, cabpt.dir, "github.com/siderolabs/cluster-api-bootstrap-provider-talos")
	api := startAPIServer(t, root, capiDir, cabptDir, work)

	certDir := api.webhooks.LocalServingCertDir
	procs := []*process{
		startProcess(t, "cluster-api", api.kubeconfig, capiBin,
			"--leader-elect=false", "--diagnostics-address=0", "--insecure-diagnostics", "--health-addr=0",
			"--webhook-port="+strconv.Itoa(api.webhooks.LocalServingPort), "--webhook-cert-dir="+certDir,
			"--feature-gates=MachinePool=false,ClusterTopology=false"),
		startProcess(t, "cabpt", api.kubeconfig, cabptBin,
			"--diagnostics-address=0", "--insecure-diagnostics", "--health-addr=0",
			"--webhook-port="+strconv.Itoa(freePort(t)), "--webhook-cert-dir="+certDir),
		startProcess(t, "capi-manager", api.kubeconfig, manager,
			"--anvil-endpoint", "unix://"+state.ControlSocket(),
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--talos-version", talosVersion),
	}
	alive := func() error {
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return err
			}
		}

		return nil
	}

	k := kubeClient(t, api)

	// The core manager serves the conversion webhook: a v1beta1 read of a Cluster CRD
	// goes through it.
	labtest.Eventually(t, startDeadline, "Cluster API's conversion webhook answers", func() error {
		if err := alive(); err != nil {
			return err
		}

		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion("cluster.x-k8s.io/v1beta1")
		l.SetKind("ClusterList")

		return k.List(t.Context(), l)
	})
	step("envtest and the three managers up", t0)
	require.NoError(t, alive())

	// 3. Registered, accepted, wiped: an Available Server.
	labtest.Eventually(t, stepDeadline, "the machine registers", func() error {
		out, err := ctl("get", "machine", id, "-o", "yaml")
		if err != nil || !strings.Contains(out, "name: vda") {
			return fmt.Errorf("%v: %s", err, out)
		}

		return nil
	})
	step("power-on → agent registered", poweredOn)

	t0 = time.Now()
	out, err := ctl("machine", "accept", id)
	require.NoError(t, err, out)

	server := &infrav1.Server{}
	require.True(t, waitFor(t, stepDeadline, "server "+id+" Available", alive, func() error {
		if err := k.Get(t.Context(), client.ObjectKey{Name: id}, server); err != nil {
			return err
		}

		if server.Status.State != infrav1.ServerAvailable {
			return fmt.Errorf("state %q", server.Status.State)
		}

		return nil
	}))
	step("accept → wiped, Server Available", t0)

	firstWipe := lastWipe(t, ctl, id)
	require.NotEmpty(t, firstWipe, "Available after a wipe of vda reported")

	// 4. The cluster and a MachineDeployment of one.
	t0 = time.Now()
	createCluster(t, k, state.AdvertiseAddr())

	// CABPT's worker config for the Talos version (its machinery is v1.12's: without
	// talosVersion it writes v1.12's config, with v1.12's installer), patched as a site
	// would for the lab: the install disk, the factory's installer of the schematic the
	// allocation boots (as Omni names it), the factory's registry over plain HTTP, and
	// time sync off (the lab has no NTP).
	schematic := talos.Schematic(t)
	tct := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha3", "kind": "TalosConfigTemplate",
		"metadata": map[string]any{"name": "workers", "namespace": namespace},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"generateType": "worker", "talosVersion": talosVersion,
			"strategicPatches": []any{
				fmt.Sprintf("machine:\n  install:\n    disk: %s\n    image: %s\n", installDisk, talos.InstallImage(schematic)),
				labtest.RegistryMirror,
				labtest.TimeDisabled,
			},
		}}},
	}}
	require.NoError(t, k.Create(t.Context(), tct))

	require.NoError(t, k.Create(t.Context(), &infrav1.MetalMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: namespace},
		Spec: infrav1.MetalMachineTemplateSpec{Template: infrav1.MetalMachineTemplateResource{
			Spec: infrav1.MetalMachineSpec{TalosVersion: talosVersion},
		}},
	}))

	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: namespace},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: clusterName,
			Replicas:    ptr.To[int32](1),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"pool": "workers"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"pool": "workers"}},
				Spec: clusterv1.MachineSpec{
					ClusterName: clusterName,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "TalosConfigTemplate", Name: "workers",
					}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1.GroupVersion.Group, Kind: "MetalMachineTemplate", Name: "workers",
					},
				},
			},
		},
	}
	require.NoError(t, k.Create(t.Context(), md))

	// 5. A Machine, CABPT's bootstrap secret, the MetalMachine's claim of the server.
	var cm clusterv1.Machine

	require.True(t, waitFor(t, stepDeadline, "a Machine with CABPT's bootstrap data", alive, func() error {
		var l clusterv1.MachineList
		if err := k.List(t.Context(), &l, client.InNamespace(namespace)); err != nil {
			return err
		}

		if len(l.Items) != 1 {
			return fmt.Errorf("%d machines", len(l.Items))
		}

		cm = l.Items[0]
		if cm.Spec.Bootstrap.DataSecretName == nil {
			return errors.New("no bootstrap data secret yet")
		}

		return nil
	}))
	step("MachineDeployment → Machine with bootstrap data", t0)

	var secret corev1.Secret
	require.NoError(t, k.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: *cm.Spec.Bootstrap.DataSecretName}, &secret))

	bootstrap := secret.Data["value"]
	require.NotEmpty(t, bootstrap, "CABPT's bootstrap data")
	assert.Contains(t, string(bootstrap), "type: worker", "CABPT's worker config")

	mm := &infrav1.MetalMachine{}
	require.True(t, waitFor(t, stepDeadline, "the MetalMachine claims the server", alive, func() error {
		if err := k.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: cm.Spec.InfrastructureRef.Name}, mm); err != nil {
			return err
		}

		if mm.Status.ServerName == "" {
			return errors.New("no server yet")
		}

		return nil
	}))
	require.Equal(t, id, mm.Status.ServerName, "the lab VM's server")
	assert.Equal(t, "anvil://"+id, mm.Spec.ProviderID)
	step("MachineDeployment → server claimed", t0)

	// Anvil's config is CABPT's with the kubelet's provider ID.
	served := allocationConfig(t, ctl, id)
	assertWithProviderID(t, bootstrap, []byte(served), "anvil://"+id)
	assert.Contains(t, served, `provider-id: anvil://`+id)
	assert.Contains(t, served, "type: worker")

	out, err = ctl("get", "intent", id, "-o", "yaml")
	require.NoError(t, err, out)
	assert.Contains(t, out, schematic, "the allocation boots the schematic whose installer CABPT's config names")

	// 6. The VM boots real Talos, which loads the config Anvil serves from the metadata
	// server and validates it: a field Talos v1.13 refuses ends the test here.
	require.True(t, waitTalos(t, m, alive, labtest.TalosFromMetal), "real Talos took CABPT's config from the metadata server")
	step("MachineDeployment → real Talos loaded CABPT's config", t0)

	serial, _ := os.ReadFile(m.SerialLog())
	assert.Contains(t, string(serial), labtest.TalosKernel, "the factory's Talos booted")

	// 7. Installed by its own installer, reported to Anvil; provisioned.
	require.True(t, waitTalos(t, m, alive, fmt.Sprintf(labtest.TalosInstalledFmt, talosVersion)), "real Talos installed itself")
	step("MachineDeployment → real Talos installed", t0)

	require.True(t, waitFor(t, stepDeadline, "the MetalMachine provisioned", alive, func() error {
		if err := k.Get(t.Context(), client.ObjectKeyFromObject(mm), mm); err != nil {
			return err
		}

		if !ptr.Deref(mm.Status.Initialization.Provisioned, false) {
			return errors.New("not provisioned")
		}

		return nil
	}))

	require.True(t, waitFor(t, stepDeadline, "the Machine's infrastructure provisioned", alive, func() error {
		if err := k.Get(t.Context(), client.ObjectKeyFromObject(&cm), &cm); err != nil {
			return err
		}

		if !ptr.Deref(cm.Status.Initialization.InfrastructureProvisioned, false) || cm.Spec.ProviderID != "anvil://"+id {
			return fmt.Errorf("infrastructureProvisioned %v, providerID %q", cm.Status.Initialization.InfrastructureProvisioned, cm.Spec.ProviderID)
		}

		return nil
	}))
	step("MachineDeployment → Machine infrastructure provisioned", t0)

	if err := k.Get(t.Context(), client.ObjectKey{Name: id}, server); assert.NoError(t, err) {
		assert.Equal(t, infrav1.ServerInstalled, server.Status.State)
	}

	// Talos kexecs into the installed system, which runs on the config it installed with.
	assert.True(t, waitTalos(t, m, alive, labtest.TalosFromState), "real Talos running from its disk on CABPT's config")
	step("MachineDeployment → real Talos running on its installed config", t0)

	// 8. Scaled to zero: the Machine goes, the server is released and wiped.
	t0 = time.Now()

	require.NoError(t, k.Get(t.Context(), client.ObjectKeyFromObject(md), md))
	before := md.DeepCopy()
	md.Spec.Replicas = ptr.To[int32](0)
	require.NoError(t, k.Patch(t.Context(), md, client.MergeFrom(before)))

	assert.True(t, waitFor(t, stepDeadline, "the Machine and MetalMachine deleted", alive, func() error {
		for _, o := range []client.Object{&clusterv1.Machine{}, &infrav1.MetalMachine{}} {
			key := client.ObjectKey{Namespace: namespace, Name: cm.Name}
			if _, ok := o.(*infrav1.MetalMachine); ok {
				key.Name = mm.Name
			}

			if err := k.Get(t.Context(), key, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (%v)", o, key.Name, err)
			}
		}

		return nil
	}))
	step("scale to 0 → Machine deleted", t0)

	assert.True(t, waitFor(t, stepDeadline, "the server released and wiped back to Available", alive, func() error {
		if err := k.Get(t.Context(), client.ObjectKey{Name: id}, server); err != nil {
			return err
		}

		if server.Status.State != infrav1.ServerAvailable || server.Status.Allocation != nil {
			return fmt.Errorf("state %q, allocation %+v", server.Status.State, server.Status.Allocation)
		}

		return nil
	}))
	step("scale to 0 → server wiped, Available", t0)

	out, err = ctl("get", "intent", id, "-o", "yaml")
	assert.NoError(t, err, out)
	assert.NotContains(t, out, "allocation:", "released in Anvil")

	again := lastWipe(t, ctl, id)
	assert.NotEmpty(t, again)
	assert.NotEqual(t, firstWipe, again, "a second wipe after the release")

	// Every reconcile ended as a reconcile: none panicked (controller-runtime recovers
	// them, so nothing else would notice).
	for _, p := range procs {
		assert.NotContains(t, p.out.String(), "Observed a panic", "%s panicked in a reconcile (its output is printed below)", p.name)
	}
}

var lastWipeRe = regexp.MustCompile(`(?s)lastWipe:.*?device: vda.*?verified:[^\n]*`)

// lastWipe is the last wipe of vda the machine reported ("" when none): its block of
// anvilctl's machine YAML, which changes with each wipe.
func lastWipe(t testing.TB, ctl func(...string) (string, error), id string) string {
	t.Helper()

	out, err := ctl("get", "machine", id, "-o", "yaml")
	require.NoError(t, err, out)

	return lastWipeRe.FindString(out)
}

// waitTalos waits for the Talos line on the machine's console; a configuration Talos
// could not load or refused to validate fails the wait at once.
func waitTalos(t testing.TB, m *machine.Machine, alive func() error, line string) bool {
	t.Helper()

	var refused string

	ok := waitFor(t, labtest.TalosDeadline, fmt.Sprintf("%q on %s's console", line, m.Name), alive, func() error {
		if refused = labtest.RefusedConfig(m.SerialLog()); refused != "" {
			return nil
		}

		if labtest.CountIn(m.SerialLog(), line) == 0 {
			return errors.New("not yet")
		}

		return nil
	})

	if refused != "" {
		t.Errorf("real Talos refused the config Anvil served (CABPT's): %s", refused)

		return false
	}

	return ok
}

// waitFor is labtest.Eventually that gives up early when a manager has exited.
func waitFor(t testing.TB, deadline time.Duration, what string, alive, f func() error) bool {
	t.Helper()

	return labtest.Eventually(t, deadline, what, func() error {
		if err := alive(); err != nil {
			return err
		}

		return f()
	})
}

// kubeClient is a client with Kubernetes', Cluster API's and our types.
func kubeClient(t testing.TB, api *apiServer) client.Client {
	t.Helper()

	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, clusterv1.AddToScheme(scheme))
	require.NoError(t, infrav1.AddToScheme(scheme))

	k, err := client.New(api.cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	return k
}

// createCluster makes the Cluster and its MetalCluster; Cluster API's core manager marks
// the infrastructure provisioned from the MetalCluster, which CABPT waits for.
func createCluster(t testing.TB, k client.Client, endpoint string) {
	t.Helper()

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: namespace},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "MetalCluster", Name: clusterName,
		}},
	}
	require.NoError(t, k.Create(t.Context(), cluster))

	require.NoError(t, k.Create(t.Context(), &infrav1.MetalCluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: namespace},
		Spec:       infrav1.MetalClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: endpoint, Port: 6443}},
	}))

	labtest.Eventually(t, stepDeadline, "the Cluster's infrastructure provisioned", func() error {
		if err := k.Get(t.Context(), client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}

		if !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
			return errors.New("not yet")
		}

		return nil
	})
}

// allocationConfig is the config Anvil serves machine id: its intent's allocation.config
// (anvilctl shows it only when asked, as it holds secrets; never logged).
func allocationConfig(t testing.TB, ctl func(...string) (string, error), id string) string {
	t.Helper()

	out, err := ctl("get", "intent", id, "-o", "yaml", "--show-config")
	require.NoError(t, err, "anvilctl get intent")

	var doc map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(out), &doc), "the intent's YAML")

	c, ok := findConfig(doc)
	require.True(t, ok, "no allocation.config in the intent")

	return c
}

func findConfig(v any) (string, bool) {
	switch v := v.(type) {
	case map[string]any:
		if a, ok := v["allocation"].(map[string]any); ok {
			if c, ok := a["config"].(string); ok {
				return c, true
			}
		}

		for _, e := range v {
			if c, ok := findConfig(e); ok {
				return c, true
			}
		}
	case []any:
		for _, e := range v {
			if c, ok := findConfig(e); ok {
				return c, true
			}
		}
	}

	return "", false
}

// assertWithProviderID checks that served is data with the kubelet's provider-id and
// nothing else changed: Talos' own strategic merge of that provider-id into data, and
// served, read back and written out by Talos' config loader, are the same.
func assertWithProviderID(t testing.TB, data, served []byte, providerID string) {
	t.Helper()

	patch, err := configpatcher.LoadPatch(fmt.Appendf(nil, "machine:\n  kubelet:\n    extraArgs:\n      provider-id: %q\n", providerID))
	require.NoError(t, err)

	merged, err := configpatcher.Apply(configpatcher.WithBytes(data), []configpatcher.Patch{patch})
	require.NoError(t, err, "CABPT's data is a Talos machine configuration")

	mergedCfg, err := merged.Config()
	require.NoError(t, err)

	want, err := mergedCfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)

	servedCfg, err := configloader.NewFromBytes(served)
	require.NoError(t, err, "what Anvil serves loads as a Talos config")

	got, err := servedCfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)
	assert.Equal(t, sha(want), sha(got), "Anvil serves CABPT's config plus the provider ID, nothing else changed")
}

func sha(b []byte) string {
	s := sha256.Sum256(b)

	return hex.EncodeToString(s[:])
}
