package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestNoSecretShown: what agents, BMCs and Omni wrote and a machine's page shows —
// kernel args, the boot timeline, events, power errors, a kexec failure — never shows a
// token or a password, on the page or in its live updates.
func TestNoSecretShown(t *testing.T) {
	t.Parallel()

	const (
		agentToken = "v1.eyJrIjoiYWdlbnQifQ.QWdlbnRUb2tlblNpZw"
		metaToken  = "v1.eyJrIjoibWV0YWRhdGEifQ.TWV0YVNpZw"
		joinToken  = "v2%3AeyJ0b2tlbiI6ImpvaW4ifQ"
		password   = "hunter2-bmc"
	)

	f := newFixture(t, "")
	f.login(t)

	ctx := t.Context()

	intent := resources.NewMachineIntent(machineID)
	intent.TypedSpec().Allocation = &resources.Allocation{
		ID: "a1", TalosVersion: "v1.13.9",
		KernelArgs: []string{"console=ttyS0", "talos.config=http://10.0.0.1/metadata/m?token=" + metaToken, "siderolink.api=grpc://omni:8090?jointoken=" + joinToken},
	}
	require.NoError(t, f.st.Create(ctx, intent))

	power := resources.NewPowerStatus(machineID)
	power.TypedSpec().Condition = "unreachable"
	power.TypedSpec().Error = "GET https://admin:" + password + "@10.0.0.21/redfish/v1/Systems: connection refused"
	require.NoError(t, f.st.Create(ctx, power))

	status := resources.NewMachineStatus(machineID)
	status.TypedSpec().Handoff = &resources.HandoffRecord{AllocationID: "a1", Failure: "kexec_file_load anvil.token=" + agentToken + ": EPERM"}
	require.NoError(t, f.st.Create(ctx, status))

	f.trace.Mark(machineID, boottrace.PhaseScript, "bios", "agent anvil.token="+agentToken)
	f.trace.Note(machineID, "agent failed: cmdline anvil.token="+agentToken+" siderolink.api=grpc://omni:8090?jointoken="+joinToken)

	check := func(t *testing.T, body string) {
		t.Helper()

		for _, secret := range []string{agentToken, metaToken, joinToken, password} {
			assert.NotContains(t, body, secret)
		}
	}

	code, body, _ := f.get(t, "/ui/machines/"+machineID)
	require.Equal(t, http.StatusOK, code)
	check(t, body)
	assert.Contains(t, body, "talos.config=http://10.0.0.1/metadata/m?token=&lt;redacted&gt;", "the kernel args show, less the token")
	assert.Contains(t, body, "https://admin:&lt;redacted&gt;@10.0.0.21/redfish")
	assert.Contains(t, body, "agent failed: cmdline anvil.token=&lt;redacted&gt;")

	events := f.stream(t, "view=machine&id="+machineID)

	first := <-events
	check(t, first)
	assert.True(t, strings.Contains(first, "anvil.token=&lt;redacted&gt;"), "the live page redacts as the page does")
}
