package lab

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/ipmisim"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// MachineConfig is one machine of a lab: what Up hands out in turn from its Config, and
// what AddMachine adds to a running lab.
type MachineConfig struct {
	Firmware machine.Firmware
	// NICs is its number of network ports (0: one; at most machine.MaxNICs).
	NICs int
	// MemoryMB and DiskSize: 0 and "" are the lab's (Config.MemoryMB and DiskSize as
	// it was first brought up).
	MemoryMB int
	DiskSize string
	// CPUs: 0 is the lab's (Config.CPUs), else machine.Spec's default.
	CPUs int
	// BMC is its power owner.
	BMC PowerOwner
	// BMCElsewhere: the lab does not tell the provider its BMC; it is given another way
	// (WriteGiveBMC says how).
	BMCElsewhere bool
	// TPM gives it a TPM 2.0 (machine.Spec.TPM).
	TPM bool
	// DataDisks are its disks beside the boot disk (machine.Spec.DataDisks).
	DataDisks []machine.DataDisk
}

// addMachines adds the machines cfg has more of than the lab, their firmware, ports and
// power owners handed out in turn.
func (s *State) addMachines(cfg Config) error {
	for i := len(s.Machines); i < cfg.Machines; i++ {
		mc := MachineConfig{
			Firmware:  inTurn(cfg.Firmware, i, machine.BIOS),
			NICs:      inTurn(cfg.NICs, i, 1),
			TPM:       inTurn(cfg.TPM, i, false),
			DataDisks: inTurn(cfg.DataDisks, i, nil),
			MemoryMB:  cfg.MemoryMB, DiskSize: cfg.DiskSize, CPUs: cfg.CPUs,
		}

		mc.BMC = inTurn(cfg.BMC, i, OwnerNone)
		if mc.BMC == OwnerIPMI && mc.Firmware == machine.ARM64 {
			// ipmi_sim reaches its machine through an IPMI device in the guest, and
			// Debian's qemu-system-aarch64 has none: the power API stands in for the
			// arm64 BMC.
			mc.BMC = OwnerAPI
		}

		mc.BMCElsewhere = slices.Contains(cfg.UnregisteredBMC, mc.BMC)

		if _, err := s.appendMachine(i, mc, cfg.KVM); err != nil {
			return err
		}
	}

	return s.save()
}

// errNoARM64TPM refuses a TPM to an arm64 machine: QEMU's virt machine has only a TIS
// TPM (tpm-tis-device), and Debian's arm64 kernel, the agent's, has no tpm_tis (only
// tpm_crb built in, tpm_tis_core and tpm_tis_spi as modules): the agent would find none.
var errNoARM64TPM = errors.New("an arm64 machine has no TPM its agent can use: QEMU's virt machine offers a TIS TPM only, " +
	"and Debian's arm64 kernel has no tpm_tis (give --tpm to x86-64 machines)")

// inTurn is the i-th machine's of values handed out in turn; def when there are none.
func inTurn[T any](values []T, i int, def T) T {
	if len(values) == 0 {
		return def
	}

	return values[i%len(values)]
}

// appendMachine adds machine i of mc to the state (not saved): its spec, named after its
// firmware, ports and index, and its power owner with, for a simulated BMC, its ports.
func (s *State) appendMachine(i int, mc MachineConfig, kvm bool) (machine.Spec, error) {
	nics := max(mc.NICs, 1)

	name := fmt.Sprintf("%s-%d", mc.Firmware, i)
	if nics > 1 {
		name = fmt.Sprintf("%s-%dnic-%d", mc.Firmware, nics, i)
	}

	for _, spec := range s.Machines {
		if spec.Name == name || spec.Index == i {
			return machine.Spec{}, fmt.Errorf("the lab in %s has a machine %s (index %d) already", s.Dir, spec.Name, spec.Index)
		}
	}

	if mc.TPM && mc.Firmware == machine.ARM64 {
		return machine.Spec{}, fmt.Errorf("machine %s: %w", name, errNoARM64TPM)
	}

	if mc.BMC != OwnerNone && s.PowerBin == "" {
		return machine.Spec{}, fmt.Errorf("machine %s's power owner is %s, which needs the lab's power binary (hack/cmd/lab-power)", name, mc.BMC)
	}

	spec := machine.Spec{
		Name: name, Index: i, Seed: s.Prefix, Firmware: mc.Firmware, NICs: nics,
		Dir: filepath.Join(s.Dir, "machines", name), NetNS: s.ProviderNS, Tap: fmt.Sprintf("tap%d", i),
		KVM: kvm, MemoryMB: mc.MemoryMB, CPUs: mc.CPUs, DiskSize: mc.DiskSize, IPv6: s.IPv6Only, TPM: mc.TPM,
		DataDisks: mc.DataDisks,
	}

	b := &MachineBMC{Owner: mc.BMC, Elsewhere: mc.BMCElsewhere && mc.BMC != OwnerNone}
	if b.Owner == OwnerIPMI {
		b.LANPort, b.SerialPort = BMCLANPortBase+i, BMCSerialPortBase+i
		spec.IPMIBMC = ipmisim.SerialAddr + ":" + strconv.Itoa(b.SerialPort)
	}

	if s.BMCs == nil {
		s.BMCs = map[string]*MachineBMC{}
	}

	s.BMCs[name] = b
	s.Machines = append(s.Machines, spec)

	return spec, nil
}

// startMachine readies machine m's network (its fixed address on the site's DHCP, its
// taps) and its simulated BMC if it has one, then has its power owner power it on,
// unless it runs.
func (s *State) startMachine(ctx context.Context, m *machine.Machine) error {
	if m.Index < 100 && !s.FullDHCP && !s.IPv6Only {
		// dnsmasq reads its hosts directory again on its own (--dhcp-hostsdir).
		if err := labnet.ReserveAddress(s.Dir, m.MAC, fmt.Sprintf("10.77.0.%d", 100+m.Index)); err != nil {
			return err
		}
	}

	for _, tap := range m.Taps() {
		if err := s.Net().AddTap(tap); err != nil {
			return err
		}
	}

	if s.BMC(m.Name).Owner == OwnerIPMI {
		if err := s.startBMC(ctx, m); err != nil {
			return err
		}
	}

	// Powered on by its owner: a simulated BMC's machine through that BMC.
	if p := s.Power(m); !p.Running() {
		if err := p.Start(ctx); err != nil {
			return fmt.Errorf("error powering on %s: %w", m.Name, err)
		}
	}

	return nil
}

// AddMachine adds one machine to the running lab as Up adds its own (the next index,
// named after its firmware), its disk created, its power owner set up (the power API,
// or a simulated BMC of its own) and told to the provider unless mc.BMCElsewhere, and
// powers it on through that owner. The state file has it before anything runs, so
// Down removes it whatever happens after.
func (s *State) AddMachine(ctx context.Context, mc MachineConfig) (*machine.Machine, error) {
	if err := s.checkMachineConfig(&mc); err != nil {
		return nil, err
	}

	spec, err := s.appendMachine(len(s.Machines), mc, s.KVM)
	if err != nil {
		return nil, err
	}

	if err := s.save(); err != nil {
		return nil, err
	}

	if err := s.registerBMCs(ctx); err != nil {
		return nil, err
	}

	m := machine.New(spec)

	return m, s.startMachine(ctx, m)
}

// checkMachineConfig refuses what AddMachine cannot add, before anything is changed —
// bad input first, then a lab that cannot take it — and fills in the lab's defaults.
func (s *State) checkMachineConfig(mc *MachineConfig) error {
	if _, err := machine.ParseFirmware(string(mc.Firmware)); err != nil {
		return err
	}

	if _, err := ParsePowerOwner(string(mc.BMC)); err != nil {
		return err
	}

	switch {
	case mc.NICs < 0 || mc.NICs > machine.MaxNICs:
		return fmt.Errorf("a machine has 1 to %d network ports, not %d", machine.MaxNICs, mc.NICs)
	case mc.CPUs < 0:
		return fmt.Errorf("a machine has a positive number of CPUs, not %d", mc.CPUs)
	case mc.MemoryMB < 0:
		return fmt.Errorf("a machine's memory is a positive number of MiB, not %d", mc.MemoryMB)
	case mc.BMC == OwnerIPMI && mc.Firmware == machine.ARM64:
		return errors.New("an arm64 machine has no IPMI device (Debian's qemu-system-aarch64 has none): its power owner is api or none")
	case mc.BMC == OwnerNone && mc.BMCElsewhere:
		return errors.New("a machine without a power owner has no BMC to give elsewhere")
	}

	switch {
	case !netns.Exists(s.ProviderNS):
		return fmt.Errorf("the lab in %s is not up (no namespace %s): lab up", s.Dir, s.ProviderNS)
	case mc.BMC == OwnerAPI && !proc.Alive(s.PowerPID):
		return fmt.Errorf("the lab's power API is not running (see %s): lab up starts it", s.PowerLog())
	case mc.BMC != OwnerNone && !mc.BMCElsewhere && s.HA() && s.liveControlSocket() == "":
		return errors.New("no replica of the site is running, so none can be told the new machine's BMC: lab up --ha starts them")
	case mc.BMC != OwnerNone && !mc.BMCElsewhere && !s.HA() && !s.isProvider(s.ProviderPID):
		return fmt.Errorf("the provider is not running, so it cannot be told the new machine's BMC (see %s): "+
			"lab provider restart starts it", s.ProviderLog())
	}

	if mc.MemoryMB == 0 {
		mc.MemoryMB = s.MemoryMB
	}

	if mc.CPUs == 0 {
		mc.CPUs = s.CPUs
	}

	if mc.DiskSize == "" {
		mc.DiskSize = s.DiskSize
	}

	return nil
}
