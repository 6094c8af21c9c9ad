//go:build lab

package siderolink

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	pb "github.com/siderolabs/siderolink/api/siderolink"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/anvil-metal/anvil/internal/initsys"
	"github.com/anvil-metal/anvil/internal/modules"
)

const (
	// labVMEnv marks the test binary running as init in the machine; the kernel passes
	// its dotless cmdline parameters to init as environment variables.
	labVMEnv = "ANVIL_SIDEROLINK_VM"
	// labVMResult starts the line the machine prints its result on.
	labVMResult = "SIDEROLINK-KERNEL-RESULT"
)

// TestLabKernelWireGuardQEMU proves the kernel path, which this host cannot (it has no
// WireGuard module): it boots the Debian kernel the agent ships with, with this test
// binary as init and the wireguard module closure the imager picks. Inside, the node joins
// a wireguard-go Omni (over a netstack, on the machine's loopback) through kernel WireGuard
// configured by wgctrl, and traffic goes both ways.
func TestLabKernelWireGuardQEMU(t *testing.T) {
	if os.Getenv(labVMEnv) != "" {
		labVM(t)

		return
	}

	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("needs qemu-system-x86_64 (make setup installs qemu-system-x86)")
	}

	if m, _ := filepath.Glob("/lib/modules/*/kernel/drivers/net/wireguard/wireguard.ko*"); len(m) == 0 {
		t.Skip("needs a Debian kernel with its modules (make setup installs linux-image-amd64)")
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "siderolink.test")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	build := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "lab", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")

	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the test binary: %s", out)

	assets := filepath.Join(dir, "assets")
	imager := exec.CommandContext(ctx, "go", "run", "github.com/anvil-metal/anvil/imager/cmd/imager",
		"--agent", bin, "--modules", "wireguard", "--firmware-dir", t.TempDir(), "--out", assets, "--zstd-level", "1")

	out, err = imager.CombinedOutput()
	require.NoError(t, err, "building the boot assets: %s", out)

	serial := filepath.Join(dir, "serial.log")

	// TCG, as the other QEMU lab tests: KVM nested in this host's VM hangs at boot.
	vm := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-machine", "q35", "-cpu", "max", "-m", "512", "-smp", "2",
		"-display", "none", "-no-reboot", "-serial", "file:"+serial, "-device", "virtio-rng-pci",
		"-kernel", filepath.Join(assets, "vmlinuz-amd64"), "-initrd", filepath.Join(assets, "initramfs-amd64.zst"),
		// no_timer_check: under TCG on a loaded host the IO-APIC timer check can fail.
		"-append", "console=ttyS0 panic=-1 no_timer_check "+labVMEnv+"=1 -- -test.run=^TestLabKernelWireGuardQEMU$ -test.v",
	)

	vmOut, err := vm.CombinedOutput()

	log, _ := os.ReadFile(serial)
	require.NoError(t, err, "qemu: %s\nserial:\n%s", vmOut, log)

	var result string

	for l := range strings.SplitSeq(string(log), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(l), labVMResult+" "); ok {
			result = r
		}
	}

	require.Equal(t, "PASS kind=wireguard", result, "the machine's serial log:\n%s", log)
}

// labVM is the machine's side, as its init: mount, load WireGuard, bring up lo, then the
// node joins Omni over kernel WireGuard and the two talk. It prints its result, then
// powers the machine off.
func labVM(t *testing.T) {
	kind := "none"

	defer func() {
		result := "FAIL"
		if !t.Failed() {
			result = "PASS"
		}

		fmt.Printf("\n%s %s kind=%s\n", labVMResult, result, kind)
		_ = initsys.PowerOff()
	}()

	logger, err := zap.NewDevelopment()
	require.NoError(t, err)

	require.NoError(t, initsys.MountAll(logger, "/", initsys.Mounts))

	dir, err := modules.DefaultDir()
	require.NoError(t, err)

	ix, err := modules.Open(dir)
	require.NoError(t, err)

	loaded, err := modules.Load(t.Context(), modules.Options{Index: ix, Always: []string{"wireguard"}, Logger: logger})
	require.NoError(t, err)
	require.Empty(t, loaded.Failed)

	rt, err := rtnetlink.Dial(nil)
	require.NoError(t, err)

	lo, err := linkIndex(rt, "lo")
	require.NoError(t, err)
	require.NoError(t, setUp(rt, lo))
	rt.Close()

	omni := newFakeOmniPeer(t)
	defer omni.dev.Close()

	api := startProvision(t, &fakeProvision{answer: func(_ int, req *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
		return omni.admit(req)
	}})

	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan netip.Addr, 4)
	done := make(chan error, 1)

	go func() {
		done <- Run(ctx, Options{
			API: api, Insecure: true, JoinToken: "v2:vm", UUID: "vm", UniqueToken: `{"Fingerprint":"vm","Token":"vm"}`, TalosVersion: "v1.13.9",
			OnAddress: func(a netip.Addr) { addrs <- a }, Logger: logger,
		})
	}()

	require.Equal(t, nodeAddr.Addr(), recv(t, addrs, "the node's address"))

	kind = linkKind(t, DefaultLinkName)

	// The node, through the kernel's link, to Omni's netstack.
	lis, err := omni.net.ListenTCPAddrPort(netip.AddrPortFrom(omniAddr, labLogPort))
	require.NoError(t, err)

	defer lis.Close()

	var c net.Conn

	require.Eventually(t, func() bool {
		c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", netip.AddrPortFrom(omniAddr, labLogPort).String())

		return err == nil
	}, time.Minute, 100*time.Millisecond, "Omni unreachable through kernel WireGuard")

	_, err = fmt.Fprintln(c, "hello over kernel WireGuard")
	require.NoError(t, err)
	c.Close()

	in, err := lis.Accept()
	require.NoError(t, err)

	buf := make([]byte, 64)
	n, err := in.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hello over kernel WireGuard\n", string(buf[:n]))
	require.Equal(t, nodeAddr.Addr().String(), netip.MustParseAddrPort(in.RemoteAddr().String()).Addr().String())
	in.Close()

	// Omni to the node's port 50000, a kernel socket on the SideroLink address.
	maint, err := (&net.ListenConfig{}).Listen(ctx, "tcp", netip.AddrPortFrom(nodeAddr.Addr(), 50000).String())
	require.NoError(t, err)

	go func() {
		if c, err := maint.Accept(); err == nil {
			_, _ = fmt.Fprintln(c, "maintenance here")
			c.Close()
		}
	}()

	back, err := omni.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(nodeAddr.Addr(), 50000))
	require.NoError(t, err)

	n, err = back.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "maintenance here\n", string(buf[:n]))
	back.Close()
	maint.Close()

	// The handshake shows through wgctrl, where Run watches it.
	wg, err := wgctrl.New()
	require.NoError(t, err)

	dev, err := wg.Device(DefaultLinkName)
	require.NoError(t, err)
	wg.Close()

	require.Len(t, dev.Peers, 1)
	require.False(t, dev.Peers[0].LastHandshakeTime.IsZero())
	require.Equal(t, Keepalive, dev.Peers[0].PersistentKeepaliveInterval)

	cancel()
	require.NoError(t, <-done)

	_, err = net.InterfaceByName(DefaultLinkName)
	require.Error(t, err, "the link is removed")
}
