package lifecycle_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestOmniInstalled(t *testing.T) {
	t.Parallel()

	wiped := func(events uint64) *resources.MachineStatusSpec {
		return &resources.MachineStatusSpec{LastWipe: &resources.WipeRecord{ID: "w", OmniInstallEvents: events}}
	}

	for _, tc := range []struct {
		name   string
		events uint64
		status *resources.MachineStatusSpec
		want   bool
	}{
		{"never counted, no status", 0, nil, false},
		{"counted, never wiped", 1, nil, true},
		{"counted, no wipe report", 1, &resources.MachineStatusSpec{}, true},
		{"wiped after the last count", 3, wiped(3), false},
		{"counted again since the wipe", 4, wiped(3), true},
		{"Omni's count went back (its state was restored)", 2, wiped(3), false},
	} {
		assert.Equal(t, tc.want, lifecycle.OmniInstalled(resources.OmniMachineSpec{InstallEventID: tc.events}, tc.status), tc.name)
	}
}
