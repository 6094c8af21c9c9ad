package anvilctl_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestMachineIdentity: the EK a machine's agent proved shows in 'get machines' (IDENTITY,
// and the fingerprint with -o wide and -o yaml); accepting binds it, or the EK given with
// --ek, and an --ek that is not the proven one is refused.
func TestMachineIdentity(t *testing.T) {
	t.Parallel()

	ep, st := startServerState(t)

	proven := "sha256:" + strings.Repeat("1f", 32)
	other := "sha256:" + strings.Repeat("2e", 32)

	_, err := safe.StateUpdateWithConflicts(t.Context(), st, resources.NewMachine(m1).Metadata(), func(m *resources.Machine) error {
		m.TypedSpec().EK = proven

		return nil
	})
	require.NoError(t, err)

	column := func(out, id, header string) string {
		t.Helper()

		lines := strings.Split(strings.TrimSpace(out), "\n")
		cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(lines[0]), -1)

		for _, line := range lines[1:] {
			fields := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
			if fields[0] != id {
				continue
			}

			for i, c := range cols {
				if c == header && i < len(fields) {
					return fields[i]
				}
			}
		}

		t.Fatalf("no %s of %s in:\n%s", header, id, out)

		return ""
	}

	out := mustRun(t, ep, "get", "machines")
	assert.Equal(t, "tpm", column(out, m1, "IDENTITY"), out)
	assert.Equal(t, "-", column(out, m2, "IDENTITY"), "no agent registered: not known yet")

	wide := mustRun(t, ep, "get", "machines", "-o", "wide")
	assert.Equal(t, proven, column(wide, m1, "EK"), wide)

	assert.Contains(t, mustRun(t, ep, "get", "machine", m1, "-o", "yaml"), "ek: "+proven)

	// An EK that is not the proven one is refused; the proven one is bound.
	_, errOut, code := run(t, ep, "machine", "accept", m1, "--ek", other)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "its agent proved TPM EK "+proven+", not "+other)

	_, errOut, code = run(t, ep, "machine", "accept", m1, "--ek", "sha256:nothex")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "EK fingerprint")

	assert.Contains(t, mustRun(t, ep, "machine", "accept", m1), "bound to TPM EK "+proven)

	// Pre-registered: m2's agent has proved nothing yet; it is bound to the EK given.
	assert.Contains(t, mustRun(t, ep, "machine", "accept", m2, "--ek", strings.ToUpper(other)), "bound to TPM EK "+other)

	out = mustRun(t, ep, "get", "machines")
	assert.Equal(t, "tpm,bound", column(out, m1, "IDENTITY"))
	assert.Equal(t, "tpm,bound,unproven", column(out, m2, "IDENTITY"))
	assert.Contains(t, mustRun(t, ep, "get", "machine", m2, "-o", "yaml"), "boundEK: "+other)
}
