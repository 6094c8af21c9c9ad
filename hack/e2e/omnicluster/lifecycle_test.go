//go:build lab

// Package omnicluster is a cluster's whole life with a real Omni deciding and Anvil
// doing the work (TestOmniLifecycleE2E), and a standalone provider switched to Omni mode
// under an installed machine (TestOmniAdoption). It is a package of its own so that it
// runs beside hack/e2e and hack/e2e/omni rather than after them.
package omnicluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
	"github.com/anvil-metal/anvil/internal/earlyconfig"
	"github.com/anvil-metal/anvil/internal/ipmisim"
	"github.com/anvil-metal/anvil/internal/netns"
)

const (
	// stepDeadline is generous: under TCG power-on to the agent is ~30–60 s, and the
	// host's two cores are shared with another lab's machines.
	stepDeadline = 5 * time.Minute
	// pendingFor is how long the test watches pending machines be left alone.
	pendingFor = 20 * time.Second
	// onceFor is how long a request carried out is watched for a second time.
	onceFor = 20 * time.Second
	// clusterName is the lab cluster's.
	clusterName = "lab"
)

// Lines real Talos (make talos) prints on the serial console that the test counts:
// machined's own, and its installer's.
const (
	// talosReset is machined carrying out a reset of its system disk (Omni's, over
	// Talos' API with the cluster's client certificate).
	talosReset = "task resetSystemDiskSpec (1/1): starting"
	// x509UnknownAuthority is what Talos prints retrying its configuration's download
	// from a server whose certificate no CA it trusts signed.
	x509UnknownAuthority = "x509: certificate signed by unknown authority"
)

// TestOmniLifecycleE2E is a cluster's whole life with Omni deciding and Anvil doing it,
// on real Talos (make talos: Talos v1.13 built from its Go module) and a real Omni, on a
// lab of its own: a BIOS machine with a simulated IPMI BMC (the control plane), a BIOS
// machine with the lab's power API, whose BMC Omni gives (the worker), and a third one
// Omni rejects.
//
//  1. The provider is registered; the machines PXE-boot the agent and appear pending,
//     and nothing touches them (no BMC session, disks byte-identical).
//  2. The admin gives the worker's BMC (InfraMachineBMCConfig) and accepts both: the
//     agent provisions the IPMI machine's BMC credentials in-band, both are wiped,
//     reported ready to use with their power and labels, and powered off as Omni
//     prefers. The third is rejected.
//  3. A cluster of a control plane and a worker (omnictl cluster template sync): Anvil
//     powers them on into real Talos from its boot-asset cache (the factory's initramfs
//     of make talos with the cluster's schematic appended), which fetches Omni's join
//     configuration from Anvil over HTTPS it verifies with the CA talos.config.early
//     gives it (the worker's Talos first meets an impostor with another CA's certificate
//     for the provider's address, refuses it and sends it nothing), joins SideroLink with
//     Omni's join arguments; Omni sees the schematic, applies the cluster's config;
//     Talos pulls the installer image from the factory's registry and installs itself;
//     machined's boot sequence counts the install in Omni, and Anvil reports it. The
//     provider is SIGKILLed mid-way. Real talosctl reads each node through Omni, whose
//     calls reach Talos' API with the cluster's client certificate.
//  4. Omni's reboot of the control plane: Anvil power-cycles it through its BMC and
//     sends it to its disk, where GRUB boots Talos with the configuration on its STATE
//     partition. Omni's power-off request is carried out once and acknowledged; once
//     withdrawn, Anvil powers the machine on into its disk's Talos again.
//  5. The cluster deleted: Omni resets both over Talos' API (mutual TLS); they come back
//     in maintenance from their disks; Omni names a wipe; Anvil PXE-cycles them into
//     the agent, wipes them, reports the wiped node unique tokens, and they are ready to
//     use again. The provider is SIGKILLed mid-way.
//  6. The rejected machine was never powered, wiped or configured.
//
// Kubernetes does not come up (the lab has no container images, and Talos' containerd
// here is built without its CRI plugin): the assertions stop at "installed, running from
// disk, configuration accepted". Figures in _out/e2e/omni-lifecycle-report.txt.
func TestOmniLifecycleE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	omniBin, omnictlBin := labtest.OmniBinaries(t, root)
	talosctl := labtest.Talosctl(t, root)
	talos := labtest.TalosAssets(t, root)

	bin := t.TempDir()
	bins := labtest.BuildPrograms(t, root, bin)
	provider, factory, power, anvilctl, agent := bins.Provider, bins.Factory, bins.Power, bins.Anvilctl, bins.Agent

	dir, prefix := labtest.NewLab(t, "anvl", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 3,
		Firmware: []machine.Firmware{machine.BIOS, machine.BIOS, machine.UEFIPXE},
		BMC:      []lab.PowerOwner{lab.OwnerIPMI, lab.OwnerAPI, lab.OwnerIPMI},
		// The worker's BMC comes from Omni, as an admin gives it.
		UnregisteredBMC: []lab.PowerOwner{lab.OwnerAPI},
		// Real Talos needs 2 GiB; one vCPU, as its kernel's text patching under TCG
		// with two sometimes panics it.
		MemoryMB: 2048, CPUs: 1,
		PowerBin:    power,
		ProviderBin: provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		FactoryBin: factory, TalosAssetsDir: talos.Dir,
		// The lab's machines have a serial console, as a site's servers: the site's
		// Talos kernel arguments name it, so Talos (and the installed Talos) print there.
		ProviderArgs: []string{"--talos-kernel-args", labtest.TalosKernelArgs},
		APIPort:      50042,
		OmniBin:      omniBin, OmnictlBin: omnictlBin,
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	omni, err := state.OmniClient(omnictlBin)
	require.NoError(t, err)

	o := &omniView{&labtest.Omni{Client: omni}}
	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	rep := &labtest.Report{}

	machines := state.MachineList()
	cp, worker, rejected := machines[0], machines[1], machines[2]
	cluster := []*machine.Machine{cp, worker}

	// What the lab itself did to the machines (their BMCs' power-on): from here on,
	// only the provider.
	untouched := map[string]*footprint{}
	for _, m := range machines {
		untouched[m.Name] = footprintOf(t, m, state.BMCLog(m))
	}

	// 1. Registered; pending; left alone.
	t.Run("pending", func(t labtest.T) {
		labtest.Eventually(t, stepDeadline, "the provider registered and connected in Omni", func() error {
			r, err := o.Get(t.Context(), "InfraProviderCombinedStatuses.omni.sidero.dev", "ephemeral", lab.ProviderID)
			if err != nil {
				return err
			}

			var s struct {
				Health struct {
					Connected bool   `json:"connected"`
					Error     string `json:"error"`
				} `json:"health"`
			}

			if err := json.Unmarshal(r.Spec, &s); err != nil {
				return err
			}

			if !s.Health.Connected || s.Health.Error != "" {
				return fmt.Errorf("health %+v", s.Health)
			}

			return nil
		})

		labtest.ForEach(machines, func(m *machine.Machine) {
			poweredOn, err := labtest.PoweredOn(m)
			if !assert.NoError(t, err, m.Name) {
				return
			}

			if labtest.Eventually(t, stepDeadline, m.Name+" pending in Omni", func() error {
				im, err := o.infraMachine(t.Context(), m.UUID)
				if err != nil {
					return err
				}

				if im.Acceptance != labtest.AcceptancePending {
					return fmt.Errorf("acceptance %d", im.Acceptance)
				}

				return nil
			}) {
				rep.Add("power-on → pending in Omni", m, time.Since(poweredOn))
			}
		})

		time.Sleep(pendingFor)

		for _, m := range machines {
			untouched[m.Name].assertSame(t, m, "pending")
		}
	})

	// 2. The worker's BMC from Omni; two accepted, one rejected.
	t.Run("accepted", func(t labtest.T) {
		require.NoError(t, o.Apply(t.Context(), fmt.Sprintf(
			"metadata: {namespace: default, type: InfraMachineBMCConfigs.omni.sidero.dev, id: %s}\nspec: {api: {address: 'http://%s'}}\n",
			worker.UUID, lab.PowerAPIListen)))

		accepted := time.Now()

		for _, m := range cluster {
			require.NoError(t, o.SetConfig(t.Context(), m.UUID, labtest.AcceptanceAccepted, ""), m.Name)
		}

		require.NoError(t, o.SetConfig(t.Context(), rejected.UUID, labtest.AcceptanceRejected, ""))

		labtest.ForEach(cluster, func(m *machine.Machine) {
			if labtest.Eventually(t, stepDeadline, m.Name+" wiped, ready to use and off", func() error {
				s, err := o.infraStatus(t.Context(), m.UUID)
				if err != nil {
					return err
				}

				if !s.ReadyToUse || s.Power != powerOff {
					return fmt.Errorf("ready to use %t, power %d", s.ReadyToUse, s.Power)
				}

				return nil
			}) {
				rep.Add("accepted → wiped, ready to use, off", m, time.Since(accepted))
			}

			// Omni shows Anvil's labels as its own, under the provider's prefix.
			labtest.Eventually(t, stepDeadline, m.Name+"'s labels in Omni", func() error {
				r, err := o.Get(t.Context(), "MachineStatuses.omni.sidero.dev", "default", m.UUID)
				if err != nil {
					return err
				}

				key := "omni.sidero.dev/infra-provider/" + lab.ProviderID + "/anvil.dev/arch"
				if _, ok := r.Metadata.Labels[key]; !ok {
					return fmt.Errorf("no label %s in %v", key, r.Metadata.Labels)
				}

				return nil
			})
		})

		// The IPMI machine was powered through its BMC, with the credentials its agent
		// provisioned in-band; the worker through the power API Omni gave.
		assert.Greater(t, countIn(state.BMCLog(cp), ipmisim.SessionLine), untouched[cp.Name].sessions, "the provider's sessions with %s's BMC", cp.Name)

		for m, want := range map[*machine.Machine]string{cp: "kind: ipmi", worker: lab.PowerAPIListen} {
			out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
			assert.NoError(t, err, out)
			assert.Contains(t, out, want, m.Name)
			assert.NotContains(t, out, state.BMCPassword, "no BMC password in %s's view", m.Name)
		}
	})

	// 3. A cluster of a control plane and a worker on real Talos: installed, running
	// from disk. The provider dies mid-way.
	t.Run("cluster", func(t labtest.T) {
		template := filepath.Join(t.TempDir(), "cluster.yaml")
		require.NoError(t, os.WriteFile(template, []byte(clusterTemplate(talos.Version, cp.UUID, worker.UUID)), 0o644))

		installed := fmt.Sprintf(labtest.TalosInstalledFmt, talos.Version)
		before := map[string]int{}

		for _, m := range cluster {
			before[m.Name] = countIn(m.SerialLog(), installed)
		}

		// A host that took the provider's address answers the worker's Talos in its
		// place, with a certificate for that address that another CA signed.
		impostor := labtest.StartImpostor(t, state.ProviderNS, state.AdvertiseAddr())
		talosBoots := countIn(worker.SerialLog(), earlyconfig.Param+"=")

		synced := time.Now()

		out, err := omni.Run(t.Context(), "cluster", "template", "sync", "-f", template)
		require.NoError(t, err, out)

		// The worker's Talos kernel started (its command line carries the provider's CA
		// in talos.config.early): from now on its connections to the provider's port
		// reach the impostor. Talos refuses its certificate and sends no request, so
		// neither the configuration nor the token on its URL is read; then the provider
		// answers again, and the same Talos gets its configuration on a retry.
		if labtest.Eventually(t, labtest.TalosDeadline, worker.Name+"'s Talos kernel started", func() error {
			return grew(worker.SerialLog(), earlyconfig.Param+"=", talosBoots)
		}) {
			undivert := impostor.Divert(t, state.ProviderNS, worker.MAC, cfg.APIPort)
			unknownCA := countIn(worker.SerialLog(), x509UnknownAuthority)

			if labtest.Eventually(t, stepDeadline, worker.Name+"'s Talos refused the impostor's certificate", func() error {
				if refused, _ := impostor.Refused(); len(refused) == 0 {
					return errors.New("no handshake with the impostor yet")
				}

				return grew(worker.SerialLog(), x509UnknownAuthority, unknownCA)
			}) {
				rep.Add("cluster created → Talos refused an impostor's certificate", worker, time.Since(synced))
			}

			undivert()

			refused, completed := impostor.Refused()
			assert.Zero(t, completed, "no handshake with the impostor went through: %q", refused)
			t.Logf("%s's Talos refused the impostor %d time(s): %q", worker.Name, len(refused), refused)
		}

		// Real Talos in maintenance joined Omni over SideroLink and reported the
		// cluster's schematic, which Anvil booted it with: the provider is killed there.
		labtest.ForEach(cluster, func(m *machine.Machine) {
			if labtest.Eventually(t, labtest.TalosDeadline, m.Name+"'s real Talos joined Omni with the cluster's schematic", func() error {
				return o.talosJoined(t.Context(), ctl, m, talos.Version)
			}) {
				rep.Add("cluster created → real Talos joined Omni", m, time.Since(synced))
			}
		})

		require.NoError(t, state.KillProvider(t.Context(), cfg))

		labtest.ForEach(cluster, func(m *machine.Machine) {
			if labtest.Eventually(t, labtest.TalosDeadline, m.Name+" installed by its own installer, reported installed", func() error {
				if err := grew(m.SerialLog(), installed, before[m.Name]); err != nil {
					return err
				}

				s, err := o.infraStatus(t.Context(), m.UUID)
				if err != nil {
					return err
				}

				if !s.Installed {
					return fmt.Errorf("not reported installed")
				}

				return nil
			}) {
				rep.Add("cluster created → installed (Talos' install event)", m, time.Since(synced))
			}

			im, err := o.infraMachine(t.Context(), m.UUID)
			if assert.NoError(t, err, m.Name) {
				assert.Positive(t, im.InstallEventID, "Omni counted %s's install (machined's boot sequence)", m.Name)
				assert.NotEmpty(t, im.NodeUniqueToken, "%s joined with a node unique token", m.Name)
			}

			// Running with the configuration Omni applied, from its own disk.
			if labtest.Eventually(t, labtest.TalosDeadline, m.Name+"'s Talos running on its STATE's configuration", func() error {
				return grew(m.SerialLog(), labtest.TalosFromState, 0)
			}) {
				rep.Add("cluster created → running on its installed config", m, time.Since(synced))
			}
		})

		// The Talos booted is make talos' build: its initramfs, the cluster's schematic
		// appended, is what the provider's cache served.
		assertServedTalos(t, state, ctl, cp, talos)

		// Real talosctl reads each node through Omni, which reaches Talos' API with the
		// cluster's client certificate (mutual TLS over SideroLink).
		talosconfig := filepath.Join(t.TempDir(), "talosconfig")
		_, err = omni.Run(t.Context(), "talosconfig", "--cluster", clusterName, "--force", talosconfig)
		require.NoError(t, err)

		for _, m := range cluster {
			labtest.Eventually(t, stepDeadline, "talosctl version of "+m.Name+" through Omni", func() error {
				out, err := omniTalosctl(t.Context(), omni, talosctl, talosconfig, "--nodes", m.UUID, "version")
				if err != nil {
					return err
				}

				if !strings.Contains(out, "Tag:         "+talos.Version) || strings.Count(out, "Tag:") != 2 {
					return fmt.Errorf("no server tag %s in %s", talos.Version, out)
				}

				return nil
			})
		}
	})

	// 4. Omni's reboot and power-off requests, once each, on the control plane.
	t.Run("reboot and power off", func(t labtest.T) {
		grub, fromState := countIn(cp.SerialLog(), labtest.GRUBBoot), countIn(cp.SerialLog(), labtest.TalosFromState)
		asked := time.Now()

		require.NoError(t, o.SetConfig(t.Context(), cp.UUID, labtest.AcceptanceAccepted, "requestedrebootid: reboot-1"))

		if labtest.Eventually(t, labtest.TalosDeadline, cp.Name+" rebooted through its BMC into its disk's Talos", func() error {
			s, err := o.infraStatus(t.Context(), cp.UUID)
			if err != nil {
				return err
			}

			if s.LastRebootID != "reboot-1" {
				return fmt.Errorf("last reboot %q", s.LastRebootID)
			}

			if err := grew(cp.SerialLog(), labtest.GRUBBoot, grub); err != nil {
				return err
			}

			return grew(cp.SerialLog(), labtest.TalosFromState, fromState)
		}) {
			rep.Add("reboot requested → GRUB → Talos on its config", cp, time.Since(asked))
		}

		out, err := ctl("get", "machine", cp.UUID, "-o", "yaml")
		assert.NoError(t, err, out)
		assert.Contains(t, out, "lastDecision: disk", "the boot after the install went to the disk")

		time.Sleep(onceFor)
		assert.Equal(t, grub+1, countIn(cp.SerialLog(), labtest.GRUBBoot), "one reboot for one request")

		asked = time.Now()

		require.NoError(t, o.SetConfig(t.Context(), cp.UUID, labtest.AcceptanceAccepted, "requestedrebootid: reboot-1\n  poweroffrequestid: poweroff-1"))

		if labtest.Eventually(t, stepDeadline, cp.Name+" powered off", func() error {
			s, err := o.infraStatus(t.Context(), cp.UUID)
			if err != nil {
				return err
			}

			if s.LastPowerOffID != "poweroff-1" || s.Power != powerOff {
				return fmt.Errorf("last power-off %q, power %d", s.LastPowerOffID, s.Power)
			}

			return nil
		}) {
			rep.Add("power-off requested → off", cp, time.Since(asked))
		}

		time.Sleep(onceFor)
		assert.False(t, state.Power(cp).Running(), "%s stays off", cp.Name)

		// The request withdrawn, Anvil powers the allocated control plane on into its
		// disk's Talos, which Omni reaches again. The cluster is deleted with both up:
		// Omni v1.9.3 resets a deleted cluster's machine only while it is connected, and
		// one that boots after its cluster's records are gone it speaks to as one in
		// maintenance, which Talos refuses (certificate required).
		grub = countIn(cp.SerialLog(), labtest.GRUBBoot)
		asked = time.Now()

		require.NoError(t, o.SetConfig(t.Context(), cp.UUID, labtest.AcceptanceAccepted, "requestedrebootid: reboot-1"))

		talosconfig := filepath.Join(t.TempDir(), "talosconfig")
		_, err = omni.Run(t.Context(), "talosconfig", "--cluster", clusterName, "--force", talosconfig)
		require.NoError(t, err)

		if labtest.Eventually(t, labtest.TalosDeadline, cp.Name+" powered on into its disk's Talos, reached through Omni", func() error {
			if !state.Power(cp).Running() {
				return errors.New("off")
			}

			if err := grew(cp.SerialLog(), labtest.GRUBBoot, grub); err != nil {
				return err
			}

			_, err := omniTalosctl(t.Context(), omni, talosctl, talosconfig, "--nodes", cp.UUID, "version")

			return err
		}) {
			rep.Add("power-off withdrawn → Talos on its config, through Omni", cp, time.Since(asked))
		}
	})

	// 5. The cluster deleted: reset by Omni, wiped by Anvil, ready again. The provider
	// dies mid-way.
	t.Run("cluster deleted", func(t labtest.T) {
		before, resets := map[string]infraMachine{}, map[string]int{}

		for _, m := range cluster {
			im, err := o.infraMachine(t.Context(), m.UUID)
			require.NoError(t, err)

			before[m.Name], resets[m.Name] = im, countIn(m.SerialLog(), talosReset)
		}

		// The lab's control plane never runs etcd (no container images), so its Talos stays
		// in the BOOTING stage, where Omni v1.9.3 resets a control plane only without the
		// graceful etcd leave: an operator asks for that with a NodeForceDestroyRequest (the
		// UI's force destroy). Without it Omni skips the reset, silently, for ever.
		require.NoError(t, o.Apply(t.Context(), fmt.Sprintf(
			"metadata:\n  namespace: default\n  type: NodeForceDestroyRequests.omni.sidero.dev\n  id: %s\nspec: {}\n", cp.UUID)))

		deleted := time.Now()

		ctx, cancel := context.WithTimeout(t.Context(), labtest.TalosDeadline)
		defer cancel()

		done := make(chan error, 1)

		go func() {
			_, err := omni.Run(ctx, "cluster", "delete", clusterName)
			done <- err
		}()

		// Omni resets each machine over Talos' API.
		labtest.ForEach(cluster, func(m *machine.Machine) {
			if labtest.Eventually(t, labtest.TalosDeadline, m.Name+" reset by Omni", func() error {
				return grew(m.SerialLog(), talosReset, resets[m.Name])
			}) {
				rep.Add("cluster deleted → reset over Talos' API", m, time.Since(deleted))
			}
		})

		require.NoError(t, state.KillProvider(t.Context(), cfg))

		labtest.ForEach(cluster, func(m *machine.Machine) {
			if labtest.Eventually(t, labtest.TalosDeadline, m.Name+" wiped and ready to use again", func() error {
				im, err := o.infraMachine(t.Context(), m.UUID)
				if err != nil {
					return err
				}

				if im.WipeID == "" || im.WipeID == before[m.Name].WipeID || im.ClusterTalosVersion != "" {
					return fmt.Errorf("wipe id %q, cluster version %q", im.WipeID, im.ClusterTalosVersion)
				}

				s, err := o.infraStatus(t.Context(), m.UUID)
				if err != nil {
					return err
				}

				// The token voided is the one Omni holds for the machine as it is wiped.
				if !s.ReadyToUse || s.Installed || s.WipedNodeUniqueToken == "" || s.WipedNodeUniqueToken != im.NodeUniqueToken {
					return fmt.Errorf("ready to use %t, installed %t, wiped token %q (Omni's %q)",
						s.ReadyToUse, s.Installed, s.WipedNodeUniqueToken, im.NodeUniqueToken)
				}

				return nil
			}) {
				rep.Add("cluster deleted → wiped, ready to use", m, time.Since(deleted))
			}
		})

		// The cluster is gone from Omni; omnictl's wait for it is not the test's to judge.
		labtest.Eventually(t, stepDeadline, "cluster "+clusterName+" gone from Omni", func() error {
			_, err := o.Get(t.Context(), "Clusters.omni.sidero.dev", "default", clusterName)

			switch {
			case err == nil:
				return errors.New("still there")
			case strings.Contains(err.Error(), "NotFound"):
				return nil
			default:
				return err
			}
		})

		cancel()
		if err := <-done; err != nil {
			t.Logf("omnictl cluster delete: %v (its wait ended by the test)", err)
		}

		for _, m := range cluster {
			out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
			assert.NoError(t, err, out)
			assert.Contains(t, out, "omni:", "%s's wipe was Omni's", m.Name)

			// Allocatable again: Omni's labels say so.
			labtest.Eventually(t, stepDeadline, m.Name+" allocatable in Omni", func() error {
				r, err := o.Get(t.Context(), "MachineStatuses.omni.sidero.dev", "default", m.UUID)
				if err != nil {
					return err
				}

				for _, l := range []string{"omni.sidero.dev/available", "omni.sidero.dev/ready-to-use"} {
					if _, ok := r.Metadata.Labels[l]; !ok {
						return fmt.Errorf("no label %s", l)
					}
				}

				return nil
			})
		}
	})

	// 6. The rejected machine: never powered, wiped or configured.
	t.Run("rejected untouched", func(t labtest.T) {
		untouched[rejected.Name].assertSame(t, rejected, "rejected")

		out, err := ctl("get", "machine", rejected.UUID, "-o", "yaml")
		assert.NoError(t, err, out)
		assert.NotContains(t, out, "lastWipe", "a rejected machine is never wiped")
	})

	rep.Write(t, root, "A cluster's life beside Omni, on real Talos", "omni-lifecycle-report.txt")
}

// clusterTemplate is the lab cluster: Talos version, a control plane and a worker;
// Omni's embedded discovery service (the lab has no other); the lab registry (the
// factory stand-in serves the installer images over plain HTTP); and no time sync: the
// lab has no time server, and Talos holds back trustd, etcd and its API's certificates
// until its clock is synchronised.
func clusterTemplate(talosVersion, controlPlane, worker string) string {
	return fmt.Sprintf(`kind: Cluster
name: %s
kubernetes:
  version: %s
talos:
  version: %s
features:
  useEmbeddedDiscoveryService: true
patches:
  - name: lab-registry
    inline:
      machine:
        registries:
          mirrors:
            %s:
              endpoints:
                - http://%s
        time:
          disabled: true
---
kind: ControlPlane
machines:
  - %s
---
kind: Workers
machines:
  - %s
`, clusterName, labKubernetes, talosVersion, lab.FactoryListen, lab.FactoryListen, controlPlane, worker)
}

// talosJoined says whether the machine's real Talos (not the agent, which reports a
// Talos version of its own) is in maintenance in Omni with the schematic of its
// allocation, which Anvil booted it with.
func (o *omniView) talosJoined(ctx context.Context, ctl func(...string) (string, error), m *machine.Machine, version string) error {
	var ms struct {
		TalosVersion string `json:"talosversion"`
		Schematic    struct {
			FullID string `json:"fullid"`
		} `json:"schematic"`
	}

	if err := o.Spec(ctx, "MachineStatuses.omni.sidero.dev", "default", m.UUID, &ms); err != nil {
		return err
	}

	if ms.TalosVersion != version {
		return fmt.Errorf("Omni sees Talos %q", ms.TalosVersion)
	}

	out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
	if err != nil {
		return err
	}

	if ms.Schematic.FullID == "" || !strings.Contains(out, ms.Schematic.FullID) {
		return fmt.Errorf("Omni sees schematic %q, not the allocation's", ms.Schematic.FullID)
	}

	return nil
}

// assertServedTalos checks the Talos the provider served m is make talos' build: the
// initramfs in its boot-asset cache (blobs/sha256/<hex> under <state>/image-cache, the
// digest anvilctl cache list names) begins with make talos' initramfs, to which the
// factory appends the schematic's extension layer.
func assertServedTalos(t testing.TB, state *lab.State, ctl func(...string) (string, error), m *machine.Machine, talos labtest.RealTalos) {
	t.Helper()

	out, err := ctl("cache", "list", "-o", "json")
	require.NoError(t, err, out)

	var entries []struct {
		File   string `json:"file"`
		Digest string `json:"digest"`
	}

	require.NoError(t, json.Unmarshal([]byte(out), &entries), out)

	base, err := os.Stat(filepath.Join(talos.Dir, "initramfs-amd64.xz"))
	require.NoError(t, err)

	found := false

	for _, e := range entries {
		if e.File != "initramfs-amd64.xz" {
			continue
		}

		blob := filepath.Join(state.ProviderStateDir(), "image-cache", "blobs", "sha256", strings.TrimPrefix(e.Digest, "sha256:"))

		f, err := os.Open(blob)
		require.NoError(t, err)

		h := sha256.New()
		_, err = io.CopyN(h, f, base.Size())
		f.Close()
		require.NoError(t, err)

		if hex.EncodeToString(h.Sum(nil)) == talos.InitramfsSHA256 {
			found = true
		}
	}

	assert.True(t, found, "no initramfs in the provider's cache (%s) begins with make talos' (sha256 %s): %s", m.Name, talos.InitramfsSHA256, out)
}

// omniTalosctl runs talosctl with Omni's talosconfig of the cluster, as Omni's admin
// service account, from Omni's namespace.
func omniTalosctl(ctx context.Context, c *omnilab.Client, talosctl, talosconfig string, args ...string) (string, error) {
	env, err := c.Env()
	if err != nil {
		return "", err
	}

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	cmd := netns.Command(ctx, c.NetNS, talosctl, append([]string{"--talosconfig", talosconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)

	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("talosctl %s: %w: %s", strings.Join(args, " "), err, out)
	}

	return string(out), nil
}

// labKubernetes is the Kubernetes version of the lab cluster, one the factory stand-in's
// registry offers and Talos v1.13 supports.
const labKubernetes = "v1.32.0"

// powerOff is infra.MachineStatus' power state OFF, as omnictl prints it.
const powerOff = 1

// omniView is the lab Omni, with what the test reads of it.
type omniView struct{ *labtest.Omni }

// infraMachine is infra.Machine's spec, the fields the test reads.
type infraMachine struct {
	Acceptance          int    `json:"acceptancestatus"`
	ClusterTalosVersion string `json:"clustertalosversion"`
	WipeID              string `json:"wipeid"`
	InstallEventID      int    `json:"installeventid"`
	NodeUniqueToken     string `json:"nodeuniquetoken"`
}

func (o *omniView) infraMachine(ctx context.Context, id string) (infraMachine, error) {
	var im infraMachine

	return im, o.Spec(ctx, "InfraMachines.omni.sidero.dev", "infra-provider", id, &im)
}

// infraStatus is infra.MachineStatus's spec, as the provider reports it.
type infraStatus struct {
	Power                int    `json:"powerstate"`
	ReadyToUse           bool   `json:"readytouse"`
	Installed            bool   `json:"installed"`
	LastRebootID         string `json:"lastrebootid"`
	LastPowerOffID       string `json:"lastpoweroffid"`
	WipedNodeUniqueToken string `json:"wipednodeuniquetoken"`
}

func (o *omniView) infraStatus(ctx context.Context, id string) (infraStatus, error) {
	var s infraStatus

	return s, o.Spec(ctx, "InfraMachineStatuses.omni.sidero.dev", "infra-provider", id, &s)
}

// footprint is what the provider could leave on a machine: its disk's content, the
// sessions with its BMC, its QEMU process (a power cycle starts another).
type footprint struct {
	disk     string
	bmcLog   string
	sessions int
	started  time.Time
}

func footprintOf(t testing.TB, m *machine.Machine, bmcLog string) *footprint {
	t.Helper()

	started, err := labtest.PoweredOn(m)
	require.NoError(t, err, m.Name)

	return &footprint{disk: fileSum(t, m.Disk()), bmcLog: bmcLog, sessions: countIn(bmcLog, ipmisim.SessionLine), started: started}
}

// assertSame checks the machine shows no more than the lab's own footprint.
func (f *footprint) assertSame(t testing.TB, m *machine.Machine, when string) {
	t.Helper()

	assert.Equal(t, f.disk, fileSum(t, m.Disk()), "%s: %s's disk changed", when, m.Name)
	assert.Equal(t, f.sessions, countIn(f.bmcLog, ipmisim.SessionLine), "%s: a session with %s's BMC", when, m.Name)

	started, err := labtest.PoweredOn(m)
	if assert.NoError(t, err, m.Name) {
		assert.Equal(t, f.started, started, "%s: %s was powered off and on", when, m.Name)
	}
}

func fileSum(t testing.TB, path string) string {
	t.Helper()

	f, err := os.Open(path)
	require.NoError(t, err)

	defer f.Close()

	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)

	return hex.EncodeToString(h.Sum(nil))
}

// countIn counts the lines of the file at path holding s (0 when there is no file).
func countIn(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}

	return strings.Count(string(b), s)
}

// grew says whether the file at path holds more lines with s than before.
func grew(path, s string, before int) error {
	if n := countIn(path, s); n <= before {
		return fmt.Errorf("%d × %q, not more than before", n, s)
	}

	return nil
}
