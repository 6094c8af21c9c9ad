package replica

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMinor(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"v1.4.2": "1.4", "1.4.2": "1.4", "v1.4": "1.4", "v2.0.0-alpha.1": "2.0",
		"dev": "dev", "": "", "v1": "v1", "v.": "v.",
	} {
		assert.Equal(t, want, minor(in), in)
	}
}

func TestCheckSnapshotRefusesWhatIsNoEtcdDatabase(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "etcd-x.db")
	require.NoError(t, os.WriteFile(path, []byte("not a database, truncated by a full disk"), 0o600))

	_, err := CheckSnapshot(path)
	assert.ErrorContains(t, err, "is not a database")
}
