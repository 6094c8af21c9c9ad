package lab

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
)

// TestStatusShowsNoSecret: lab status names the files that hold secrets, never a secret:
// the BMC password, nor what the provider's command line carries.
func TestStatusShowsNoSecret(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	s := &State{
		Dir: dir, Prefix: "p", BMCPassword: "lab-0123456789ab", PowerBin: "/bin/lab-power", PowerPID: -1,
		ProviderCommand: []string{"/bin/provider", "--agent-kernel-args", "bmc.password=site-secret"},
		Omni:            &omnilab.Omni{Dir: OmniDir(dir)}, OmniNS: "p-omni",
	}

	for i, owner := range []PowerOwner{OwnerAPI, OwnerIPMI, OwnerNone} {
		_, err := s.appendMachine(i, MachineConfig{Firmware: machine.BIOS, BMC: owner}, false)
		require.NoError(t, err)
	}

	var out bytes.Buffer

	require.NoError(t, s.WriteStatus(&out))
	assert.Contains(t, out.String(), "power: ipmi_sim", "the IPMI machine's BMC is shown")
	assert.NotContains(t, out.String(), s.BMCPassword)
	assert.NotContains(t, out.String(), "site-secret")

	out.Reset()
	require.NoError(t, s.WriteMachineStatus(&out, s.MachineList()[1]))
	assert.NotContains(t, out.String(), s.BMCPassword)
}

// TestStateFileMode: the state file, which holds the BMC password, is its owner's to
// read only, as the password's own file is — also where an older lab left it readable.
func TestStateFileMode(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(StateFile(dir)+".tmp", nil, 0o644))

	s := &State{Dir: dir, Prefix: "p", BMCPassword: "lab-0123456789ab"}
	require.NoError(t, s.save())

	fi, err := os.Stat(StateFile(dir))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	loaded, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, s.BMCPassword, loaded.BMCPassword)
}
