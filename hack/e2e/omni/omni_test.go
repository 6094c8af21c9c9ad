//go:build lab

// Package omni is Anvil beside a real Omni, end to end, on a lab of its own (see
// TestOmniE2E). It is a package of its own so that it runs beside hack/e2e's flow rather
// than after it.
package omni

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
	"github.com/anvil-metal/anvil/internal/netns"
)

const (
	// stepDeadline is generous: under TCG power-on to the agent is ~30–60 s, and the
	// host's two cores are shared with another lab's machines.
	stepDeadline = 5 * time.Minute
	// staleAfter is the agent's siderolink.DefaultStaleAfter (Omni's and Talos' peer-down
	// interval) and checkEvery how often it reads the handshake: a WireGuard path blocked
	// longer than their sum is down by every clock there is.
	staleAfter = 275 * time.Second
	checkEvery = 30 * time.Second
	// rejoinDeadline bounds a re-join: the agent notices within staleAfter + checkEvery of
	// the block, calls Provision at once; with TCG and a shared host, room to spare.
	rejoinDeadline = staleAfter + checkEvery + 4*time.Minute
	// maintenancePort is the Talos API's port, which the agent serves on its SideroLink
	// address only.
	maintenancePort = "50000"
	// agentTalosVersion is the Talos version the agent reports (the minimum Omni's
	// maintenance-mode support wants).
	agentTalosVersion = "v1.13.0"
)

// TestOmniE2E is Anvil beside a real Omni, on a lab of its own: a machine of each
// firmware kind PXE-boots the agent from the provider in Omni mode and appears in Omni
// pending acceptance; accepted by the admin, Omni shows it as it shows a Talos machine in
// maintenance mode, with its hardware and labels; talosctl and the Talos machinery
// client read it over SideroLink, never on its lab address; omnictl shows its console.
// Then the re-joins: Omni restarted, every machine provisions again and is connected
// with its hardware; one machine's WireGuard blocked past the stale threshold, it
// provisions again on its own and is connected once the path is open. Figures in
// _out/e2e/omni-report.txt.
func TestOmniE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft to block WireGuard (make setup installs nftables)")
	}

	root := labtest.RepoRoot(t)
	omniBin, omnictlBin := labtest.OmniBinaries(t, root)
	talosctl := labtest.Talosctl(t, root)

	bin := t.TempDir()
	factory := filepath.Join(bin, "lab-factory")

	provider := labtest.BuildProvider(t, root, bin)
	labtest.GoBuild(t, root, factory, "./hack/cmd/lab-factory")

	agent := labtest.AgentAssets(t, root, bin)

	// On failure NewLab's teardown prints the lab's logs, Omni's included.
	dir, prefix := labtest.NewLab(t, "anvo", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 3,
		Firmware:    []machine.Firmware{machine.BIOS, machine.UEFI, machine.UEFIPXE},
		ProviderBin: provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort:    50042,
		FactoryBin: factory,
		OmniBin:    omniBin, OmnictlBin: omnictlBin,
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	omni, err := state.OmniClient(omnictlBin)
	require.NoError(t, err)

	o := &omniView{&labtest.Omni{Client: omni}}
	machines := state.MachineList()
	rep := &labtest.Report{}

	// 1. Each machine appears pending acceptance: its infra.Machine, PENDING.
	t.Run("pending", func(t labtest.T) {
		labtest.ForEach(machines, func(m *machine.Machine) {
			poweredOn, err := labtest.PoweredOn(m)
			if !assert.NoError(t, err, m.Name) {
				return
			}

			var im labtest.OmniResource

			ok := labtest.Eventually(t, stepDeadline, fmt.Sprintf("%s in Omni as an infra machine", m.Name), func() error {
				var err error

				im, err = o.Get(t.Context(), "InfraMachines.omni.sidero.dev", "infra-provider", m.UUID)

				return err
			})
			if !ok {
				return
			}

			rep.Add("power-on → visible in Omni (pending)", m, time.Since(poweredOn))

			// PENDING is the zero value: the field must be there and say it.
			var spec map[string]any

			assert.NoError(t, json.Unmarshal(im.Spec, &spec))

			if assert.Contains(t, spec, "acceptancestatus", m.Name) {
				assert.EqualValues(t, 0, spec["acceptancestatus"], "%s: acceptance is PENDING", m.Name)
			}
			assert.Contains(t, im.Metadata.Labels, "omni.sidero.dev/accept-pending", m.Name)
			assert.Equal(t, lab.ProviderID, im.Metadata.Labels["omni.sidero.dev/infra-provider-id"], m.Name)
		})
	})

	if t.Failed() {
		t.FailNow()
	}

	// 2. Accepted through InfraMachineConfig, Omni shows each as a Talos machine in
	// maintenance mode, its hardware complete.
	status := map[string]*machineStatus{}

	var statusMu sync.Mutex

	t.Run("accepted", func(t labtest.T) {
		labtest.ForEach(machines, func(m *machine.Machine) {
			accepted := time.Now()

			if !assert.NoError(t, o.Accept(t.Context(), m.UUID), m.Name) {
				return
			}

			st, ok := o.waitComplete(t, m, stepDeadline)
			if !ok {
				return
			}

			rep.Add("accept → hardware complete in Omni", m, time.Since(accepted))

			statusMu.Lock()
			status[m.UUID] = st
			statusMu.Unlock()

			assertMachineStatus(t, m, st)
		})
	})

	if t.Failed() {
		t.FailNow()
	}

	// 3. The Talos API over SideroLink: talosctl, as a person runs it, and the machinery
	// client, as Omni does; on the lab address, nothing.
	t.Run("talos API over SideroLink", func(t labtest.T) {
		for _, m := range machines {
			st := status[m.UUID]
			assertTalosctl(t, talosctl, state.OmniNS, m, st.Spec.ManagementAddress)
			assertMachinery(t, state.OmniNS, m, st.Spec.ManagementAddress)
			assertRefused(t, state.ProviderNS, m, st.Spec.Network.Addresses)
		}
	})

	// 4. Omni shows the agent's console.
	t.Run("machine-logs", func(t labtest.T) {
		for _, m := range machines {
			labtest.Eventually(t, stepDeadline, fmt.Sprintf("%s: omnictl machine-logs shows the agent", m.Name), func() error {
				out, err := omni.Run(t.Context(), "machine-logs", m.UUID, "--tail", "500")
				if err != nil {
					return err
				}

				if !strings.Contains(out, "omni.siderolink provisioned on SideroLink") || !strings.Contains(out, "omni.maintenance serving the maintenance API") {
					return fmt.Errorf("no agent lines in:\n%s", tail([]byte(out), 20))
				}

				return nil
			})
		}
	})

	// 5. Omni restarts on its state: every agent notices (its log connection drops),
	// provisions again with a new key, and is connected with its hardware.
	t.Run("Omni restarted", func(t labtest.T) {
		keys := map[string]string{}

		for _, m := range machines {
			l, err := o.link(t.Context(), m.UUID)
			require.NoError(t, err, m.Name)

			keys[m.UUID] = l.NodePublicKey
		}

		restarted := time.Now()

		ctx, cancel := context.WithTimeout(t.Context(), stepDeadline)
		require.NoError(t, state.RestartOmni(ctx, cfg))
		cancel()

		labtest.ForEach(machines, func(m *machine.Machine) {
			if !o.waitRejoined(t, m, keys[m.UUID], stepDeadline) {
				return
			}

			rep.Add("Omni restarted → provisioned again, connected", m, time.Since(restarted))
		})
	})

	// 6. One machine's WireGuard path is blocked past the stale threshold: it provisions
	// again on its own (a new key in its Link), and once the path is open it is
	// connected with its hardware. Omni's other machines stay connected.
	t.Run("WireGuard blocked", func(t labtest.T) {
		m := machines[0]

		st := status[m.UUID]
		ip := lanIPv4(st.Spec.Network.Addresses)
		require.NotEmpty(t, ip, "%s: its lab address, from %v", m.Name, st.Spec.Network.Addresses)

		l, err := o.link(t.Context(), m.UUID)
		require.NoError(t, err)

		unblock := blockWireGuard(t, state.OmniNS, ip)
		t.Cleanup(unblock)

		blocked := time.Now()

		ok := labtest.Eventually(t, rejoinDeadline, fmt.Sprintf("%s: provisions again while its WireGuard is blocked", m.Name), func() error {
			now, err := o.link(t.Context(), m.UUID)
			if err != nil {
				return err
			}

			if now.NodePublicKey == l.NodePublicKey {
				return errors.New("its Link has the key of before the block")
			}

			return nil
		})
		if !ok {
			return
		}

		rep.Add("WireGuard blocked → provisioned again", m, time.Since(blocked))

		// Blocked past the stale threshold, whatever made the agent move first.
		if rest := time.Until(blocked.Add(staleAfter + checkEvery)); rest > 0 {
			time.Sleep(rest)
		}

		unblock()

		opened := time.Now()

		if o.waitRejoined(t, m, "", stepDeadline) {
			rep.Add("WireGuard open again → connected", m, time.Since(opened))
		}

		// The block was one machine's: the others are connected with their hardware.
		for _, other := range machines[1:] {
			o.waitRejoined(t, other, "", stepDeadline)
		}
	})

	rep.Write(t, root, "Anvil beside Omni", "omni-report.txt")
}

// omniView is the lab Omni, with what TestOmniE2E reads of it.
type omniView struct{ *labtest.Omni }

// link is a machine's SideroLink peer as Omni holds it.
type link struct {
	Connected     bool   `json:"connected"`
	NodePublicKey string `json:"nodepublickey"`
}

func (o *omniView) link(ctx context.Context, id string) (link, error) {
	var l link

	r, err := o.Get(ctx, "Links.omni.sidero.dev", "default", id)
	if err != nil {
		return l, err
	}

	if err := json.Unmarshal(r.Spec, &l); err != nil {
		return l, fmt.Errorf("error decoding the Link of %s: %w", id, err)
	}

	return l, nil
}

// machineStatus is Omni's MachineStatus, the fields the test reads.
type machineStatus struct {
	Labels map[string]any
	Spec   struct {
		Connected         bool   `json:"connected"`
		Maintenance       bool   `json:"maintenance"`
		TalosVersion      string `json:"talosversion"`
		ManagementAddress string `json:"managementaddress"`
		Hardware          struct {
			Arch       string `json:"arch"`
			Processors []struct {
				CoreCount int `json:"corecount"`
			} `json:"processors"`
			MemoryModules []struct {
				SizeMB int `json:"sizemb"`
			} `json:"memorymodules"`
			BlockDevices []struct {
				LinuxName string `json:"linuxname"`
				Size      uint64 `json:"size"`
			} `json:"blockdevices"`
		} `json:"hardware"`
		Network struct {
			Addresses       []string `json:"addresses"`
			DefaultGateways []string `json:"defaultgateways"`
			NetworkLinks    []struct {
				LinuxName       string `json:"linuxname"`
				HardwareAddress string `json:"hardwareaddress"`
				SpeedMbps       int    `json:"speedmbps"`
			} `json:"networklinks"`
		} `json:"network"`
		PlatformMetadata struct {
			Platform string `json:"platform"`
		} `json:"platformmetadata"`
		Schematic struct {
			InAgentMode bool `json:"inagentmode"`
		} `json:"schematic"`
	}
}

func (o *omniView) machineStatus(ctx context.Context, id string) (*machineStatus, error) {
	r, err := o.Get(ctx, "MachineStatuses.omni.sidero.dev", "default", id)
	if err != nil {
		return nil, err
	}

	st := &machineStatus{Labels: r.Metadata.Labels}
	if err := json.Unmarshal(r.Spec, &st.Spec); err != nil {
		return nil, fmt.Errorf("error decoding the MachineStatus of %s: %w", id, err)
	}

	return st, nil
}

// missing says what Omni does not show yet of a connected machine in maintenance with
// its hardware; nil when it shows all.
func (st *machineStatus) missing() error {
	s := st.Spec

	var miss []string

	for what, ok := range map[string]bool{
		"connected": s.Connected, "maintenance": s.Maintenance, "talos version": s.TalosVersion != "",
		"processors": len(s.Hardware.Processors) > 0, "memory": len(s.Hardware.MemoryModules) > 0,
		"disks": len(s.Hardware.BlockDevices) > 0, "links": len(s.Network.NetworkLinks) > 0,
		"addresses": len(s.Network.Addresses) > 0, "gateways": len(s.Network.DefaultGateways) > 0,
		"management address": s.ManagementAddress != "",
	} {
		if !ok {
			miss = append(miss, what)
		}
	}

	for _, l := range omniLabels {
		if _, ok := st.Labels["omni.sidero.dev/"+l]; !ok {
			miss = append(miss, "label "+l)
		}
	}

	if len(miss) > 0 {
		slices.Sort(miss)

		return fmt.Errorf("Omni does not show: %s", strings.Join(miss, ", "))
	}

	return nil
}

// omniLabels are the labels Omni derives for a machine in maintenance with its hardware.
var omniLabels = []string{"cores", "mem", "storage", "net", "arch", "reporting-events", "ready-to-use", "connected", "platform"}

// waitComplete waits until Omni shows the machine complete (see missing).
func (o *omniView) waitComplete(t labtest.T, m *machine.Machine, deadline time.Duration) (*machineStatus, bool) {
	var st *machineStatus

	ok := labtest.Eventually(t, deadline, fmt.Sprintf("%s: connected, in maintenance, its hardware in Omni", m.Name), func() error {
		var err error

		if st, err = o.machineStatus(t.Context(), m.UUID); err != nil {
			return err
		}

		return st.missing()
	})

	return st, ok
}

// waitRejoined waits until the machine's Link has a key other than old (any key when
// old is empty) and is connected, and Omni shows the machine complete again.
func (o *omniView) waitRejoined(t labtest.T, m *machine.Machine, old string, deadline time.Duration) bool {
	start := time.Now()

	ok := labtest.Eventually(t, deadline, fmt.Sprintf("%s: provisioned again and connected", m.Name), func() error {
		l, err := o.link(t.Context(), m.UUID)
		if err != nil {
			return err
		}

		if old != "" && l.NodePublicKey == old {
			return errors.New("its Link still has the key it had")
		}

		if !l.Connected {
			return errors.New("its Link is not connected")
		}

		return nil
	})
	if !ok {
		return false
	}

	st, ok := o.waitComplete(t, m, deadline-time.Since(start))
	if ok {
		assertMachineStatus(t, m, st)
	}

	return ok
}

// assertMachineStatus checks what Omni shows of a lab machine against the machine.
func assertMachineStatus(t testing.TB, m *machine.Machine, st *machineStatus) {
	t.Helper()

	s := st.Spec

	assert.True(t, s.Connected, "%s connected", m.Name)
	assert.True(t, s.Maintenance, "%s in maintenance", m.Name)
	assert.True(t, s.Schematic.InAgentMode, "%s: schematic.inagentmode", m.Name)
	assert.Equal(t, agentTalosVersion, s.TalosVersion, m.Name)
	assert.Equal(t, "metal", s.PlatformMetadata.Platform, m.Name)

	cores := 0
	for _, p := range s.Hardware.Processors {
		cores += p.CoreCount
	}

	assert.Equal(t, 2, cores, "%s: processors %+v", m.Name, s.Hardware.Processors)

	mem := 0
	for _, mm := range s.Hardware.MemoryModules {
		mem += mm.SizeMB
	}

	assert.Equal(t, 1024, mem, "%s: memory %+v", m.Name, s.Hardware.MemoryModules)

	vda := slices.IndexFunc(s.Hardware.BlockDevices, func(d struct {
		LinuxName string `json:"linuxname"`
		Size      uint64 `json:"size"`
	},
	) bool {
		return d.LinuxName == "/dev/vda"
	})
	if assert.GreaterOrEqual(t, vda, 0, "%s: /dev/vda in %+v", m.Name, s.Hardware.BlockDevices) {
		assert.Equal(t, uint64(8<<30), s.Hardware.BlockDevices[vda].Size, "%s: the size of /dev/vda", m.Name)
	}

	var macs []string
	for _, l := range s.Network.NetworkLinks {
		macs = append(macs, strings.ToLower(l.HardwareAddress))
	}

	assert.Contains(t, macs, strings.ToLower(m.MAC), "%s: its NIC", m.Name)
	assert.NotEmpty(t, lanIPv4(s.Network.Addresses), "%s: an address from the site DHCP in %v", m.Name, s.Network.Addresses)
	assert.Contains(t, s.Network.DefaultGateways, labnet.SiteAddr, "%s: the site's gateway", m.Name)

	assert.Equal(t, "amd64", st.Labels["omni.sidero.dev/arch"], m.Name)
	assert.EqualValues(t, 2, st.Labels["omni.sidero.dev/cores"], m.Name)
	assert.Equal(t, "1GiB", st.Labels["omni.sidero.dev/mem"], m.Name)
	assert.Equal(t, "8GB", st.Labels["omni.sidero.dev/storage"], m.Name)
	assert.Equal(t, "1Gbps", st.Labels["omni.sidero.dev/net"], m.Name)

	for _, l := range []string{"reporting-events", "ready-to-use"} {
		assert.Contains(t, st.Labels, "omni.sidero.dev/"+l, m.Name)
	}
}

// lanIPv4 is the machine's address on the lab network (the site DHCP's range), bare.
func lanIPv4(addrs []string) string {
	for _, a := range addrs {
		ip, _, err := net.ParseCIDR(a)
		if err == nil && ip.To4() != nil && strings.HasPrefix(ip.String(), "10.77.0.") {
			return ip.String()
		}
	}

	return ""
}

// assertTalosctl reads SystemInformation, Disks and LinkStatuses with talosctl, in
// insecure (maintenance) mode, from Omni's namespace over SideroLink.
func assertTalosctl(t testing.TB, talosctl, ns string, m *machine.Machine, addr string) {
	t.Helper()

	home := t.TempDir() // talosctl writes nothing of ours; give it a $HOME to write into.

	for _, typ := range []string{"systeminformation", "disks", "linkstatuses"} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)

		cmd := netns.Command(ctx, ns, talosctl, "get", typ, "--insecure", "--nodes", addr, "-o", "json")
		cmd.Env = append(os.Environ(), "HOME="+home)

		var stdout, stderr bytes.Buffer

		cmd.Stdout, cmd.Stderr = &stdout, &stderr

		err := cmd.Run()

		cancel()

		if !assert.NoError(t, err, "%s: talosctl get %s: %s", m.Name, typ, stderr.String()) {
			continue
		}

		var ids []string

		dec := json.NewDecoder(&stdout)

		for {
			var r struct {
				Metadata struct {
					ID string `json:"id"`
				} `json:"metadata"`
				Spec map[string]any `json:"spec"`
			}

			if err := dec.Decode(&r); err != nil {
				assert.ErrorIs(t, err, io.EOF, "%s: talosctl get %s -o json", m.Name, typ)

				break
			}

			ids = append(ids, r.Metadata.ID)

			switch typ {
			case "systeminformation":
				assert.Equal(t, m.UUID, r.Spec["uuid"], "%s: talosctl's SystemInformation", m.Name)
			case "linkstatuses":
				if r.Metadata.ID == "eth0" {
					assert.Equal(t, strings.ToLower(m.MAC), r.Spec["hardwareAddr"], "%s: talosctl's eth0", m.Name)
				}
			}
		}

		want := map[string]string{"systeminformation": "systeminformation", "disks": "vda", "linkstatuses": "eth0"}[typ]
		assert.Contains(t, ids, want, "%s: talosctl get %s", m.Name, typ)
	}
}

// assertMachinery reads the same through the Talos machinery client (COSI over the
// maintenance API), dialing from Omni's namespace.
func assertMachinery(t testing.TB, ns string, m *machine.Machine, addr string) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	c, err := client.New(ctx,
		client.WithEndpoints(net.JoinHostPort(addr, maintenancePort)),
		// Maintenance mode: a self-signed certificate, no client certificate.
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}),
		client.WithGRPCDialOptions(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return omnilab.Dialer(ns)(ctx, "tcp", addr)
		})),
	)
	if !assert.NoError(t, err, "%s: the machinery client", m.Name) {
		return
	}

	defer c.Close()

	system, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if assert.NoError(t, err, "%s: SystemInformation", m.Name) {
		assert.Equal(t, m.UUID, system.TypedSpec().UUID, m.Name)
	}

	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if assert.NoError(t, err, "%s: Disks", m.Name) {
		vda, ok := disks.Find(func(d *block.Disk) bool { return d.Metadata().ID() == "vda" })
		if assert.True(t, ok, "%s: vda among the disks", m.Name) {
			assert.Equal(t, uint64(8<<30), vda.TypedSpec().Size, m.Name)
		}
	}

	links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if assert.NoError(t, err, "%s: LinkStatuses", m.Name) {
		eth0, ok := links.Find(func(l *network.LinkStatus) bool { return l.Metadata().ID() == "eth0" })
		if assert.True(t, ok, "%s: eth0 among the links", m.Name) {
			assert.Equal(t, strings.ToLower(m.MAC), strings.ToLower(net.HardwareAddr(eth0.TypedSpec().HardwareAddr).String()), m.Name)
		}
	}

	// No system disk in maintenance: NotFound, as Talos answers and Omni expects.
	_, err = safe.StateGetByID[*block.SystemDisk](ctx, c.COSI, block.SystemDiskID)
	assert.True(t, state.IsNotFoundError(err), "%s: SystemDisk: %v", m.Name, err)
}

// assertRefused checks that nothing answers on port 50000 on the machine's lab address:
// the maintenance API is on SideroLink only.
func assertRefused(t testing.TB, ns string, m *machine.Machine, addrs []string) {
	t.Helper()

	ip := lanIPv4(addrs)
	if !assert.NotEmpty(t, ip, "%s: its lab address", m.Name) {
		return
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	conn, err := omnilab.Dialer(ns)(ctx, "tcp", net.JoinHostPort(ip, maintenancePort))
	if err == nil {
		conn.Close()
	}

	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "%s: port %s on its lab address %s", m.Name, maintenancePort, ip)
}

// blockWireGuard drops the WireGuard traffic between Omni and ip in Omni's namespace;
// the function it returns lifts the block (once; later calls do nothing).
func blockWireGuard(t testing.TB, ns, ip string) func() {
	t.Helper()

	return labtest.NFT(t, ns, "anvil-e2e-block-"+strings.ReplaceAll(ip, ".", "-"), fmt.Sprintf(
		"\tchain input { type filter hook input priority 0; ip saddr %[1]s udp dport %[2]d drop; }\n"+
			"\tchain output { type filter hook output priority 0; ip daddr %[1]s udp sport %[2]d drop; }",
		ip, omnilab.WireGuardPort))
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[… %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}

	return strings.Join(lines, "\n")
}
