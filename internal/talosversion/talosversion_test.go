package talosversion_test

import (
	"testing"

	"github.com/blang/semver/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/talosversion"
)

// TestTag: a v-prefixed semantic version at or above v1.13, the newest threshold Omni
// applies (see Tag).
func TestTag(t *testing.T) {
	t.Parallel()

	require.Equal(t, byte('v'), talosversion.Tag[0])

	v, err := semver.Parse(talosversion.Tag[1:])
	require.NoError(t, err)
	assert.True(t, v.GTE(semver.MustParse("1.13.0")), "%s is below v1.13", talosversion.Tag)
}
