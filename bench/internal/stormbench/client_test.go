package stormbench

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScriptCommand(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		line, cmd, arg string
	}{
		{"#!ipxe", "", ""},
		{"", "", ""},
		{"chain http://a/ipxe/boot.ipxe?uuid=${uuid} || exit 1", "chain", "http://a/ipxe/boot.ipxe?uuid=${uuid}"},
		{"chain --replace --autofree http://f/pxe/x ||", "chain", "http://f/pxe/x"},
		{"kernel http://a/assets/agent/vmlinuz-amd64 initrd=initramfs-amd64.xz console=ttyS0", "kernel", "http://a/assets/agent/vmlinuz-amd64"},
		{"initrd http://a/assets/agent/initramfs-amd64.xz", "initrd", "http://a/assets/agent/initramfs-amd64.xz"},
		{"  boot", "boot", ""},
		{"imgfree", "imgfree", ""},
	} {
		cmd, arg := scriptCommand(tc.line)
		assert.Equal(t, tc.cmd, cmd, tc.line)
		assert.Equal(t, tc.arg, arg, tc.line)
	}
}

// TestRunScripts follows the provider's script shapes: the start script's chain with
// iPXE's settings expanded, then the agent script's kernel and initrd.
func TestRunScripts(t *testing.T) {
	t.Parallel()

	var (
		mu    sync.Mutex
		query string
	)

	kernel, initrd := strings.Repeat("k", 3000), strings.Repeat("i", 5000)

	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	mux.HandleFunc("/ipxe/start.ipxe", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "#!ipxe\nchain %s/ipxe/boot.ipxe?uuid=${uuid}&mac=${netX/mac:hexhyp}&arch=${buildarch}&platform=${platform} || exit 1\nexit 1\n", srv.URL)
	})
	mux.HandleFunc("/ipxe/boot.ipxe", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		query = r.URL.RawQuery
		mu.Unlock()

		fmt.Fprintf(w, "#!ipxe\nimgfree\nkernel %[1]s/k initrd=i console=ttyS0 anvil.token=x\ninitrd %[1]s/i\nboot\n", srv.URL)
	})
	mux.HandleFunc("/k", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(kernel)) })
	mux.HandleFunc("/i", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(initrd)) })
	mux.HandleFunc("/disk.ipxe", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("#!ipxe\necho booting from disk\nexit 1\n"))
	})

	m := newMachine(258, 3)

	var r MachineResult
	require.NoError(t, runScripts(t.Context(), m, srv.URL+"/ipxe/start.ipxe", &r))

	assert.Equal(t, int64(len(kernel)+len(initrd)), r.HTTPBytes)
	assert.Positive(t, r.Phase[PhaseScript])
	assert.Positive(t, r.Phase[PhaseAssets])

	mu.Lock()
	assert.Equal(t, "uuid=a5a5f00d-5e00-4000-8000-000000000102&mac=02-a5-5e-00-01-02&arch=i386&platform=pcbios", query)
	mu.Unlock()

	err := runScripts(t.Context(), m, srv.URL+"/disk.ipxe", &MachineResult{})
	require.ErrorContains(t, err, "to its disk")

	err = runScripts(t.Context(), m, srv.URL+"/missing", &MachineResult{})
	require.ErrorContains(t, err, "404")
}

func TestMachineIdentity(t *testing.T) {
	t.Parallel()

	macs := map[string]bool{}
	xids := map[dhcpv4.TransactionID]bool{}

	for i := range 3000 {
		m := newMachine(i, 31)
		assert.False(t, macs[m.MAC.String()], "MAC of machine %d repeats", i)
		macs[m.MAC.String()] = true

		for _, ipxe := range []bool{false, true} {
			for restart := range maxNAKs {
				x := m.xid(ipxe, restart)
				assert.False(t, xids[x], "transaction ID of machine %d repeats", i)
				xids[x] = true
			}
		}
	}

	// The same machine in another run: same MAC (the site's reservation), other xid.
	a, b := newMachine(7, 1), newMachine(7, 2)
	assert.Equal(t, a.MAC, b.MAC)
	assert.NotEqual(t, a.xid(false, 0), b.xid(false, 0))
}

func TestFirstBootItem(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		opt  []byte
		item []byte
		ok   bool
	}{
		{"anvil: discovery control only", []byte{6, 1, 8, 255}, nil, false},
		{
			"dnsmasq: control, prompt, servers, menu",
			[]byte{6, 1, 3, 10, 4, 0, 'P', 'X', 'E', 8, 7, 0x80, 0, 1, 10, 89, 0, 1, 9, 5, 0x80, 0, 2, 'h', 'i', 255},
			[]byte{0x80, 0, 0, 0}, true,
		},
		{"truncated", []byte{6, 5, 3}, nil, false},
		{"none", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			p, err := dhcpv4.New(dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, tc.opt))
			require.NoError(t, err)

			if tc.opt == nil {
				p.Options.Del(dhcpv4.OptionVendorSpecificInformation)
			}

			item, ok := firstBootItem(p)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.item, item)
		})
	}
}

func TestSummarise(t *testing.T) {
	t.Parallel()

	var ms []MachineResult

	for i := range 100 {
		m := MachineResult{Index: i, End: time.Duration(i+1) * time.Second, Retrans: 1, HTTPBytes: 10, TFTPBytes: 2}
		for p := range phases {
			m.Phase[p] = time.Duration(i+1) * time.Millisecond
		}

		ms = append(ms, m)
	}

	ms[3].Err, ms[4].Err, ms[5].Err = "x", "x", "y"

	s := summarise(ms)
	assert.Equal(t, 100*time.Second, s.Completion)
	assert.Equal(t, 3, s.Failures)
	assert.Equal(t, []string{"machine 3: x", "machine 5: y"}, s.Errors)
	assert.Equal(t, 100, s.Retrans)
	assert.Equal(t, int64(1000), s.HTTPBytes)
	assert.Equal(t, 100*time.Millisecond, s.Phases[PhaseAssets].Max)
	assert.Equal(t, 100*time.Millisecond, s.Phases[PhaseAssets].P99, "97 completed: the 99th percentile is the last")
	assert.Equal(t, 52*time.Millisecond, s.Phases[PhaseAssets].P50)

	assert.Equal(t, Storm{}, summarise(nil))
}

func TestParseWrkBytes(t *testing.T) {
	t.Parallel()

	ok := "Running 10s test @ http://x\n  50 requests in 10.00s, 4.50GB read\nRequests/sec:      5.00\nTransfer/sec:    460.80MB\n"

	v, err := parseWrkBytes(ok)
	require.NoError(t, err)
	assert.InDelta(t, 460.80*(1<<20), v, 1)

	v, err = parseWrkBytes("Transfer/sec:      1.10GB\n")
	require.NoError(t, err)
	assert.InDelta(t, 1.1*(1<<30), v, 1)

	for _, bad := range []string{
		ok + "  Non-2xx or 3xx responses: 3\n",
		ok + "  Socket errors: connect 0, read 1, write 0, timeout 0\n",
		"Requests/sec: 5\n",
	} {
		_, err := parseWrkBytes(bad)
		assert.Error(t, err, bad)
	}
}

func TestUDPInodes(t *testing.T) {
	t.Parallel()

	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	raw, err := conn.SyscallConn()
	require.NoError(t, err)

	var fd uintptr

	require.NoError(t, raw.Control(func(f uintptr) { fd = f }))

	self, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	require.NoError(t, err)

	inodes, err := udpInodes(os.Getpid(), conn.LocalAddr().(*net.UDPAddr).Port)
	require.NoError(t, err)
	assert.True(t, inodes[self], "%s among %v", self, inodes)
}

// TestSiteReservations: machine i's reservation is the i-th address of the lease range,
// by the MAC the client gives machine i.
func TestSiteReservations(t *testing.T) {
	t.Parallel()

	g := &segment{leases: netip.MustParsePrefix("10.89.128.0/17")}

	lines := strings.Split(strings.TrimSpace(string(siteReservations(g, 300))), "\n")
	require.Len(t, lines, 300)
	assert.Equal(t, newMachine(0, 5).MAC.String()+",10.89.128.1", lines[0])
	assert.Equal(t, newMachine(299, 9).MAC.String()+",10.89.129.44", lines[299])
}
