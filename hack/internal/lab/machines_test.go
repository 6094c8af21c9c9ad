package lab

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/machine"
)

func TestAddMachineRefuses(t *testing.T) {
	t.Parallel()

	// No namespace of this prefix exists: the lab is not up.
	s := &State{Dir: t.TempDir(), Prefix: "anvnone", ProviderNS: "anvnone-lab", PowerBin: "/bin/lab-power"}

	for _, tc := range []struct {
		mc   MachineConfig
		want string
	}{
		{MachineConfig{Firmware: "coreboot"}, `unknown firmware "coreboot"`},
		{MachineConfig{Firmware: machine.BIOS, BMC: "redfish"}, `unknown power owner "redfish"`},
		{MachineConfig{Firmware: machine.BIOS, NICs: 4}, "1 to 3 network ports, not 4"},
		{MachineConfig{Firmware: machine.BIOS, MemoryMB: -1}, "positive number of MiB"},
		{MachineConfig{Firmware: machine.BIOS, CPUs: -1}, "positive number of CPUs"},
		{MachineConfig{Firmware: machine.ARM64, BMC: OwnerIPMI}, "arm64 machine has no IPMI device"},
		{MachineConfig{Firmware: machine.BIOS, BMCElsewhere: true}, "no BMC to give"},
		{MachineConfig{Firmware: machine.BIOS, BMC: OwnerAPI}, "is not up (no namespace anvnone-lab)"},
	} {
		m, err := s.AddMachine(t.Context(), tc.mc)
		assert.ErrorContains(t, err, tc.want, "%+v", tc.mc)
		assert.Nil(t, m)
	}

	assert.Empty(t, s.Machines, "nothing added")
	assert.NoFileExists(t, StateFile(s.Dir), "nothing saved")
}

func TestAppendMachine(t *testing.T) {
	t.Parallel()

	s := &State{Dir: "/lab", Prefix: "p", ProviderNS: "p-lab", IPv6Only: true, PowerBin: "/bin/lab-power"}

	spec, err := s.appendMachine(3, MachineConfig{Firmware: machine.UEFI, NICs: 2, MemoryMB: 2048, DiskSize: "16G", BMC: OwnerIPMI, BMCElsewhere: true, TPM: true}, true)
	require.NoError(t, err)

	assert.Equal(t, machine.Spec{
		Name: "uefi-2nic-3", Index: 3, Seed: "p", Firmware: machine.UEFI, NICs: 2,
		Dir: "/lab/machines/uefi-2nic-3", NetNS: "p-lab", Tap: "tap3", IPv6: true, IPMIBMC: "127.0.0.1:62603",
		KVM: true, MemoryMB: 2048, DiskSize: "16G", TPM: true,
	}, spec)
	assert.Equal(t, MachineBMC{Owner: OwnerIPMI, LANPort: 62303, SerialPort: 62603, Elsewhere: true}, s.BMC(spec.Name))

	_, err = s.appendMachine(3, MachineConfig{Firmware: machine.BIOS}, false)
	assert.ErrorContains(t, err, "has a machine uefi-2nic-3 (index 3) already")

	_, err = s.appendMachine(4, MachineConfig{Firmware: machine.ARM64, TPM: true}, false)
	assert.ErrorIs(t, err, errNoARM64TPM)
}
