package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
)

func TestWriteGiveBMC(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	s := &State{Dir: dir, Prefix: "p", BMCPassword: "lab-0123456789ab", PowerBin: "/bin/lab-power"}

	for i, owner := range []PowerOwner{OwnerAPI, OwnerIPMI, OwnerNone} {
		_, err := s.appendMachine(i, MachineConfig{Firmware: machine.BIOS, BMC: owner, BMCElsewhere: owner != OwnerNone}, false)
		require.NoError(t, err)
	}

	ms := s.MachineList()
	sock := filepath.Join(dir, "provider", "control.sock")

	var out bytes.Buffer

	require.NoError(t, s.WriteGiveBMC(&out, ms[0]))
	assert.Contains(t, out.String(), "_out/bin/anvilctl --endpoint unix://"+sock+" machine bmc set "+ms[0].UUID+" --kind api --address http://10.77.0.1:8090")
	assert.NotContains(t, out.String(), "omnictl", "no Omni in this lab")

	out.Reset()
	require.NoError(t, s.WriteGiveBMC(&out, ms[1]))
	assert.Contains(t, out.String(), "machine bmc set "+ms[1].UUID+" --kind ipmi --address 10.77.0.1 --port 62301 --username admin --password-file "+s.BMCPasswordFile())
	assert.NotContains(t, out.String(), s.BMCPassword, "the password is passed by file, never shown")

	b, err := os.ReadFile(s.BMCPasswordFile())
	require.NoError(t, err)
	assert.Equal(t, s.BMCPassword+"\n", string(b))

	fi, err := os.Stat(s.BMCPasswordFile())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	out.Reset()
	require.NoError(t, s.WriteGiveBMC(&out, ms[2]))
	assert.Contains(t, out.String(), "has no BMC")

	// Beside Omni: an InfraMachineBMCConfig to apply, in a file of its own.
	s.Omni = &omnilab.Omni{Dir: OmniDir(dir)}

	for _, m := range ms[:2] {
		out.Reset()
		require.NoError(t, s.WriteGiveBMC(&out, m))
		assert.Contains(t, out.String(), "go run ./hack/cmd/lab --dir "+dir+" omnictl -- apply -f "+OmniBMCConfigFile(m))
		assert.NotContains(t, out.String(), s.BMCPassword)

		fi, err := os.Stat(OmniBMCConfigFile(m))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}

	doc, err := os.ReadFile(OmniBMCConfigFile(ms[0]))
	require.NoError(t, err)
	assert.Equal(t, "metadata: {namespace: default, type: InfraMachineBMCConfigs.omni.sidero.dev, id: "+ms[0].UUID+"}\n"+
		"spec: {api: {address: 'http://10.77.0.1:8090'}}\n", string(doc))

	doc, err = os.ReadFile(OmniBMCConfigFile(ms[1]))
	require.NoError(t, err)
	assert.Contains(t, string(doc), "spec: {ipmi: {address: 10.77.0.1, port: 62301, username: admin, password: 'lab-0123456789ab'}}")
}
