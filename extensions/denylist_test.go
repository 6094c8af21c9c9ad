package extensions_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/extensions"
)

func TestLoadEmbeddedDenyList(t *testing.T) {
	t.Parallel()

	d, err := extensions.LoadDenyList()
	require.NoError(t, err)

	assert.NotEmpty(t, d.Version())
	assert.Positive(t, d.Len())

	for _, e := range d.Entries() {
		assert.NotEmpty(t, e.Reason, e.ID)
		assert.NotEmpty(t, e.Sources, e.ID)
	}
}

func TestDenyListMatch(t *testing.T) {
	t.Parallel()

	d, err := extensions.LoadDenyList()
	require.NoError(t, err)

	a100Bound := a100
	a100Bound.Driver = "nvidia"

	igpu := extensions.PCIDevice{VendorID: "8086", ProductID: "7d55", ClassID: "03", SubclassID: "00", Driver: "i915"}

	for _, tc := range []struct {
		name string
		hw   extensions.Hardware
		want []string // entry ids
	}{
		{
			name: "A100 the outgoing kernel drives",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{aspeed, cx6, a100Bound}},
			want: []string{"nvidia-gsp-gpu"},
		},
		{
			name: "A100 no driver touched is as the firmware left it",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{aspeed, cx6, a100}},
		},
		{
			name: "Meteor Lake graphics on i915",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{igpu}},
			want: []string{"intel-i915-graphics"},
		},
		{
			name: "both",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{igpu, a100Bound}},
			want: []string{"nvidia-gsp-gpu", "intel-i915-graphics"},
		},
		{
			name: "a Dell with bnx2x and a PERC",
			hw:   extensions.Hardware{CPUs: []extensions.CPU{xeon}, PCI: []extensions.PCIDevice{matrox, perc, bcm57810}},
		},
		{
			name: "nothing",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := d.Match(tc.hw)
			require.Len(t, got, len(tc.want))

			for i, id := range tc.want {
				assert.True(t, strings.HasPrefix(got[i], id+": "), got[i])
				assert.Contains(t, got[i], "(https://", "a reason carries its source")
			}
		})
	}
}

const validDenyList = `version: "1"
entries:
  - id: some-gpu
    match:
      pci: [{ vendor: "10de", class: "03", drivers: [nvidia] }]
    reason: Leaves its firmware running.
    sources: [https://example.org/bug/1]
`

func TestParseDenyList(t *testing.T) {
	t.Parallel()

	d, err := extensions.ParseDenyList([]byte(validDenyList))
	require.NoError(t, err)
	assert.Equal(t, 1, d.Len())

	// A driver-qualified rule needs the device bound to that driver.
	assert.Len(t, d.Match(extensions.Hardware{PCI: []extensions.PCIDevice{{VendorID: "10de", ProductID: "2330", ClassID: "03", Driver: "nvidia"}}}), 1)
	assert.Empty(t, d.Match(extensions.Hardware{PCI: []extensions.PCIDevice{{VendorID: "10de", ProductID: "2330", ClassID: "03", Driver: "vfio-pci"}}}))

	for _, tc := range []struct {
		name    string
		data    string
		wantErr string
	}{
		{
			name:    "no source",
			data:    strings.Replace(validDenyList, "    sources: [https://example.org/bug/1]\n", "", 1),
			wantErr: `entry 0 ("some-gpu"): sources are missing`,
		},
		{
			name:    "source that is not a URL",
			data:    strings.Replace(validDenyList, "https://example.org/bug/1", "a forum post", 1),
			wantErr: `source "a forum post" is not an http(s) URL`,
		},
		{
			name:    "missing reason",
			data:    strings.Replace(validDenyList, "    reason: Leaves its firmware running.\n", "", 1),
			wantErr: "reason is missing",
		},
		{
			name:    "bad class",
			data:    strings.Replace(validDenyList, `class: "03"`, `class: "3"`, 1),
			wantErr: `error parsing class: "3" is not 2 hex digits`,
		},
		{
			name:    "unknown field",
			data:    strings.Replace(validDenyList, "    reason:", "    why: typo\n    reason:", 1),
			wantErr: "error parsing kexec deny list",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			_, err := extensions.ParseDenyList([]byte(tc.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
