package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// TestMachineIdentity: the machine page shows the EK the machine's agent proved, and
// accepting with an expected EK that is not it is refused, with the reason.
func TestMachineIdentity(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")
	csrf := f.login(t)
	path := "/ui/machines/" + machineID

	proven := "sha256:" + strings.Repeat("3c", 32)

	_, err := safe.StateUpdateWithConflicts(t.Context(), f.st, resources.NewMachine(machineID).Metadata(), func(m *resources.Machine) error {
		m.TypedSpec().EK = proven

		return nil
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		_, body, _ := f.get(t, path)

		return strings.Contains(body, `<dd id="identity">tpm <span class="mono">`+proven+`</span>`)
	}, 5*time.Second, 10*time.Millisecond, "the page shows the proven EK")

	// The confirmation says which TPM will be welcome.
	other := "sha256:" + strings.Repeat("4d", 32)

	code, body, _ := f.post(t, path+"/accept", url.Values{"csrf": {csrf}, "ek": {other}}, f.srv.URL)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Only the TPM with EK "+other)

	code, _, _ = f.post(t, path+"/accept", url.Values{"csrf": {csrf}, "confirmed": {"yes"}, "ek": {other}}, f.srv.URL)
	assert.NotEqual(t, http.StatusSeeOther, code, "another EK than the proven one is refused")
	assert.Nil(t, f.intent(t))

	code, _, _ = f.post(t, path+"/accept", url.Values{"csrf": {csrf}, "confirmed": {"yes"}, "ek": {proven}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, proven, f.intent(t).BoundEK)
}
