package machine_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

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
	} {
		m := machine.New(machine.Spec{Name: string(tc.firmware), Seed: "t", Firmware: tc.firmware, KVM: tc.kvm, Dir: "/lab/m", Tap: "tap0", NetNS: "t-lab"})
		args := strings.Join(m.Args(), " ")

		for _, w := range append(tc.want, "-machine q35", "-m 1024", "-smp 2", "ifname=tap0", "qmp.sock", "serial.log", "uuid="+m.UUID, "mac="+m.MAC, "-daemonize") {
			assert.Contains(t, args, w, tc.firmware)
		}

		for _, w := range tc.wantNot {
			assert.NotContains(t, args, w, tc.firmware)
		}

		assert.NotContains(t, args, "-no-reboot", "machines reboot normally")
	}
}
