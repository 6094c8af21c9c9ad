package anvilctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// stoppedState makes a state directory with a provider key and one machine, as a
// stopped provider leaves it.
func stoppedState(t *testing.T) string {
	t.Helper()

	dir := t.TempDir()

	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	m := resources.NewMachine(m1)
	m.TypedSpec().UUID = m1
	require.NoError(t, st.Create(t.Context(), m))
	require.NoError(t, st.Close())

	return dir
}

// migrate runs anvilctl state migrate with args; the endpoint is never dialled.
func migrate(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()

	return run(t, "unix:///nonexistent", append([]string{"state", "migrate"}, args...)...)
}

// TestMigrateRefusals: what state migrate refuses before it would reach etcd, each with
// a message that names the cause.
func TestMigrateRefusals(t *testing.T) {
	t.Parallel()

	const to = "etcd://127.0.0.1:1"

	good := stoppedState(t)

	noKey := stoppedState(t)
	require.NoError(t, os.Remove(filepath.Join(noKey, "provider.key")))

	noDB := stoppedState(t)
	require.NoError(t, os.Remove(resources.DBFile(noDB)))

	corrupt := stoppedState(t)
	require.NoError(t, os.WriteFile(resources.DBFile(corrupt), []byte(strings.Repeat("\xa5", 64<<10)), 0o600))

	live := stoppedState(t)
	st, err := resources.Open(t.Context(), live)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no --to", []string{"--from", good}, "--to is required"},
		{"no hosts", []string{"--from", good, "--to", "etcd://"}, "names no etcd hosts"},
		{"plain http", []string{"--from", good, "--to", "http://127.0.0.1:2379"}, "over TLS only"},
		{"relative prefix", []string{"--from", good, "--to", to, "--etcd-prefix", "anvil"}, "want an absolute prefix"},
		{"missing state dir", []string{"--from", filepath.Join(good, "nonexistent"), "--to", to}, "error reading the state directory"},
		{"missing provider key", []string{"--from", noKey, "--to", to}, "error reading the provider key in " + noKey},
		{"missing state", []string{"--from", noDB, "--to", to}, "no embedded state in " + noDB},
		{"corrupt state", []string{"--from", corrupt, "--to", to}, resources.ErrCorrupt.Error()},
		{"live provider", []string{"--from", live, "--to", to}, "a provider is running on " + live + ": stop it first"},
		{"no TLS files", []string{"--from", good, "--to", to}, "etcd needs --etcd-ca, --etcd-cert and --etcd-key"},
		{"unreadable CA", []string{
			"--from", good, "--to", to,
			"--etcd-ca", filepath.Join(good, "none.crt"), "--etcd-cert", filepath.Join(good, "none.crt"), "--etcd-key", filepath.Join(good, "none.key"),
		}, "error reading the etcd CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			stdout, stderr, code := migrate(t, tc.args...)
			require.Equal(t, 1, code, stdout)
			require.Contains(t, stderr, tc.want)
			require.Empty(t, stdout)
		})
	}

	_, err = os.Stat(filepath.Join(noKey, "provider.key"))
	require.ErrorIs(t, err, os.ErrNotExist, "no provider key is made")
}

// TestMigrateFlagsFromEnvironment: every flag reads ANVIL_<FLAG>.
func TestMigrateFlagsFromEnvironment(t *testing.T) {
	dir := stoppedState(t)

	t.Setenv("ANVIL_FROM", dir)
	t.Setenv("ANVIL_TO", "http://127.0.0.1:2379")

	_, stderr, code := migrate(t)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "over TLS only")

	t.Setenv("ANVIL_TO", "etcd://127.0.0.1:1")
	t.Setenv("ANVIL_ETCD_CA", filepath.Join(dir, "none.crt"))
	t.Setenv("ANVIL_ETCD_CERT", filepath.Join(dir, "none.crt"))
	t.Setenv("ANVIL_ETCD_KEY", filepath.Join(dir, "none.key"))

	_, stderr, code = migrate(t)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "error reading the etcd CA")
}
