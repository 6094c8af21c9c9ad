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
	"github.com/anvil-metal/anvil/internal/ipmisim"
)

const (
	// stepDeadline is generous: under TCG power-on to the agent is ~30–60 s, and the
	// host's two cores are shared with another lab's machines.
	stepDeadline = 5 * time.Minute
	// talosDeadline bounds a Talos boot end to end: power-on, firmware, the factory's
	// stand-in, SideroLink, Omni's config, the install and the boot from disk, on TCG.
	talosDeadline = 10 * time.Minute
	// pendingFor is how long the test watches pending machines be left alone.
	pendingFor = 20 * time.Second
	// onceFor is how long a request carried out is watched for a second time.
	onceFor = 20 * time.Second
	// clusterName is the lab cluster's.
	clusterName = "lab"
)

// Lines of the stand-in Talos (hack/cmd/talos-standin) the test counts.
const (
	standinRunning = "TALOS-STANDIN omni stage=running"
	standinJoined  = "TALOS-STANDIN omni joined"
	standinReset   = "TALOS-STANDIN omni reset"
)

// TestOmniLifecycleE2E is a machine's whole life with Omni deciding and Anvil doing it,
// on a lab of its own with a real Omni: a BIOS machine with a simulated IPMI BMC, a UEFI
// machine with the lab's power API, and a third one Omni rejects.
//
//  1. The provider is registered; the machines PXE-boot the agent and appear pending,
//     and nothing touches them (no BMC session, disks byte-identical).
//  2. The admin gives the api machine's BMC (InfraMachineBMCConfig) and accepts both:
//     the agent provisions the IPMI machine's BMC credentials in-band, both are wiped,
//     reported ready to use with their power and labels, and powered off as Omni
//     prefers. The third is rejected.
//  3. A cluster with the IPMI machine (omnictl cluster template sync): Anvil powers it
//     on into the factory's Talos with Omni's join arguments; Omni applies its config;
//     the stand-in installs itself and reports it; Anvil reports it installed and its
//     next boot goes to its disk, where it runs. The provider is SIGKILLed mid-way.
//  4. Omni's reboot and power-off requests are carried out once each and acknowledged.
//  5. The cluster deleted: Omni resets the machine over Talos' API (mutual TLS), names
//     a wipe; Anvil PXE-cycles it into the agent, wipes it, reports the wiped node
//     unique token, and it is ready to use again. The provider is SIGKILLed mid-way.
//  6. The rejected machine was never powered, wiped or configured.
//
// Figures in _out/e2e/omni-lifecycle-report.txt.
func TestOmniLifecycleE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	omniBin, omnictlBin := labtest.OmniBinaries(t, root)

	bin := t.TempDir()
	factory, power, anvilctl := filepath.Join(bin, "lab-factory"), filepath.Join(bin, "lab-power"), filepath.Join(bin, "anvilctl")

	provider := labtest.BuildProvider(t, root, bin)
	labtest.GoBuild(t, root, factory, "./hack/cmd/lab-factory")
	labtest.GoBuild(t, root, power, "./hack/cmd/lab-power")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")

	agent := labtest.AgentAssets(t, root, bin)

	standin := filepath.Join(bin, "talos-standin")
	require.NoError(t, lab.BuildStandinAssets(t.Context(), root, standin))

	dir, prefix := labtest.NewLab(t, "anvl", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 3,
		Firmware: []machine.Firmware{machine.BIOS, machine.UEFI, machine.UEFIPXE},
		BMC:      []lab.PowerOwner{lab.OwnerIPMI, lab.OwnerAPI, lab.OwnerIPMI},
		// The api machine's BMC comes from Omni, as an admin gives it.
		UnregisteredBMC: []lab.PowerOwner{lab.OwnerAPI},
		PowerBin:        power,
		ProviderBin:     provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		FactoryBin: factory, FactoryAssetsDir: standin,
		APIPort: 50042,
		OmniBin: omniBin, OmnictlBin: omnictlBin,
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	omni, err := state.OmniClient(omnictlBin)
	require.NoError(t, err)

	o := &omniView{&labtest.Omni{Client: omni}}
	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	rep := &labtest.Report{}

	machines := state.MachineList()
	ipmiM, apiM, rejected := machines[0], machines[1], machines[2]

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

	// 2. The api machine's BMC from Omni; two accepted, one rejected.
	t.Run("accepted", func(t labtest.T) {
		require.NoError(t, o.Apply(t.Context(), fmt.Sprintf(
			"metadata: {namespace: default, type: InfraMachineBMCConfigs.omni.sidero.dev, id: %s}\nspec: {api: {address: 'http://%s'}}\n",
			apiM.UUID, lab.PowerAPIListen)))

		accepted := time.Now()

		for _, m := range []*machine.Machine{ipmiM, apiM} {
			require.NoError(t, o.SetConfig(t.Context(), m.UUID, labtest.AcceptanceAccepted, ""), m.Name)
		}

		require.NoError(t, o.SetConfig(t.Context(), rejected.UUID, labtest.AcceptanceRejected, ""))

		labtest.ForEach([]*machine.Machine{ipmiM, apiM}, func(m *machine.Machine) {
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
		// provisioned in-band; the api machine through the power API Omni gave.
		assert.Greater(t, countIn(state.BMCLog(ipmiM), ipmisim.SessionLine), untouched[ipmiM.Name].sessions, "the provider's sessions with %s's BMC", ipmiM.Name)

		for m, want := range map[*machine.Machine]string{ipmiM: "kind: ipmi", apiM: lab.PowerAPIListen} {
			out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
			assert.NoError(t, err, out)
			assert.Contains(t, out, want, m.Name)
			assert.NotContains(t, out, state.BMCPassword, "no BMC password in %s's view", m.Name)
		}
	})

	// 3. A cluster: Talos, installed, running from disk. The provider dies mid-way.
	t.Run("cluster", func(t labtest.T) {
		template := filepath.Join(t.TempDir(), "cluster.yaml")
		require.NoError(t, os.WriteFile(template, []byte(fmt.Sprintf(
			"kind: Cluster\nname: %s\nkubernetes:\n  version: %s\ntalos:\n  version: %s\n---\nkind: ControlPlane\nmachines:\n  - %s\n",
			clusterName, labKubernetes, labTalos, ipmiM.UUID)), 0o644))

		joined, running := countIn(ipmiM.SerialLog(), standinJoined), countIn(ipmiM.SerialLog(), standinRunning)
		synced := time.Now()

		out, err := omni.Run(t.Context(), "cluster", "template", "sync", "-f", template)
		require.NoError(t, err, out)

		// The stand-in Talos in maintenance joined Omni: the provider is killed there.
		if !labtest.Eventually(t, talosDeadline, ipmiM.Name+"'s Talos joined Omni", func() error {
			return grew(ipmiM.SerialLog(), standinJoined, joined)
		}) {
			return
		}

		rep.Add("cluster created → Talos joined Omni", ipmiM, time.Since(synced))

		require.NoError(t, state.KillProvider(t.Context(), cfg))

		if labtest.Eventually(t, talosDeadline, ipmiM.Name+" installed and running from its disk", func() error {
			if err := grew(ipmiM.SerialLog(), standinRunning, running); err != nil {
				return err
			}

			s, err := o.infraStatus(t.Context(), ipmiM.UUID)
			if err != nil {
				return err
			}

			if !s.Installed {
				return fmt.Errorf("not reported installed")
			}

			return nil
		}) {
			rep.Add("cluster created → installed, running from disk", ipmiM, time.Since(synced))
		}

		im, err := o.infraMachine(t.Context(), ipmiM.UUID)
		require.NoError(t, err)
		assert.Positive(t, im.InstallEventID, "Omni counted the install")

		assert.NotEmpty(t, im.NodeUniqueToken, "the stand-in joined with a node unique token")

		out, err = ctl("get", "machine", ipmiM.UUID, "-o", "yaml")
		assert.NoError(t, err, out)
		assert.Contains(t, out, "lastDecision: disk", "the boot after the install went to the disk")
	})

	// 4. Omni's reboot and power-off requests, once each.
	t.Run("reboot and power off", func(t labtest.T) {
		running := countIn(ipmiM.SerialLog(), standinRunning)
		asked := time.Now()

		require.NoError(t, o.SetConfig(t.Context(), ipmiM.UUID, labtest.AcceptanceAccepted, "requestedrebootid: reboot-1"))

		if labtest.Eventually(t, talosDeadline, ipmiM.Name+" rebooted into its Talos", func() error {
			s, err := o.infraStatus(t.Context(), ipmiM.UUID)
			if err != nil {
				return err
			}

			if s.LastRebootID != "reboot-1" {
				return fmt.Errorf("last reboot %q", s.LastRebootID)
			}

			return grew(ipmiM.SerialLog(), standinRunning, running)
		}) {
			rep.Add("reboot requested → running again", ipmiM, time.Since(asked))
		}

		time.Sleep(onceFor)
		assert.Equal(t, running+1, countIn(ipmiM.SerialLog(), standinRunning), "one reboot for one request")

		asked = time.Now()

		require.NoError(t, o.SetConfig(t.Context(), ipmiM.UUID, labtest.AcceptanceAccepted, "requestedrebootid: reboot-1\n  poweroffrequestid: poweroff-1"))

		if labtest.Eventually(t, stepDeadline, ipmiM.Name+" powered off", func() error {
			s, err := o.infraStatus(t.Context(), ipmiM.UUID)
			if err != nil {
				return err
			}

			if s.LastPowerOffID != "poweroff-1" || s.Power != powerOff {
				return fmt.Errorf("last power-off %q, power %d", s.LastPowerOffID, s.Power)
			}

			return nil
		}) {
			rep.Add("power-off requested → off", ipmiM, time.Since(asked))
		}

		time.Sleep(onceFor)
		assert.False(t, state.Power(ipmiM).Running(), "%s stays off", ipmiM.Name)
	})

	// 5. The cluster deleted: reset by Omni, wiped by Anvil, ready again. The provider
	// dies mid-way.
	t.Run("cluster deleted", func(t labtest.T) {
		before, err := o.infraMachine(t.Context(), ipmiM.UUID)
		require.NoError(t, err)

		resets := countIn(ipmiM.SerialLog(), standinReset)
		deleted := time.Now()

		ctx, cancel := context.WithTimeout(t.Context(), talosDeadline)
		defer cancel()

		done := make(chan error, 1)

		go func() {
			_, err := omni.Run(ctx, "cluster", "delete", clusterName)
			done <- err
		}()

		// Omni resets the machine, whose power-off request it drops: Anvil powers it on.
		if labtest.Eventually(t, talosDeadline, ipmiM.Name+" reset by Omni", func() error {
			return grew(ipmiM.SerialLog(), standinReset, resets)
		}) {
			rep.Add("cluster deleted → reset over Talos' API", ipmiM, time.Since(deleted))
		}

		require.NoError(t, state.KillProvider(t.Context(), cfg))

		if labtest.Eventually(t, talosDeadline, ipmiM.Name+" wiped and ready to use again", func() error {
			im, err := o.infraMachine(t.Context(), ipmiM.UUID)
			if err != nil {
				return err
			}

			if im.WipeID == "" || im.WipeID == before.WipeID || im.ClusterTalosVersion != "" {
				return fmt.Errorf("wipe id %q, cluster version %q", im.WipeID, im.ClusterTalosVersion)
			}

			s, err := o.infraStatus(t.Context(), ipmiM.UUID)
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
			rep.Add("cluster deleted → wiped, ready to use", ipmiM, time.Since(deleted))
		}

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

		out, err := ctl("get", "machine", ipmiM.UUID, "-o", "yaml")
		assert.NoError(t, err, out)
		assert.Contains(t, out, "omni:", "the wipe was Omni's")

		// Allocatable again: Omni's labels say so.
		labtest.Eventually(t, stepDeadline, ipmiM.Name+" allocatable in Omni", func() error {
			r, err := o.Get(t.Context(), "MachineStatuses.omni.sidero.dev", "default", ipmiM.UUID)
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
	})

	// 6. The rejected machine: never powered, wiped or configured.
	t.Run("rejected untouched", func(t labtest.T) {
		untouched[rejected.Name].assertSame(t, rejected, "rejected")

		out, err := ctl("get", "machine", rejected.UUID, "-o", "yaml")
		assert.NoError(t, err, out)
		assert.NotContains(t, out, "lastWipe", "a rejected machine is never wiped")
	})

	rep.Write(t, root, "A cluster's life beside Omni", "omni-lifecycle-report.txt")
}

// The lab's Omni offers the factory stand-in's versions.
const (
	labTalos      = "v1.9.0"
	labKubernetes = "v1.32.0"
)

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
