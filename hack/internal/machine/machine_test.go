package machine_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/machine"
)

func TestIdentityIsStable(t *testing.T) {
	t.Parallel()

	spec := machine.Spec{Name: "bios-0", Index: 0, Seed: "anvil"}
	a, b := machine.New(spec), machine.New(spec)

	assert.Equal(t, a.UUID, b.UUID)
	assert.Equal(t, a.MAC, b.MAC)
	assert.Equal(t, a.Serial, b.Serial)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), a.UUID)
	assert.Regexp(t, regexp.MustCompile(`^52:54:00(:[0-9a-f]{2}){3}$`), a.MAC)

	other := machine.New(machine.Spec{Name: "bios-0", Index: 0, Seed: "anvt1"})
	assert.NotEqual(t, a.UUID, other.UUID, "another lab's machines are other machines")
	assert.NotEqual(t, a.MAC, other.MAC)

	assert.NotEqual(t, a.Vendor, machine.New(machine.Spec{Name: "uefi-1", Index: 1, Seed: "anvil"}).Vendor)
}

func TestArgs(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		firmware      machine.Firmware
		kvm           bool
		want, wantNot []string
	}{
		{machine.BIOS, false, []string{"-accel tcg", "-cpu max", "-device sga", "bootindex=1", "bootindex=2"}, []string{"pflash", "romfile=", "fw_cfg"}},
		{machine.UEFI, false, []string{"if=pflash,format=raw,unit=0,readonly=on,file=" + machine.OVMFCode, "OVMF_VARS.fd", "IPv6Support,string=no", "IPv4PXESupport,string=no"}, []string{"romfile=", "sga"}},
		{machine.UEFIPXE, true, []string{"-accel kvm", "romfile=", "pflash", "IPv6Support,string=no"}, []string{"tcg", "IPv4PXESupport"}},
		{machine.UEFIHTTP, false, []string{"romfile=,bootindex=1", "pflash", "IPv6Support,string=no", "IPv4PXESupport,string=no"}, []string{"sga"}},
		// KVM is for x86 on an x86 host: an arm64 machine is emulated whatever it says.
		{machine.ARM64, true, []string{"-accel tcg", "-cpu cortex-a72", "file=" + machine.AAVMFCode, "OVMF_VARS.fd", "romfile=,bootindex=1", "virtio-rng-pci", "IPv4PXESupport,string=no", "IPv6PXESupport,string=no", "IPv6Support,string=no"}, []string{"kvm", "sga", "-vga", "q35", machine.OVMFCode}},
	} {
		m := machine.New(machine.Spec{Name: string(tc.firmware), Seed: "t", Firmware: tc.firmware, KVM: tc.kvm, Dir: "/lab/m", Tap: "tap0", NetNS: "t-lab"})
		args := strings.Join(m.Args(), " ")

		machineType := "-machine q35"
		if tc.firmware == machine.ARM64 {
			machineType = "-machine virt"
		}

		for _, w := range append(tc.want, machineType, "-m 1024", "-smp 2", "ifname=tap0", "qmp.sock", "serial.log", "uuid="+m.UUID, "mac="+m.MAC, "-daemonize") {
			assert.Contains(t, args, w, tc.firmware)
		}

		for _, w := range tc.wantNot {
			assert.NotContains(t, args, w, tc.firmware)
		}

		assert.NotContains(t, args, "-no-reboot", "machines reboot normally")
	}
}

// On an IPv6-only network OVMF keeps its IPv6 network boot.
func TestIPv6Args(t *testing.T) {
	t.Parallel()

	m := machine.New(machine.Spec{Name: "m", Seed: "t", Firmware: machine.UEFIHTTP, Dir: "/lab/m", Tap: "tap0", IPv6: true})
	args := strings.Join(m.Args(), " ")

	assert.NotContains(t, args, "IPv6Support")
	assert.Contains(t, args, "IPv4PXESupport,string=no", "still HTTP boot only")
	assert.Contains(t, args, "IPv6PXESupport,string=no", "still HTTP boot only")

	arm := machine.New(machine.Spec{Name: "a", Seed: "t", Firmware: machine.ARM64, Dir: "/lab/a", Tap: "tap1", IPv6: true})
	assert.Contains(t, strings.Join(arm.Args(), " "), "IPv6Support,string=yes")
	assert.Equal(t, "qemu-system-aarch64", arm.QEMU)
	assert.Equal(t, "arm64", arm.Firmware.Arch())
	assert.Equal(t, "ttyAMA0", arm.Firmware.Console())
}

// A machine with two ports boots from its second, the first without a boot ROM; its
// identity is the same whichever port it boots from, and a single-port machine's MAC is
// its last port's.
func TestMultipleNICs(t *testing.T) {
	t.Parallel()

	for _, fw := range machine.Firmwares {
		spec := machine.Spec{Name: "m", Seed: "t", Firmware: fw, Dir: "/lab/m", Tap: "tap3", NICs: 2}
		m := machine.New(spec)

		require.Len(t, m.MACs, 2, fw)
		assert.NotEqual(t, m.MACs[0], m.MACs[1], fw)
		assert.Equal(t, m.MACs[1], m.MAC, "%s: the boot port is the second", fw)
		assert.Equal(t, []string{"tap3n0", "tap3"}, m.Taps(), fw)

		nics := deviceArgs(m.Args(), "virtio-net-pci")
		require.Len(t, nics, 2, fw)
		assert.Equal(t, "virtio-net-pci,netdev=n0,mac="+m.MACs[0]+",speed=1000,duplex=full,romfile=", nics[0], "%s: the first port cannot boot", fw)
		assert.Contains(t, nics[1], "mac="+m.MACs[1], fw)
		assert.Contains(t, nics[1], "bootindex=1", fw)
		assert.Equal(t, fw.OwnROM(), strings.Contains(nics[1], "romfile="), fw)
		assert.Contains(t, strings.Join(m.Args(), " "), "tap,id=n0,ifname=tap3n0", fw)
		assert.Contains(t, strings.Join(m.Args(), " "), "tap,id=n1,ifname=tap3,", fw)

		first := 0
		spec.BootNIC = &first
		moved := machine.New(spec)

		assert.Equal(t, m.UUID, moved.UUID, "%s: the same machine on its other port", fw)
		assert.Equal(t, m.Serial, moved.Serial, fw)
		assert.Equal(t, m.MACs, moved.MACs, fw)
		assert.Equal(t, m.MACs[0], moved.MAC, fw)
		assert.Contains(t, deviceArgs(moved.Args(), "virtio-net-pci")[0], "bootindex=1", fw)
		assert.NotContains(t, deviceArgs(moved.Args(), "virtio-net-pci")[1], "bootindex", fw)

		single := machine.New(machine.Spec{Name: "m", Seed: "t", Firmware: fw, Dir: "/lab/m", Tap: "tap3"})
		assert.Equal(t, single.MAC, m.MAC, "%s: adding a port keeps the boot port's MAC", fw)
		assert.Equal(t, []string{single.MAC}, single.MACs, fw)
	}
}

// deviceArgs are the -device values of driver, in order.
func deviceArgs(args []string, driver string) []string {
	var out []string

	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-device" && strings.HasPrefix(args[i+1], driver+",") {
			out = append(out, args[i+1])
		}
	}

	return out
}

func TestIPMIArgs(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name      string
		bmc       string
		want      []string
		wantNoKCS bool
	}{
		{"no BMC", "", nil, true},
		{"ipmi_sim", "127.0.0.1:62601", []string{
			"socket,id=ipmi0,host=127.0.0.1,port=62601,reconnect=10",
			"ipmi-bmc-extern,id=bmc0,chardev=ipmi0",
			"isa-ipmi-kcs,bmc=bmc0",
		}, false},
	} {
		m := machine.New(machine.Spec{Name: "m", Seed: "t", Dir: "/lab/m", Tap: "tap0", IPMIBMC: tc.bmc})
		args := m.Args()
		joined := strings.Join(args, " ")

		for _, w := range tc.want {
			assert.Contains(t, args, w, tc.name)
		}

		assert.Equal(t, tc.wantNoKCS, deviceArg(args, "isa-ipmi-kcs") == "", tc.name)
		assert.Contains(t, joined, "-daemonize", tc.name)
	}
}

// deviceArg is the -device argument of a driver, "" if there is none.
func deviceArg(args []string, driver string) string {
	for i := 1; i < len(args); i++ {
		if args[i-1] == "-device" && strings.HasPrefix(args[i], driver+",") {
			return args[i]
		}
	}

	return ""
}

func TestBootOrder(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name                string
		diskFirst, netOnce  bool
		wantNIC, wantDisk   string
		netdev, wantNetdev  string
		wantNotNetdevSubstr string
	}{
		{"default: network first", false, false, "bootindex=1", "bootindex=2", "", "tap,id=n0,ifname=tap0", "user"},
		{"disk first", true, false, "bootindex=2", "bootindex=1", "", "tap,id=n0,ifname=tap0", "user"},
		{"disk first, network once", true, true, "bootindex=1", "bootindex=2", "", "tap,id=n0,ifname=tap0", "user"},
		{"user netdev", true, false, "bootindex=2", "bootindex=1", "user,restrict=on", "user,restrict=on,id=n0", "ifname"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			m := machine.New(machine.Spec{Name: "m", Seed: "t", Dir: t.TempDir(), Tap: "tap0", DiskFirst: tc.diskFirst, Netdev: tc.netdev})
			require.NoError(t, m.SetNextBootNetwork(tc.netOnce))
			assert.Equal(t, tc.netOnce, m.NextBootNetwork())

			args := m.Args()
			assert.True(t, strings.HasSuffix(deviceArg(args, "virtio-net-pci"), tc.wantNIC), deviceArg(args, "virtio-net-pci"))
			assert.True(t, strings.HasSuffix(deviceArg(args, "virtio-blk-pci"), tc.wantDisk), deviceArg(args, "virtio-blk-pci"))

			joined := strings.Join(args, " ")
			assert.Contains(t, joined, "-netdev "+tc.wantNetdev)
			assert.NotContains(t, joined, "-netdev "+tc.wantNotNetdevSubstr)
		})
	}
}

// fakeQEMU stands in for qemu-system-x86_64: it logs its arguments beside the pid file
// and leaves a process running whose pid it writes there, as -daemonize does.
const fakeQEMU = `#!/bin/sh
prev=
for a in "$@"; do
	[ "$prev" = "-pidfile" ] && pidfile=$a
	prev=$a
done
echo "$*" >> "$(dirname "$pidfile")/args.log"
sleep 120 </dev/null >/dev/null 2>&1 &
echo $! > "$pidfile"
`

// TestNetworkBootOnce checks that a start consumes the override and that a reset
// with the override pending starts QEMU again with the network first.
func TestNetworkBootOnce(t *testing.T) {
	t.Parallel()

	if _, err := os.Stat(machine.NICROM); err != nil {
		t.Skipf("the iPXE NIC ROM is missing (Debian ipxe-qemu): %v", err)
	}

	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is missing (Debian qemu-utils)")
	}

	dir := t.TempDir()
	qemu := filepath.Join(dir, "qemu")
	require.NoError(t, os.WriteFile(qemu, []byte(fakeQEMU), 0o755))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	m := machine.New(machine.Spec{Name: "once", Seed: "t", Dir: filepath.Join(dir, "m"), QEMU: qemu, DiskFirst: true, Netdev: "user", DiskSize: "1M"})
	t.Cleanup(func() { _ = m.Stop(context.Background()) })

	starts := func() []string {
		b, err := os.ReadFile(filepath.Join(m.Dir, "args.log"))
		require.NoError(t, err)

		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}

	require.NoError(t, m.SetNextBootNetwork(true))
	require.NoError(t, m.Start(ctx))

	first := m.PID()
	require.NotZero(t, first)
	assert.False(t, m.NextBootNetwork(), "the start consumed the override")
	assert.Contains(t, starts()[0], "mac="+m.MAC+",speed=1000,duplex=full,bootindex=1", "the network first, once")
	assert.Contains(t, starts()[0], "drive=disk0,bootindex=2")
	assert.Contains(t, deviceArg(m.Args(), "virtio-blk-pci"), "bootindex=1", "then the disk first again")

	require.NoError(t, m.SetNextBootNetwork(true))
	require.NoError(t, m.Reset(ctx))

	second := m.PID()
	require.NotZero(t, second)
	assert.NotEqual(t, first, second, "a reset with the override pending restarts QEMU")
	assert.False(t, m.NextBootNetwork())
	require.Len(t, starts(), 2)
	assert.Contains(t, starts()[1], "mac="+m.MAC+",speed=1000,duplex=full,bootindex=1")

	require.NoError(t, m.Stop(ctx))
	assert.False(t, m.Running())
}

// TestDataDisks: each data disk is a drive of its own image with the serial a selector
// names it by, on virtio-blk or an NVMe controller; none boots.
func TestDataDisks(t *testing.T) {
	t.Parallel()

	m := machine.New(machine.Spec{Name: "m", Seed: "t", Dir: "/lab/m", Tap: "tap0", DataDisks: []machine.DataDisk{
		{Serial: "anvil-data", Size: "1G"}, {Serial: "anvil-nvme", Size: "2G", NVMe: true},
	}})
	args := m.Args()

	assert.Contains(t, args, "file=/lab/m/data-0.qcow2,format=qcow2,if=none,id=data0")
	assert.Contains(t, args, "virtio-blk-pci,drive=data0,serial=anvil-data")
	assert.Contains(t, args, "file=/lab/m/data-1.qcow2,format=qcow2,if=none,id=data1")
	assert.Contains(t, args, "nvme,drive=data1,serial=anvil-nvme")
	assert.Equal(t, "/lab/m/data-1.qcow2", m.DataDisk(1))
	assert.Contains(t, deviceArg(args, "virtio-blk-pci"), "drive=disk0,bootindex=", "the boot disk is still the first")
}
