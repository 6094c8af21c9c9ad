package labnet

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	t.Parallel()

	n := New("anvil")
	replicas := []string{"anvil-r0", "anvil-r1", "anvil-r2"}
	assert.Equal(t, &Net{ProviderNS: "anvil-lab", SiteNS: "anvil-site", OmniNS: "anvil-omni", ReplicaNS: replicas}, n)
	assert.Equal(t, append([]string{"anvil-lab", "anvil-site", "anvil-omni"}, replicas...), n.Namespaces())

	// A lab without Omni or replicas, as its state names it.
	assert.Equal(t, []string{"anvil-lab", "anvil-site"}, (&Net{ProviderNS: "anvil-lab", SiteNS: "anvil-site"}).Namespaces())
}

func TestDHCPCommand(t *testing.T) {
	t.Parallel()

	cmd := New("anvil").DHCPCommand(t.Context(), "/lab", SiteDHCP)

	assert.Equal(t, []string{"ip", "netns", "exec", "anvil-site", "dnsmasq"}, cmd.Args[:5], "dnsmasq in the site's namespace")
	assert.Contains(t, cmd.Args, "--interface=veth0")
	assert.Contains(t, cmd.Args, "--dhcp-range=10.77.0.100,10.77.0.200,255.255.255.0,1h")
	assert.Contains(t, cmd.Args, "--dhcp-range=::,constructor:veth0,ra-only,64", "router advertisements, without which iPXE waits for IPv6")
	assert.Contains(t, cmd.Args, "--dhcp-hostsdir=/lab/dhcp-hosts")
	assert.Contains(t, cmd.Args, "--port=0")

	// A site without a DHCP server (the provider's full DHCP mode): its router only.
	ra := New("anvil").DHCPCommand(t.Context(), "/lab", SiteRouter)
	assert.Contains(t, ra.Args, "--dhcp-range=::,constructor:veth0,ra-only,64")

	// An IPv6-only site: advertisements that send hosts to DHCPv6, which dnsmasq leaves
	// to the provider.
	v6 := New("anvil").DHCPCommand(t.Context(), "/lab", SiteIPv6)
	assert.Contains(t, v6.Args, "--dhcp-range=::1000,::1fff,constructor:veth0,slaac,64,1h")
	assert.Contains(t, v6.Args, "--dhcp-ignore=tag:!known")

	for _, cmd := range []*exec.Cmd{ra, v6} {
		for _, arg := range cmd.Args {
			assert.NotContains(t, arg, "10.77.0.", "no IPv4 addresses handed out")
		}
	}
}

func TestReserveAddress(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	require.NoError(t, PrepareDHCP(dir))
	require.NoError(t, ReserveAddress(dir, "52:54:00:aa:bb:cc", "10.77.0.100"))

	b, err := os.ReadFile(filepath.Join(dir, "dhcp-hosts", "52-54-00-aa-bb-cc"))
	require.NoError(t, err)
	assert.Equal(t, "52:54:00:aa:bb:cc,10.77.0.100\n", string(b))

	assert.Error(t, ReserveAddress(filepath.Join(dir, "missing"), "52:54:00:aa:bb:cc", "10.77.0.100"))
}
