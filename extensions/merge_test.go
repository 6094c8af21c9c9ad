package extensions_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/extensions"
)

func TestMerge(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name                          string
		detected, requested, excluded []string
		want                          []string
	}{
		{
			name: "nothing",
			want: []string{},
		},
		{
			name:      "detected and requested, sorted and unique",
			detected:  []string{"siderolabs/intel-ucode", "siderolabs/bnx2-bnx2x", "siderolabs/intel-ucode"},
			requested: []string{"siderolabs/iscsi-tools", "siderolabs/bnx2-bnx2x"},
			want:      []string{"siderolabs/bnx2-bnx2x", "siderolabs/intel-ucode", "siderolabs/iscsi-tools"},
		},
		{
			name:     "an excluded detection is dropped",
			detected: []string{"siderolabs/intel-ucode", "siderolabs/mellanox-mstflint"},
			excluded: []string{"siderolabs/mellanox-mstflint"},
			want:     []string{"siderolabs/intel-ucode"},
		},
		{
			name:      "a request wins over an exclusion",
			detected:  []string{"siderolabs/amd-ucode"},
			requested: []string{"siderolabs/amd-ucode"},
			excluded:  []string{"siderolabs/amd-ucode"},
			want:      []string{"siderolabs/amd-ucode"},
		},
		{
			name:      "bare names are official names; blanks are ignored",
			detected:  []string{"intel-ucode", " "},
			requested: []string{"  siderolabs/iscsi-tools ", "example.org/custom"},
			excluded:  []string{"iscsi-tools"},
			want:      []string{"example.org/custom", "siderolabs/intel-ucode", "siderolabs/iscsi-tools"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, extensions.Merge(tc.detected, tc.requested, tc.excluded))
		})
	}
}
