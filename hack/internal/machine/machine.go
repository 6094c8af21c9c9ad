// Package machine runs a lab machine: a QEMU virtual machine on a tap of the lab
// network, with the firmware of a kind of server (SeaBIOS or OVMF, with QEMU's iPXE NIC
// ROM or the firmware's own PXE), a disk, a serial console captured to a file, SMBIOS
// identity of a vendor, and a power API over QMP.
package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Firmware is the boot firmware of a machine.
type Firmware string

// Firmware kinds.
const (
	// BIOS is SeaBIOS with QEMU's iPXE NIC ROM.
	BIOS Firmware = "bios"
	// UEFI is OVMF with QEMU's iPXE NIC ROM.
	UEFI Firmware = "uefi"
	// UEFIPXE is OVMF with an empty NIC ROM: the firmware's own PXE, which TFTPs iPXE.
	UEFIPXE Firmware = "uefi-pxe"
	// UEFIHTTP is OVMF with an empty NIC ROM and its PXE turned off: UEFI HTTP boot only,
	// as a server set to HTTP boot in its firmware setup. It fetches iPXE over HTTP.
	UEFIHTTP Firmware = "uefi-http"
	// ARM64 is an arm64 server (qemu-system-aarch64, virt, AAVMF) set to UEFI HTTP boot:
	// Debian has no arm64 iPXE, so it boots the UKI the provider builds for it.
	ARM64 Firmware = "arm64"
)

// Firmwares are the firmware kinds a lab machine can have.
var Firmwares = []Firmware{BIOS, UEFI, UEFIPXE, UEFIHTTP, ARM64}

// Firmware files (Debian's ovmf and ipxe-qemu).
var (
	OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	// NICROM is the virtio-net iPXE ROM QEMU loads by default (BIOS and EFI images).
	NICROM = "/usr/lib/ipxe/qemu/efi-virtio.rom"
	// AAVMFCode and AAVMFVars are the arm64 firmware (Debian's qemu-efi-aarch64), each
	// padded to the 64 MiB of the virt machine's flash banks.
	AAVMFCode = "/usr/share/AAVMF/AAVMF_CODE.fd"
	AAVMFVars = "/usr/share/AAVMF/AAVMF_VARS.fd"
)

// ParseFirmware checks a firmware kind.
func ParseFirmware(s string) (Firmware, error) {
	f := Firmware(strings.TrimSpace(s))
	if slices.Contains(Firmwares, f) {
		return f, nil
	}

	return "", fmt.Errorf("unknown firmware %q (bios, uefi, uefi-pxe, uefi-http or arm64)", s)
}

// OwnROM reports whether the firmware boots the network with its own stack (the NIC has
// no iPXE option ROM).
func (f Firmware) OwnROM() bool { return f == UEFIPXE || f == UEFIHTTP || f == ARM64 }

// Arch is the machine's architecture, as the provider names it.
func (f Firmware) Arch() string {
	if f == ARM64 {
		return "arm64"
	}

	return "amd64"
}

// Console is the kernel's serial console on the machine.
func (f Firmware) Console() string {
	if f == ARM64 {
		return "ttyAMA0"
	}

	return "ttyS0"
}

// Vendor is the SMBIOS type 1 identity of a machine.
type Vendor struct{ Manufacturer, Product string }

// Vendors are handed out by machine index, so a lab looks like a mixed fleet.
var Vendors = []Vendor{
	{"Dell Inc.", "PowerEdge R630"},
	{"Supermicro", "SYS-1029P-WTR"},
	{"HPE", "ProLiant DL360 Gen10"},
	{"Lenovo", "ThinkSystem SR630"},
}

// Spec describes a machine.
type Spec struct {
	// Name is unique in the lab; Index numbers it (tap, vendor). UUID, MAC and serial
	// derive from Seed, Name and Index, so they are stable across runs.
	Name  string
	Index int
	Seed  string

	Firmware Firmware
	// Dir holds the machine's disk, firmware variables, QMP socket, pid file and serial log.
	Dir string
	// NetNS and Tap are where the NIC is: the tap exists in the namespace. An empty
	// NetNS runs QEMU in the caller's namespace.
	NetNS, Tap string
	// Netdev replaces the tap as the NIC's QEMU -netdev (without its id), e.g.
	// "user,restrict=on" for a machine that needs no lab network. Empty: the tap.
	Netdev string
	// DiskFirst boots the disk before the network (disk bootindex 1, NIC 2); the zero
	// value keeps the NIC first, as on servers set up for network provisioning.
	// SetNextBootNetwork overrides it for one start.
	DiskFirst bool
	// NICs is the number of network ports, all on the lab network (default 1). The
	// firmware boots from the last one: a machine with two ports that PXE-boots from its
	// second, the first (lower PCI address, the OS's first link) left without a boot ROM.
	NICs int
	// BootNIC, when set, names the port (0-based) the firmware boots from instead of the
	// last: the same machine moved to its other port keeps its identity.
	BootNIC *int
	// IPv6 leaves OVMF's IPv6 network boot on (PXEv6, HTTPv6), for an IPv6-only
	// provisioning network; the zero value turns it off, as on a server set up for IPv4.
	IPv6 bool
	// IPMIBMC, host:port, gives the guest a KCS IPMI interface (/dev/ipmi0) backed by
	// the external BMC listening there (ipmi_sim's "codec VM" serial port); QEMU
	// reconnects while the BMC is away. Empty: no IPMI device.
	IPMIBMC string
	// TPM gives the machine a TPM 2.0 (swtpm, tpm.go) whose state is kept in its Dir:
	// the same TPM, and EK, across resets and power cycles; another Dir, another TPM.
	TPM bool

	// DataDisks are disks beside the boot disk (data-<i>.qcow2 in Dir), each with a
	// serial, so that a selector can name them as it would a server's.
	DataDisks []DataDisk

	KVM      bool
	MemoryMB int
	CPUs     int
	DiskSize string
	QEMU     string
}

// DataDisk is one more disk of a machine.
type DataDisk struct {
	// Serial is the disk's serial (at most 20 characters: virtio-blk's limit).
	Serial string
	// Size is qemu-img's ("2G").
	Size string
	// NVMe puts it on an NVMe controller of its own; else virtio-blk.
	NVMe bool
}

// Machine is a lab machine.
type Machine struct {
	Spec

	// MAC is the boot port's address; MACs are every port's, in PCI order.
	UUID, MAC, Serial string
	MACs              []string
	Vendor            Vendor
}

// New derives the machine's identity from its spec.
func New(spec Spec) *Machine {
	if spec.MemoryMB == 0 {
		spec.MemoryMB = 1024
	}

	if spec.CPUs == 0 {
		spec.CPUs = 2
	}

	if spec.NICs < 1 {
		spec.NICs = 1
	}

	if spec.DiskSize == "" {
		spec.DiskSize = "8G"
	}

	spec.NICs = min(spec.NICs, MaxNICs)

	if spec.Firmware == "" {
		spec.Firmware = BIOS
	}

	if spec.QEMU == "" {
		spec.QEMU = "qemu-system-x86_64"
		if spec.Firmware == ARM64 {
			spec.QEMU = "qemu-system-aarch64"
		}
	}

	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", spec.Seed, spec.Name, spec.Index)))

	u := sum[:16]
	u[6] = u[6]&0x0f | 0x40 // version 4 layout; the bits are a hash, not random
	u[8] = u[8]&0x3f | 0x80

	m := &Machine{
		Spec:   spec,
		UUID:   fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]),
		Serial: fmt.Sprintf("LAB%X", sum[19:23]),
		Vendor: Vendors[spec.Index%len(Vendors)],
	}

	// The last port's MAC is the one a single-port machine always had, so that adding
	// ports changes no existing machine's identity.
	for i := range spec.NICs {
		b := sum[16:19]
		if i < spec.NICs-1 {
			b = sum[23+3*i : 26+3*i]
		}

		m.MACs = append(m.MACs, fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2]))
	}

	m.MAC = m.MACs[m.bootNIC()]

	return m
}

// MaxNICs bounds a machine's NICs: their MACs come from the identity hash.
const MaxNICs = 3

// bootNIC is the index of the port the firmware boots from.
func (m *Machine) bootNIC() int {
	if m.BootNIC != nil && *m.BootNIC >= 0 && *m.BootNIC < m.NICs {
		return *m.BootNIC
	}

	return m.NICs - 1
}

// Taps are the taps of the machine's ports, in PCI order: Tap is the last port's (the
// one a single-port machine has), the others Tap with a suffix.
func (m *Machine) Taps() []string {
	taps := make([]string, 0, m.NICs)
	for i := range m.NICs - 1 {
		taps = append(taps, fmt.Sprintf("%sn%d", m.Tap, i))
	}

	return append(taps, m.Tap)
}

// Paths of the machine's files.
func (m *Machine) SerialLog() string { return filepath.Join(m.Dir, "serial.log") }
func (m *Machine) QMPSocket() string { return filepath.Join(m.Dir, "qmp.sock") }
func (m *Machine) PIDFile() string   { return filepath.Join(m.Dir, "qemu.pid") }
func (m *Machine) Disk() string      { return filepath.Join(m.Dir, "disk.qcow2") }
func (m *Machine) varsFile() string  { return filepath.Join(m.Dir, "OVMF_VARS.fd") }
func (m *Machine) qemuLog() string   { return filepath.Join(m.Dir, "qemu.log") }

// DataDisk is the image of the machine's data disk i (DataDisks).
func (m *Machine) DataDisk(i int) string {
	return filepath.Join(m.Dir, "data-"+strconv.Itoa(i)+".qcow2")
}

// nextBootNetworkFile marks a pending one-shot network boot. A file, not a field: the
// lab's commands and its BMC services are separate processes acting on one machine.
func (m *Machine) nextBootNetworkFile() string { return filepath.Join(m.Dir, "next-boot-network") }

// PID is QEMU's pid, 0 when it does not run.
func (m *Machine) PID() int {
	b, err := os.ReadFile(m.PIDFile())
	if err != nil {
		return 0
	}

	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !proc.Alive(pid) {
		return 0
	}

	return pid
}

// Running reports whether the machine is powered on.
func (m *Machine) Running() bool { return m.PID() != 0 }

// Start powers the machine on (creating its disk and firmware variables the first
// time); it returns once QEMU runs. Starting a running machine does nothing.
func (m *Machine) Start(ctx context.Context) error {
	if m.Running() {
		return nil
	}

	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", m.Dir, err)
	}

	if err := m.prepare(ctx); err != nil {
		return err
	}

	_ = os.Remove(m.QMPSocket())

	if m.TPM {
		if err := m.startTPM(ctx); err != nil {
			return err
		}
	}

	netOnce := m.NextBootNetwork()
	args := m.Args()

	var out bytes.Buffer

	// -daemonize: QEMU returns once the machine runs (or reports why not), and the
	// machine outlives the command that started it.
	cmd := netns.Command(ctx, m.NetNS, m.QEMU, args...)
	cmd.Stdout, cmd.Stderr = &out, &out

	if err := cmd.Run(); err != nil {
		return errors.Join(fmt.Errorf("error starting machine %s: %w: %s", m.Name, err, strings.TrimSpace(out.String())),
			m.stopTPM(context.WithoutCancel(ctx)))
	}

	if m.PID() == 0 {
		return errors.Join(fmt.Errorf("machine %s is not running after start; see %s", m.Name, m.qemuLog()),
			m.stopTPM(context.WithoutCancel(ctx)))
	}

	if netOnce {
		// This start applied the override; the next one uses the configured order.
		if err := m.SetNextBootNetwork(false); err != nil {
			return err
		}
	}

	return nil
}

// SetNextBootNetwork makes the next start (or a reset, which then restarts QEMU) boot
// the network first, once; false cancels a pending override.
func (m *Machine) SetNextBootNetwork(on bool) error {
	if !on {
		if err := os.Remove(m.nextBootNetworkFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("error clearing the network boot override of %s: %w", m.Name, err)
		}

		return nil
	}

	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", m.Dir, err)
	}

	if err := os.WriteFile(m.nextBootNetworkFile(), nil, 0o644); err != nil {
		return fmt.Errorf("error setting the network boot override of %s: %w", m.Name, err)
	}

	return nil
}

// NextBootNetwork reports whether a one-shot network boot is pending.
func (m *Machine) NextBootNetwork() bool {
	_, err := os.Stat(m.nextBootNetworkFile())

	return err == nil
}

// Args is QEMU's command line (without the binary) for the next start: the boot order
// follows DiskFirst unless a one-shot network boot is pending.
func (m *Machine) Args() []string {
	accel := []string{"-accel", "tcg", "-cpu", "max"}

	switch {
	case m.Firmware == ARM64:
		// Not max: TCG emulates pointer authentication for it, and the kernel runs at
		// half the speed.
		accel = []string{"-accel", "tcg", "-cpu", "cortex-a72"}
	case m.KVM:
		accel = []string{"-accel", "kvm", "-cpu", "host"}
	}

	machineType, vga := "q35", []string{"-vga", "none"}
	if m.Firmware == ARM64 {
		machineType, vga = "virt", nil // virt has no VGA
	}

	nicIndex, diskIndex := "1", "2"
	if m.DiskFirst && !m.NextBootNetwork() {
		nicIndex, diskIndex = "2", "1"
	}

	netArgs := m.nicArgs(nicIndex)

	args := append(accel,
		"-name", m.Seed+"-"+m.Name+",process="+m.Seed+"-"+m.Name,
		"-machine", machineType, "-m", strconv.Itoa(m.MemoryMB), "-smp", strconv.Itoa(m.CPUs),
		"-display", "none",
	)
	args = append(args, vga...)
	args = append(args,
		"-daemonize", "-pidfile", m.PIDFile(),
		"-D", m.qemuLog(),
		// append: the log keeps every boot across power cycles.
		"-chardev", "file,id=serial0,path="+m.SerialLog()+",append=on",
		"-serial", "chardev:serial0",
		"-qmp", "unix:"+m.QMPSocket()+",server=on,wait=off",
	)
	args = append(args, netArgs...)
	args = append(args,
		"-drive", "file="+m.Disk()+",format=qcow2,if=none,id=disk0",
		"-device", "virtio-blk-pci,drive=disk0,bootindex="+diskIndex,
		"-smbios", fmt.Sprintf("type=1,manufacturer=%s,product=%s,serial=%s,uuid=%s",
			m.Vendor.Manufacturer, m.Vendor.Product, m.Serial, m.UUID),
	)

	for i, d := range m.DataDisks {
		id := "data" + strconv.Itoa(i)
		args = append(args, "-drive", "file="+m.DataDisk(i)+",format=qcow2,if=none,id="+id)

		if d.NVMe {
			args = append(args, "-device", "nvme,drive="+id+",serial="+d.Serial)
		} else {
			args = append(args, "-device", "virtio-blk-pci,drive="+id+",serial="+d.Serial)
		}
	}

	// Debian's qemu-system-aarch64 has no IPMI device (the lab powers arm64 machines
	// through its power API instead).
	if m.IPMIBMC != "" && m.Firmware != ARM64 {
		args = append(args, ipmiArgs(m.IPMIBMC)...)
	}

	if m.TPM {
		args = append(args, m.tpmArgs()...)
	}

	if m.Firmware == ARM64 {
		ipv6 := "no"
		if m.IPv6 {
			ipv6 = "yes"
		}

		return append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+AAVMFCode,
			"-drive", "if=pflash,format=raw,unit=1,file="+m.varsFile(),
			// The virt machine has no entropy source of its own: without one the kernel's
			// random pool is not ready for minutes.
			"-device", "virtio-rng-pci",
			// A server set to IPv4 (or IPv6) HTTP boot: no PXE, which would TFTP a
			// binary no arm64 iPXE exists for.
			"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=no",
			"-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=no",
			"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string="+ipv6,
		)
	}

	if m.Firmware == BIOS {
		// The serial graphics adapter mirrors SeaBIOS's and iPXE's screen onto the serial
		// port, so the serial log shows the PXE boot as it does under OVMF.
		args = append(args, "-device", "sga")
	} else {
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+OVMFCode,
			"-drive", "if=pflash,format=raw,unit=1,file="+m.varsFile(),
		)

		if !m.IPv6 {
			// A server set up for IPv4 network boot: without this OVMF adds PXEv6 and
			// HTTPv6 boot options after the NIC's PXEv4 one, and a machine sent back
			// to the firmware (iPXE exit, HTTP 404) waits out their DHCPv6 timeouts
			// before it reaches its disk. IPv6 in iPXE and Linux is untouched.
			args = append(args, "-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=no")
		}
		if m.Firmware == UEFI || m.Firmware == UEFIHTTP || m.IPv6 {
			// UEFI: the iPXE ROM is this NIC's PXE, as a NIC's option ROM is on a server;
			// OVMF's own PXE on top of it would be a second attempt at the same boot.
			// UEFI HTTP: a server whose firmware is set to HTTP boot; PXE is off.
			// IPv6: a server set up for IPv6 network boot, its PXEv4 off.
			args = append(args, "-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=no")
		}

		if m.Firmware == UEFIHTTP {
			args = append(args, "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=no")
		}
	}

	return args
}

// nicArgs are the ports' netdevs and devices, in PCI order. The boot port has bootindex
// bootIndex and the firmware's kind of boot ROM; the others no boot ROM at all, so that
// the firmware boots from the chosen port only. Each has a speed of its own, as a real
// NIC reports one (virtio-net reports none otherwise): Omni's and Anvil's labels are made
// of it.
func (m *Machine) nicArgs(bootIndex string) []string {
	taps := m.Taps()
	boot := m.bootNIC()

	var args []string

	for i, mac := range m.MACs {
		id := fmt.Sprintf("n%d", i)

		netdev := "tap,id=" + id + ",ifname=" + taps[i] + ",script=no,downscript=no"
		if m.Netdev != "" {
			netdev = m.Netdev + ",id=" + id
		}

		nic := "virtio-net-pci,netdev=" + id + ",mac=" + mac + ",speed=1000,duplex=full"

		switch {
		case i != boot:
			nic += ",romfile="
		case m.Firmware.OwnROM():
			nic += ",romfile=,bootindex=" + bootIndex // the firmware's own network boot
		default:
			nic += ",bootindex=" + bootIndex
		}

		args = append(args, "-netdev", netdev, "-device", nic)
	}

	return args
}

// ipmiArgs attach the external BMC at addr (host:port) as the guest's KCS interface.
func ipmiArgs(addr string) []string {
	host, port, _ := strings.Cut(addr, ":")

	return []string{
		"-chardev", "socket,id=ipmi0,host=" + host + ",port=" + port + ",reconnect=10",
		"-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0",
		"-device", "isa-ipmi-kcs,bmc=bmc0",
	}
}

func (m *Machine) prepare(ctx context.Context) error {
	if !m.Firmware.OwnROM() {
		if _, err := os.Stat(NICROM); err != nil {
			return fmt.Errorf("the iPXE NIC ROM is missing (apt-get install --reinstall ipxe-qemu): %w", err)
		}
	}

	disks := map[string]string{m.Disk(): m.DiskSize}
	for i, d := range m.DataDisks {
		disks[m.DataDisk(i)] = d.Size
	}

	for path, size := range disks {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			continue
		}

		out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", path, size).CombinedOutput()
		if err != nil {
			return fmt.Errorf("error creating the disk %s of %s: %w: %s", filepath.Base(path), m.Name, err, out)
		}
	}

	if m.Firmware == BIOS {
		return nil
	}

	if _, err := os.Stat(m.varsFile()); err == nil {
		return nil
	}

	if m.Firmware == ARM64 {
		return copyFile(AAVMFVars, m.varsFile())
	}

	return copyFile(OVMFVars, m.varsFile())
}

// Stop powers the machine off (QMP quit, then SIGKILL if QEMU does not go), and ends
// its TPM's swtpm, which a machine that is off does not run.
func (m *Machine) Stop(ctx context.Context) error {
	pid := m.PID()
	if pid == 0 {
		return m.stopTPM(ctx)
	}

	if err := m.QMP(ctx, "quit"); err != nil || !proc.WaitGone(ctx, pid, 10*time.Second) {
		if err := proc.Stop(ctx, pid, 5*time.Second); err != nil {
			return err
		}
	}

	return m.stopTPM(ctx)
}

// Reset presses the reset button. With a network boot pending it restarts QEMU
// instead: QEMU fixes the boot order at start, and a reset would keep the old one.
func (m *Machine) Reset(ctx context.Context) error {
	if !m.Running() {
		return fmt.Errorf("machine %s is off", m.Name)
	}

	if m.NextBootNetwork() {
		if err := m.Stop(ctx); err != nil {
			return fmt.Errorf("error stopping %s to apply the network boot: %w", m.Name, err)
		}

		return m.Start(ctx)
	}

	return m.QMP(ctx, "system_reset")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", src, err)
	}

	defer in.Close()

	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("error creating %s: %w", dst, err)
	}

	if _, err := io.Copy(out, in); err != nil {
		out.Close()

		return fmt.Errorf("error copying %s: %w", src, err)
	}

	return out.Close()
}
