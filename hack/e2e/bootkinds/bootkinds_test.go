//go:build lab

// Package bootkinds boots the lab's machine kinds beyond the three firmware paths of
// the end-to-end flow. TestLabBootKinds, on a lab whose site has no DHCP server (the
// provider's full DHCP mode): a machine whose firmware is set to UEFI HTTP boot, and a
// machine with two ports that boots from its second; the two-port machine then boots
// from its other port, after a provider restart, and is still the same machine with the
// same address. TestLabBootKindsIPv6, on an IPv6-only provisioning network: the
// firmware's own PXE over IPv6 and an iPXE ROM, each from Anvil's DHCPv6 answer. Each
// boots through real firmware to a registered agent. make e2e runs the whole flow on
// every kind (TestE2E with ANVIL_E2E_FIRMWARE, ANVIL_E2E_NICS, ANVIL_E2E_FULL_DHCP,
// ANVIL_E2E_IPV6). TestLabBootKindsARM64: an arm64 machine boots the UKI Anvil builds for
// it by UEFI HTTP boot.
package bootkinds

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// stepDeadline is generous: under TCG power-on to the agent is ~20–50 s, and the
// machines share two cores with whatever else runs.
const stepDeadline = 5 * time.Minute

// leaseRe is the agent's log line of a DHCPv4 lease on a link.
var leaseRe = regexp.MustCompile(`DHCPv4 lease \{"link": "(\w+)", "address": "([0-9./]+)".*"server": "([0-9.]+)"`)

// binaries builds the provider and anvilctl, and finds the agent's boot assets.
func binaries(t testing.TB) (provider, anvilctl, agent string) {
	bin := t.TempDir()
	provider, anvilctl = commands(t, bin)

	return provider, anvilctl, labtest.AgentAssets(t, labtest.RepoRoot(t), bin)
}

// commands builds the provider and anvilctl into bin.
func commands(t testing.TB, bin string) (provider, anvilctl string) {
	root := labtest.RepoRoot(t)
	provider, anvilctl = filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl")

	labtest.GoBuild(t, root, provider, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctl, "./provider/cmd/anvilctl")

	return provider, anvilctl
}

// labConfig is a lab at dir and prefix of two machines of the kinds given, no power
// owner, no factory.
func labConfig(dir, prefix, provider, agent string, firmware ...machine.Firmware) lab.Config {
	return lab.Config{
		Dir: dir, Prefix: prefix, Machines: len(firmware), Firmware: firmware,
		ProviderBin: provider, AgentAssetsDir: agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort: 50042,
	}
}

func TestLabBootKinds(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	provider, anvilctl, agent := binaries(t)
	dir, prefix := labtest.NewLab(t, "anvk", nil)

	cfg := labConfig(dir, prefix, provider, agent, machine.UEFIHTTP, machine.BIOS)
	cfg.NICs = []int{1, 2}
	cfg.FullDHCP = true

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	machines := state.MachineList()
	require.Len(t, machines, 2)

	httpBoot, twoPorts := machines[0], machines[1]
	require.Equal(t, machine.UEFIHTTP, httpBoot.Firmware)
	require.Len(t, twoPorts.MACs, 2)

	for _, m := range machines {
		registered(t, ctl, m, m.MAC)
	}

	if t.Failed() {
		return
	}

	// The UEFI HTTP boot machine booted by HTTP boot alone, from the URL Anvil's DHCP
	// answer gave it.
	serial := readSerial(t, httpBoot)
	assert.Contains(t, serial, "Start HTTP Boot over IPv4", "the firmware's HTTP boot")
	assert.Contains(t, serial, "URI: http://"+labnet.ProviderAddr+":50042/boot/snponly.efi", "the boot URI from Anvil's answer")
	assert.NotContains(t, serial, "Start PXE over IPv4", "PXE is off on this machine")

	// Every address came from the provider: the site has no DHCP server.
	for _, m := range machines {
		got := leases(readSerial(t, m))
		assert.Len(t, got, m.NICs, "%s: a lease on each port", m.Name)

		for _, l := range got {
			assert.Equal(t, labnet.ProviderAddr, l.server, "%s: %s's lease", m.Name, l.link)
		}
	}

	// The two-port machine: both ports up with an address, reported in its inventory.
	yaml, err := ctl("get", "machine", twoPorts.UUID, "-o", "yaml")
	require.NoError(t, err, yaml)

	for _, mac := range twoPorts.MACs {
		assert.Regexp(t, regexp.MustCompile(`mac: '?`+mac+`'?\n(?:\s+\w+:.*\n)*?\s+addresses:\n\s+- 10\.77\.0\.`), yaml,
			"%s: port %s is reported, with its address", twoPorts.Name, mac)
	}

	before := leases(readSerial(t, twoPorts))
	require.Len(t, before, 2, "%s: a lease on each port", twoPorts.Name)

	// A restart of the provider keeps the leases; the machine boots from its first port
	// now, and is the same machine.
	require.NoError(t, twoPorts.Stop(t.Context()))
	require.NoError(t, state.RestartProvider(t.Context(), cfg))

	first := 0
	twoPorts.BootNIC = &first

	// The serial log is appended to across boots: only this boot's lines count.
	st, err := os.Stat(twoPorts.SerialLog())
	require.NoError(t, err)

	mark := int(st.Size())

	require.NoError(t, twoPorts.Start(t.Context()))
	registeredAgain(t, ctl, twoPorts, twoPorts.MACs[0], mark)

	after := leases(readSerialFrom(t, twoPorts, mark))
	assert.ElementsMatch(t, before, after, "%s: the same addresses after the provider's restart", twoPorts.Name)

	out, err := ctl("get", "machines")
	require.NoError(t, err, out)
	assert.Equal(t, 1, strings.Count(out, twoPorts.UUID), "one machine, whichever port it boots from:\n%s", out)
	assert.Len(t, labtest.NonEmptyLines(out), 3, "two machines:\n%s", out)
}

// TestLabBootKindsARM64: an arm64 server set to UEFI HTTP boot (AAVMF, under TCG) gets
// from Anvil's ProxyDHCP the URL of a Unified Kernel Image built for it, boots the
// agent from it with no iPXE, and registers with its arm64 inventory.
func TestLabBootKindsARM64(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireARM64Host(t)

	provider, anvilctl := commands(t, t.TempDir())
	agent := labtest.ARM64AgentAssets(t, labtest.RepoRoot(t))
	dir, prefix := labtest.NewLab(t, "anva", nil)

	state, err := lab.Up(t.Context(), labConfig(dir, prefix, provider, agent, machine.ARM64))
	require.NoError(t, err)

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	machines := state.MachineList()
	require.Len(t, machines, 1)

	m := machines[0]
	registered(t, ctl, m, m.MAC)

	if t.Failed() {
		return
	}

	serial := readSerial(t, m)
	assert.Contains(t, serial, "Start HTTP Boot over IPv4", "the firmware's HTTP boot")
	assert.Contains(t, serial, "URI: http://"+labnet.ProviderAddr+":50042/boot/uki/arm64/"+m.UUID+"/"+strings.ReplaceAll(m.MAC, ":", "-")+"/boot.efi",
		"the URI of the machine's own UKI, from Anvil's answer (the UUID it names is the machine's)")
	assert.NotContains(t, serial, "iPXE", "no iPXE on the way")
	assert.Contains(t, serial, "console=ttyAMA0", "the agent's kernel, on the arm64 console")

	yaml, err := ctl("get", "machine", m.UUID, "-o", "yaml")
	require.NoError(t, err, yaml)
	assert.True(t, labtest.HasField(yaml, "arch", "arm64"), "the arm64 inventory:\n%s", yaml)
}

// ipv6Addr is an address of the lab's IPv6 prefix, as the agent and iPXE print it.
var ipv6Addr = regexp.MustCompile(`fd77::[0-9a-f:]+`)

func TestLabBootKindsIPv6(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	provider, anvilctl, agent := binaries(t)
	dir, prefix := labtest.NewLab(t, "anv6", nil)

	// The firmware's own PXE over IPv6 (it TFTPs iPXE from a tftp://[…] URL), and a NIC's
	// iPXE ROM doing DHCPv6 itself.
	cfg := labConfig(dir, prefix, provider, agent, machine.UEFIPXE, machine.UEFI)
	cfg.IPv6Only = true

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(anvilctl, state.ControlSocket())
	machines := state.MachineList()
	require.Len(t, machines, 2)

	for _, m := range machines {
		registered(t, ctl, m, m.MAC)
	}

	if t.Failed() {
		return
	}

	pxe6, rom := readSerial(t, machines[0]), readSerial(t, machines[1])

	// The boot answers came from Anvil: the firmware's PXE over IPv6 got the TFTP URL of
	// iPXE, iPXE the script URL on the provider's IPv6 address.
	assert.Contains(t, pxe6, "Start PXE over IPv6", "the firmware's own IPv6 PXE")
	assert.Contains(t, pxe6, "NBP filename is snponly.efi")
	assert.NotContains(t, pxe6, "Start PXE over IPv4", "PXEv4 is off on an IPv6-only network")

	for _, serial := range []string{pxe6, rom} {
		assert.Contains(t, serial, "Filename: http://[fd77::1]:50042/ipxe/start.ipxe", "iPXE's boot URL from Anvil's DHCPv6")
		assert.Contains(t, serial, `session registered with the provider {"provider": "[fd77::1]:50042"`, "the agent over IPv6")
	}

	// The site's dnsmasq only advertised the router: it answered no DHCPv6 client.
	site, err := os.ReadFile(state.DHCPLog())
	require.NoError(t, err)
	assert.NotRegexp(t, `DHCP(ADVERTISE|REPLY)`, string(site), "the site's dnsmasq answered a DHCPv6 client")

	// Each agent reports an address of the lab's prefix, and no IPv4 one.
	for _, m := range machines {
		yaml, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		require.NoError(t, err, yaml)
		assert.Regexp(t, ipv6Addr, yaml, "%s: an IPv6 address of the lab's prefix", m.Name)
		assert.NotContains(t, yaml, "- 10.77.0.", "%s: no IPv4 address on an IPv6-only network", m.Name)
	}
}

// registered waits for m's agent to register with its inventory, booted from the port
// with bootMAC.
func registered(t testing.TB, ctl func(...string) (string, error), m *machine.Machine, bootMAC string) {
	var yaml string

	ok := assert.Eventually(t, func() bool {
		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		yaml = out

		return err == nil && strings.Contains(out, "name: vda") && strings.Contains(out, m.Serial)
	}, stepDeadline, time.Second, "%s (%s) did not register with its inventory", m.Name, m.Firmware)
	if !ok {
		return
	}

	assert.Contains(t, yaml, "uuid: "+m.UUID, m.Name)
	assert.Regexp(t, regexp.MustCompile(`macs:\n\s+- '?`+bootMAC), yaml, "%s: booted from %s", m.Name, bootMAC)
}

// registeredAgain waits for m's agent to register anew (a line after mark in its serial
// log), booted from the port with bootMAC.
func registeredAgain(t testing.TB, ctl func(...string) (string, error), m *machine.Machine, bootMAC string, mark int) {
	assert.Eventually(t, func() bool {
		b, _ := os.ReadFile(m.SerialLog())

		return len(b) > mark && strings.Contains(string(b[mark:]), `registered {"machine": "`+m.UUID)
	}, stepDeadline, time.Second, "%s did not register again", m.Name)

	registered(t, ctl, m, bootMAC)
}

type lease struct{ link, address, server string }

// leases are the agent's DHCPv4 leases in a serial log, the last one of each link.
func leases(serial string) []lease {
	last := map[string]lease{}

	for _, m := range leaseRe.FindAllStringSubmatch(serial, -1) {
		last[m[1]] = lease{link: m[1], address: m[2], server: m[3]}
	}

	out := make([]lease, 0, len(last))
	for _, l := range last {
		out = append(out, l)
	}

	return out
}

func readSerial(t testing.TB, m *machine.Machine) string { return readSerialFrom(t, m, 0) }

// readSerialFrom is m's serial log from byte offset on, without carriage returns.
func readSerialFrom(t testing.TB, m *machine.Machine, offset int) string {
	b, err := os.ReadFile(m.SerialLog())
	require.NoError(t, err, m.Name)
	require.GreaterOrEqual(t, len(b), offset, m.Name)

	return strings.ReplaceAll(string(b[offset:]), "\r", "")
}
