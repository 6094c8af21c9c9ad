package httpapi_test

import (
	"bytes"
	"debug/pe"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/internal/uki/ukitest"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// withARM64Assets gives the fixture an arm64 agent with a UKI stub.
func withARM64Assets(t *testing.T, f *fixture) {
	t.Helper()

	dir := f.scripts.Assets.Dir
	for name, content := range map[string][]byte{
		"vmlinuz-arm64":       []byte("ARM64-KERNEL"),
		"initramfs-arm64.zst": []byte("ARM64-INITRAMFS"),
		"cmdline-arm64":       []byte("console=ttyAMA0,115200n8\n"),
		"uki-stub-arm64.efi":  ukitest.Stub(t, ukitest.StubSpec{}),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), content, 0o644))
	}

	assets, err := boot.LoadAgentAssets(dir)
	require.NoError(t, err)

	f.scripts.Assets = assets
}

func ukiURL(id string) string { return "/boot/uki/arm64/" + id + "/52-54-00-00-00-09/boot.efi" }

// TestUKI: an arm64 HTTP boot client gets a UKI with its own command line, the one the
// iPXE script would put on the agent's kernel line; a machine whose decision is its disk
// gets 404; a path that names no machine gets 400.
func TestUKI(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	withARM64Assets(t, f)

	rec := httptest.NewRecorder()
	f.server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ukiURL(m1), nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "application/efi", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	assert.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"))

	img, err := pe.NewFile(bytes.NewReader(rec.Body.Bytes()))
	require.NoError(t, err)

	section := func(name string) []byte {
		s := img.Section(name)
		require.NotNil(t, s, name)

		data, err := io.ReadAll(io.LimitReader(s.Open(), int64(s.VirtualSize)))
		require.NoError(t, err)

		return data
	}

	assert.Equal(t, []byte("ARM64-KERNEL"), section(".linux"))
	assert.Equal(t, []byte("ARM64-INITRAMFS"), section(".initrd"))

	cmdline := string(section(".cmdline"))
	assert.True(t, strings.HasPrefix(cmdline, "console=ttyAMA0,115200n8 anvil.provider=10.77.0.1:50042 "), cmdline)
	assert.Contains(t, cmdline, " anvil.machine="+m1+" ")

	claims, err := token.Verify(f.scripts.TokenKey, cmdline[strings.Index(cmdline, "anvil.token=")+len("anvil.token="):])
	require.NoError(t, err)
	assert.Equal(t, token.KindAgent, claims.Kind)
	assert.Equal(t, m1, claims.MachineID)

	obs := <-f.obs
	assert.Equal(t, m1, obs.MachineID)
	assert.Equal(t, "arm64", obs.Arch)
	assert.Equal(t, "uefi", obs.Firmware)
	assert.Equal(t, "52:54:00:00:00:09", obs.MAC)
	assert.Equal(t, string(lifecycle.BootAgent), obs.Decision)
	assert.True(t, obs.AgentIssued.Equal(claims.Issued))

	// HEAD gives the length the GET will send, and no body.
	head := httptest.NewRecorder()
	f.server.Handler().ServeHTTP(head, httptest.NewRequest(http.MethodHead, ukiURL(m1), nil))
	require.Equal(t, http.StatusOK, head.Code)
	assert.Equal(t, rec.Header().Get("Content-Length"), head.Header().Get("Content-Length"))
	assert.Zero(t, head.Body.Len())

	// Rejected: its disk, which UEFI HTTP boot reaches on a failed download.
	f.machine(t, m2, "192.0.2.2", lifecycle.BootDisk, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceRejected}, nil)

	code, _ := f.get(t, ukiURL(m2))
	assert.Equal(t, http.StatusNotFound, code)

	for _, bad := range []string{
		"/boot/uki/arm64/not-a-uuid/52-54-00-00-00-09/boot.efi",
		"/boot/uki/arm64/" + m1 + "/52-54-00-00-00/boot.efi",
		"/boot/uki/mips/" + m1 + "/52-54-00-00-00-09/boot.efi",
		"/boot/uki/arm64/" + m1 + "%26arch=amd64/52-54-00-00-00-09/boot.efi",
	} {
		code, body := f.get(t, bad)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", bad, body)
	}
}

// TestUKIWithoutStub: no stub for the architecture is a 503 that says what to build,
// and no token is issued.
func TestUKIWithoutStub(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	code, body := f.get(t, ukiURL(m1))
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "no agent boot assets for arm64")
	assert.Empty(t, f.obs)
}
