package machine_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/proc"
)

func TestTPMArgs(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		firmware machine.Firmware
		tpm      bool
		device   string
	}{
		{machine.BIOS, false, ""},
		{machine.BIOS, true, "tpm-tis,tpmdev=tpm0"},
		{machine.UEFI, true, "tpm-tis,tpmdev=tpm0"},
		{machine.ARM64, true, "tpm-tis-device,tpmdev=tpm0"},
	} {
		m := machine.New(machine.Spec{Name: "m", Seed: "t", Firmware: tc.firmware, Dir: "/lab/m", Tap: "tap0", TPM: tc.tpm})
		args := m.Args()
		joined := strings.Join(args, " ")

		if !tc.tpm {
			assert.NotContains(t, joined, "tpm", "no TPM without asking")

			continue
		}

		assert.Contains(t, joined, "-chardev socket,id=chrtpm,path=/lab/m/swtpm.sock -tpmdev emulator,id=tpm0,chardev=chrtpm", tc.firmware)
		assert.Equal(t, tc.device, deviceArg(args, strings.SplitN(tc.device, ",", 2)[0]), tc.firmware)
	}
}

// TestTPMFollowsQEMU: a machine with a TPM runs its swtpm beside QEMU (here the fake
// QEMU of TestNetworkBootOnce, which never connects), a start replaces a swtpm left
// without its QEMU (it holds the state's lock), a QEMU that fails to start takes its
// swtpm with it, and a stop leaves no swtpm and keeps the TPM's state directory.
func TestTPMFollowsQEMU(t *testing.T) {
	t.Parallel()

	if _, err := exec.LookPath(machine.SWTPM); err != nil {
		t.Skip("swtpm is missing (Debian swtpm; make setup installs it)")
	}

	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is missing (Debian qemu-utils)")
	}

	if _, err := os.Stat(machine.NICROM); err != nil {
		t.Skipf("the iPXE NIC ROM is missing (Debian ipxe-qemu): %v", err)
	}

	dir := t.TempDir()
	qemu := filepath.Join(dir, "qemu")
	require.NoError(t, os.WriteFile(qemu, []byte(fakeQEMU), 0o755))

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	m := machine.New(machine.Spec{Name: "tpm", Seed: "t", Dir: filepath.Join(dir, "m"), QEMU: qemu, Netdev: "user", DiskSize: "1M", TPM: true})
	t.Cleanup(func() { _ = m.Stop(context.Background()) })

	require.NoError(t, m.Start(ctx))

	first := m.TPMPID()
	require.NotZero(t, first, "swtpm runs beside QEMU")
	assert.DirExists(t, m.TPMStateDir())

	args, err := os.ReadFile(filepath.Join(m.Dir, "args.log"))
	require.NoError(t, err)
	assert.Contains(t, string(args), "-tpmdev emulator,id=tpm0,chardev=chrtpm")

	// QEMU gone without a word to its swtpm (killed): the next start replaces it.
	require.NoError(t, syscall.Kill(m.PID(), syscall.SIGKILL))
	require.True(t, proc.WaitGone(ctx, m.PID(), 5*time.Second))
	require.True(t, proc.Alive(first), "this swtpm never had a QEMU to lose")
	require.NoError(t, m.Start(ctx))
	assert.NotZero(t, m.TPMPID())
	assert.NotEqual(t, first, m.TPMPID())
	assert.True(t, proc.WaitGone(ctx, first, 5*time.Second), "the old swtpm is gone")

	second := m.TPMPID()

	require.NoError(t, m.Stop(ctx))
	assert.False(t, m.Running())
	assert.Zero(t, m.TPMPID())
	assert.True(t, proc.WaitGone(ctx, second, 5*time.Second), "no swtpm after a stop")
	assert.DirExists(t, m.TPMStateDir(), "the TPM's state outlives the power")

	// A QEMU that does not start leaves no swtpm either.
	require.NoError(t, os.WriteFile(qemu, []byte("#!/bin/sh\necho no machine today >&2\nexit 1\n"), 0o755))
	require.Error(t, m.Start(ctx))
	assert.Zero(t, m.TPMPID())
	assert.Empty(t, proc.FindByArg(m.Dir+"/", machine.SWTPM), "no swtpm of the machine runs")
}
