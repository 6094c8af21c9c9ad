package fleetsim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/resourcewire"
)

func TestIdentityDeterministicAndDistinct(t *testing.T) {
	t.Parallel()

	require.Equal(t, identityOf(1, 7), identityOf(1, 7), "the same seed and index give the same machine")
	require.NotEqual(t, identityOf(1, 7).UUID, identityOf(2, 7).UUID, "another seed, another fleet")

	uuids, macs := map[string]bool{}, map[string]bool{}

	for i := range 2000 {
		id := identityOf(1, i)
		require.False(t, uuids[id.UUID], "UUID %s repeated", id.UUID)
		uuids[id.UUID] = true

		require.Len(t, id.UUID, 36)
		require.Equal(t, byte('4'), id.UUID[14], "version 4 form")
		require.GreaterOrEqual(t, len(id.MACs), 2)
		require.LessOrEqual(t, len(id.MACs), 4)
		require.NotEmpty(t, id.Disks)
		require.LessOrEqual(t, len(id.Disks), 8)

		for _, mac := range id.MACs {
			require.Equal(t, byte(0x02), mac[0], "locally administered")
			require.False(t, macs[mac.String()], "MAC %s repeated", mac)
			macs[mac.String()] = true
		}
	}
}

func TestReadScript(t *testing.T) {
	t.Parallel()

	agent := "#!ipxe\nimgfree\nkernel http://p/assets/agent/vmlinuz-amd64 initrd=initramfs-amd64.xz console=ttyS0 " +
		"anvil.provider=127.0.0.1:50042 anvil.ca=" + strings.Repeat("ab", 32) + " anvil.machine=m1 anvil.token=v1.tok\n" +
		"initrd http://p/assets/agent/initramfs-amd64.xz\nboot\n"

	for _, tc := range []struct {
		name     string
		status   int
		body     string
		decision string
		token    string
	}{
		{"agent", http.StatusOK, agent, decisionAgent, "v1.tok"},
		{"agent without a usable provider", http.StatusOK, strings.Replace(agent, "127.0.0.1:50042", "nohostport", 1), decisionRetry, ""},
		{"talos", http.StatusOK, "#!ipxe\nimgfree\nkernel http://f/image/abc/v1.10.0/kernel-amd64 initrd=initramfs-amd64.xz talos.platform=metal " +
			"talos.config=http://127.0.0.1:50042/metadata/m1?token=v1.tok talos.events.sink=127.0.0.1:50042\n" +
			"initrd http://f/image/abc/v1.10.0/initramfs-amd64.xz\nboot\n", decisionTalos, ""},
		{"talos not ready", http.StatusOK, "#!ipxe\necho Anvil: the Talos boot assets are not ready (404); retrying in 10 s\nsleep 10\nchain http://p/ipxe/start.ipxe\n", decisionRetry, ""},
		{"disk by exit", http.StatusOK, "#!ipxe\necho Anvil: booting from disk\nexit 1\n", decisionDisk, ""},
		{"disk by sanboot", http.StatusOK, "#!ipxe\nsanboot --no-describe --drive 0x80 || exit 1\n", decisionDisk, ""},
		{"disk by 404", http.StatusNotFound, "boot from disk\n", decisionDisk, ""},
		{"no assets yet", http.StatusOK, "#!ipxe\necho no agent\nsleep 30\nchain http://p/ipxe/start.ipxe\n", decisionRetry, ""},
		{"server error", http.StatusInternalServerError, "oops", decisionRetry, ""},
		{"not a script", http.StatusOK, "<html>", decisionRetry, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			decision, cfg, kernel := readScript(tc.status, tc.body)
			require.Equal(t, tc.decision, decision)
			require.Equal(t, tc.token, cfg.Token)

			if tc.decision == decisionTalos {
				require.Equal(t, "http://f/image/abc/v1.10.0/kernel-amd64", kernel, "what -talos-chain fetches")
			}

			if tc.decision == decisionAgent {
				require.Equal(t, "m1", cfg.MachineID)
				require.Equal(t, "127.0.0.1:50042", cfg.Provider)
			}
		})
	}
}

func TestInventoryFromFixtures(t *testing.T) {
	t.Parallel()

	profiles, err := LoadProfiles("")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(profiles), 3, "go-smbios has several fixtures")

	id := identityOf(1, 3)

	encoded, err := encodeInventory(id, profiles[0])
	require.NoError(t, err)

	decoded, err := resourcewire.Decode(encoded)
	require.NoError(t, err)

	var disks, links, systems int

	for _, r := range decoded {
		switch r := r.(type) {
		case *hardware.SystemInformation:
			systems++

			require.Equal(t, id.UUID, r.TypedSpec().UUID)
			require.Equal(t, id.Serial, r.TypedSpec().SerialNumber)
		case *block.Disk:
			disks++
		case *network.LinkStatus:
			links++

			require.True(t, r.TypedSpec().Physical())
		}
	}

	require.Equal(t, 1, systems)
	require.Len(t, id.Disks, disks)
	require.Len(t, id.MACs, links)
}

func TestControlAndPowerAPIRefuseUnknown(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer

	f := &Fleet{cfg: Config{Machines: 1}, events: newEvents(&out), byID: map[string]*machine{}}
	m := &machine{fleet: f, id: identityOf(1, 0), signals: make(chan signal, 1), state: stateAgent, logger: zap.NewNop()}
	f.machines = []*machine{m}
	f.byID[m.id.UUID] = m

	require.Error(t, f.Control("explode #0"))
	require.Error(t, f.Control("cut #5"))
	require.NoError(t, f.Control("cut #0"))
	require.Error(t, f.Control("cut "+m.id.UUID), "the machine has not taken the last one yet")

	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/machines/nope/power")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	resp, err = http.Post(srv.URL+"/machines/"+m.id.UUID+"/power", "application/json", strings.NewReader(`{"action":"explode"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, err = http.Get(srv.URL + "/status")
	require.NoError(t, err)

	var st FleetStatus
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Equal(t, 1, st.Machines)
	require.Equal(t, 1, st.States[stateAgent])

	f.events.flush()
	require.Contains(t, out.String(), `"event":"control"`)
}
