package extensions_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/extensions"
)

func TestLoadEmbeddedCatalog(t *testing.T) {
	t.Parallel()

	c, err := extensions.Load()
	require.NoError(t, err)

	assert.NotEmpty(t, c.Version())
	assert.GreaterOrEqual(t, c.Len(), 25, "the issue asks for at least 25 reviewed mappings")

	// One checked tag for each Talos minor the catalog covers.
	var minors []string
	for _, ch := range c.Checked() {
		minors = append(minors, ch.Talos)
	}

	assert.Equal(t, []string{"1.9", "1.10", "1.11", "1.12", "1.13"}, minors)

	entries := c.Entries()
	require.Len(t, entries, c.Len())

	for _, e := range entries {
		assert.True(t, strings.HasPrefix(e.Extension, extensions.OfficialPrefix), e.ID)
		assert.NotEmpty(t, e.Reason, e.ID)
		assert.NotEmpty(t, e.Talos, e.ID)
	}

	// Entries hands out copies.
	entries[0].Talos[0] = "0.1"
	entries[0].Match.CPUs = nil
	assert.Equal(t, "1.9", c.Entries()[0].Talos[0])
	assert.NotEmpty(t, c.Entries()[0].Match.CPUs)
}

// Server hardware as inventories report it.
var (
	xeon     = extensions.CPU{Vendor: "Intel", Family: "Xeon"}
	epyc     = extensions.CPU{Vendor: "Advanced Micro Devices, Inc."}
	aspeed   = extensions.PCIDevice{VendorID: "1a03", ProductID: "2000", ClassID: "03", SubclassID: "00", Driver: "ast"}
	matrox   = extensions.PCIDevice{VendorID: "102b", ProductID: "0534", ClassID: "03", SubclassID: "00", Driver: "mgag200"}
	perc     = extensions.PCIDevice{VendorID: "1000", ProductID: "005d", ClassID: "01", SubclassID: "04", Driver: "megaraid_sas"}
	bcm57810 = extensions.PCIDevice{VendorID: "14e4", ProductID: "168e", ClassID: "02", SubclassID: "00", Driver: "bnx2x"}
	bcm5709  = extensions.PCIDevice{VendorID: "14e4", ProductID: "1639", ClassID: "02", SubclassID: "00", Driver: "bnx2"}
	bcm5720  = extensions.PCIDevice{VendorID: "14e4", ProductID: "165f", ClassID: "02", SubclassID: "00", Driver: "tg3"}
	cx6      = extensions.PCIDevice{VendorID: "15b3", ProductID: "101b", ClassID: "02", SubclassID: "00", Driver: "mlx5_core"}
	a100     = extensions.PCIDevice{VendorID: "10de", ProductID: "20b0", ClassID: "03", SubclassID: "02"}
	h100     = extensions.PCIDevice{VendorID: "10de", ProductID: "2330", ClassID: "03", SubclassID: "02"}
	nvswitch = extensions.PCIDevice{VendorID: "10de", ProductID: "22a3", ClassID: "06", SubclassID: "80"}
	v100     = extensions.PCIDevice{VendorID: "10de", ProductID: "1db4", ClassID: "03", SubclassID: "02"}
	e810     = extensions.PCIDevice{VendorID: "8086", ProductID: "159b", ClassID: "02", SubclassID: "00", Driver: "ice"}
	x710     = extensions.PCIDevice{VendorID: "8086", ProductID: "1572", ClassID: "02", SubclassID: "00", Driver: "i40e"}
	qle2562  = extensions.PCIDevice{VendorID: "1077", ProductID: "2532", ClassID: "0c", SubclassID: "04", Driver: "qla2xxx"}
	qle2772  = extensions.PCIDevice{VendorID: "1077", ProductID: "2261", ClassID: "0c", SubclassID: "04", Driver: "qla2xxx"}
	t6225    = extensions.PCIDevice{VendorID: "1425", ProductID: "6001", ClassID: "02", SubclassID: "00"}
	rtl8168  = extensions.PCIDevice{VendorID: "10ec", ProductID: "8168", ClassID: "02", SubclassID: "00", Driver: "r8169"}
	arcB580  = extensions.PCIDevice{VendorID: "8086", ProductID: "e20b", ClassID: "03", SubclassID: "00"}
	virtio   = extensions.PCIDevice{VendorID: "1af4", ProductID: "1041", ClassID: "02", SubclassID: "00", Driver: "virtio-pci"}
)

func TestSuggest(t *testing.T) {
	t.Parallel()

	c, err := extensions.Load()
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		hw    extensions.Hardware
		talos string
		want  []string
	}{
		{
			name:  "Dell with BCM57810 (bnx2x), BCM5720 (tg3), PERC and two Xeons",
			hw:    extensions.Hardware{CPUs: []extensions.CPU{xeon, xeon}, PCI: []extensions.PCIDevice{matrox, perc, bcm5720, bcm57810}},
			talos: "v1.11.3",
			want:  []string{"siderolabs/bnx2-bnx2x", "siderolabs/intel-ucode"},
		},
		{
			name:  "AMD EPYC with ConnectX-6 and A100 on Talos 1.12",
			hw:    extensions.Hardware{CPUs: []extensions.CPU{epyc}, PCI: []extensions.PCIDevice{aspeed, cx6, a100}},
			talos: "v1.12.4",
			want: []string{
				"siderolabs/amd-ucode", "siderolabs/mellanox-mstflint",
				"siderolabs/nvidia-container-toolkit-lts", "siderolabs/nvidia-open-gpu-kernel-modules-lts",
			},
		},
		{
			name:  "the same box on Talos 1.11, which has no mstflint extension",
			hw:    extensions.Hardware{CPUs: []extensions.CPU{epyc}, PCI: []extensions.PCIDevice{aspeed, cx6, a100}},
			talos: "v1.11.3",
			want:  []string{"siderolabs/amd-ucode", "siderolabs/nvidia-container-toolkit-lts", "siderolabs/nvidia-open-gpu-kernel-modules-lts"},
		},
		{
			name: "HGX H100 with NVSwitch",
			hw:   extensions.Hardware{CPUs: []extensions.CPU{{Vendor: "GenuineIntel"}}, PCI: []extensions.PCIDevice{h100, h100, nvswitch}},
			want: []string{
				"siderolabs/intel-ucode", "siderolabs/nvidia-container-toolkit-lts",
				"siderolabs/nvidia-fabricmanager-lts", "siderolabs/nvidia-open-gpu-kernel-modules-lts",
			},
		},
		{
			name: "Tesla V100 takes the proprietary modules, not the open ones",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{v100}},
			want: []string{"siderolabs/nonfree-kmod-nvidia-lts", "siderolabs/nvidia-container-toolkit-lts"},
		},
		{
			name: "Intel E810 (ice) next to an X710 (i40e, no firmware needed)",
			hw:   extensions.Hardware{CPUs: []extensions.CPU{{Vendor: "Intel(R) Corporation"}}, PCI: []extensions.PCIDevice{x710, e810}},
			want: []string{"siderolabs/intel-ice-firmware", "siderolabs/intel-ucode"},
		},
		{
			name: "QLogic ISP2532 HBA",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{qle2562}},
			want: []string{"siderolabs/qlogic-firmware"},
		},
		{
			name: "QLogic ISP2722 HBA runs its firmware from flash",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{qle2772}},
			want: []string{},
		},
		{
			name: "Chelsio T6 with no driver bound (cxgb4 is not in Talos's base image)",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{t6225}},
			want: []string{"siderolabs/chelsio-drivers", "siderolabs/chelsio-firmware"},
		},
		{
			name: "Realtek RTL8168 on r8169",
			hw:   extensions.Hardware{PCI: []extensions.PCIDevice{rtl8168}},
			want: []string{"siderolabs/realtek-firmware"},
		},
		{
			name: "IDs spelled as Talos resources spell them",
			hw: extensions.Hardware{PCI: []extensions.PCIDevice{
				{VendorID: "0x14E4", ProductID: "0x168E", ClassID: "0x02", SubclassID: "0x00"},
			}},
			want: []string{"siderolabs/bnx2-bnx2x"},
		},
		{
			name: "a driver reported apart from PCI",
			hw:   extensions.Hardware{Drivers: []string{"bnx2x"}},
			want: []string{"siderolabs/bnx2-bnx2x"},
		},
		{
			name:  "Arc B580 on Talos 1.12: xe and mei",
			hw:    extensions.Hardware{PCI: []extensions.PCIDevice{arcB580}},
			talos: "1.12",
			want:  []string{"siderolabs/mei", "siderolabs/xe"},
		},
		{
			name:  "Arc B580 on Talos 1.11: no xe there, and i915 does not drive it",
			hw:    extensions.Hardware{PCI: []extensions.PCIDevice{arcB580}},
			talos: "v1.11.0",
			want:  []string{"siderolabs/mei"},
		},
		{
			name:  "a Talos minor the catalog was not checked for",
			hw:    extensions.Hardware{CPUs: []extensions.CPU{xeon}},
			talos: "v1.14.0",
			want:  []string{},
		},
		{
			name:  "a Talos version that does not parse",
			hw:    extensions.Hardware{CPUs: []extensions.CPU{xeon}},
			talos: "latest",
			want:  []string{},
		},
		{
			name: "nothing matching",
			hw:   extensions.Hardware{CPUs: []extensions.CPU{{Vendor: "QEMU"}}, PCI: []extensions.PCIDevice{virtio, {VendorID: "zz"}}},
			want: []string{},
		},
		{
			name: "no hardware at all",
			want: []string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, names(c.Suggest(tc.hw, tc.talos)))
		})
	}
}

func TestSuggestReasons(t *testing.T) {
	t.Parallel()

	c, err := extensions.Load()
	require.NoError(t, err)

	got := c.Suggest(extensions.Hardware{PCI: []extensions.PCIDevice{bcm5709, bcm57810, cx6}}, "")
	require.Equal(t, []string{"siderolabs/bnx2-bnx2x", "siderolabs/mellanox-mstflint"}, names(got))

	// Two entries lead to bnx2-bnx2x: one suggestion, both reasons, in catalog order.
	require.Len(t, got[0].Reasons, 2)
	assert.True(t, strings.HasPrefix(got[0].Reasons[0], "broadcom-netxtreme-ii-1g: "), got[0].Reasons[0])
	assert.True(t, strings.HasPrefix(got[0].Reasons[1], "broadcom-netxtreme-ii-10g: "), got[0].Reasons[1])
	assert.False(t, got[0].Optional)

	assert.True(t, got[1].Optional, "mstflint is a tool the adapter works without")
}

func names(s []extensions.Suggestion) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, x.Extension)
	}

	return out
}

// validCatalog is a catalog with one entry; each error row replaces one part of it.
func validCatalog(entry string) string {
	header := `version: "1"
checked:
  - { talos: "1.12", tag: v1.12.11, commit: 33ddf1cc497575b560ef8f2749c8d1ecfd5f3377 }
  - { talos: "1.13", tag: v1.13.9, commit: ec9d5f68fcfb5d2c109219620ef5625ca9f462d6 }
entries:
`

	return header + entry
}

const validEntry = `  - id: broadcom
    extension: siderolabs/bnx2-bnx2x
    match:
      pci: [{ vendor: "14e4", devices: ["164a", "1639-163c"], class: "02" }]
    reason: Needs firmware.
    checked: [v1.12.11, v1.13.9]
    talos: ["1.12", "1.13"]
`

func TestParse(t *testing.T) {
	t.Parallel()

	c, err := extensions.Parse([]byte(validCatalog(validEntry)))
	require.NoError(t, err)
	assert.Equal(t, 1, c.Len())
	assert.Equal(t, "1", c.Version())

	for _, tc := range []struct {
		name    string
		data    string
		wantErr string
	}{
		{
			name:    "bad hex vendor",
			data:    validCatalog(strings.Replace(validEntry, `vendor: "14e4"`, `vendor: "14g4"`, 1)),
			wantErr: `entry 0 ("broadcom"): error in match: pci[0]: error parsing vendor: "14g4" is not hex`,
		},
		{
			name:    "0x prefix in the catalog",
			data:    validCatalog(strings.Replace(validEntry, `vendor: "14e4"`, `vendor: "0x14e4"`, 1)),
			wantErr: `"0x14e4" is not 4 hex digits`,
		},
		{
			name:    "range running backwards",
			data:    validCatalog(strings.Replace(validEntry, `"1639-163c"`, `"163c-1639"`, 1)),
			wantErr: `range "163c-1639" runs backwards`,
		},
		{
			name:    "subclass without class",
			data:    validCatalog(strings.Replace(validEntry, `class: "02"`, `subclass: "00"`, 1)),
			wantErr: "subclass given without class",
		},
		{
			name:    "missing reason",
			data:    validCatalog(strings.Replace(validEntry, "    reason: Needs firmware.\n", "", 1)),
			wantErr: `entry 0 ("broadcom"): reason is missing`,
		},
		{
			name:    "not an official extension name",
			data:    validCatalog(strings.Replace(validEntry, "siderolabs/bnx2-bnx2x", "bnx2-bnx2x", 1)),
			wantErr: `extension "bnx2-bnx2x" is not an official name`,
		},
		{
			name:    "empty match",
			data:    validCatalog(strings.Replace(validEntry, `      pci: [{ vendor: "14e4", devices: ["164a", "1639-163c"], class: "02" }]`+"\n", "", 1)),
			wantErr: "match is empty",
		},
		{
			name:    "duplicate id",
			data:    validCatalog(validEntry + validEntry),
			wantErr: `entry 1 ("broadcom"): id is used twice`,
		},
		{
			name:    "a Talos minor with no tag in the header",
			data:    validCatalog(strings.Replace(validEntry, `talos: ["1.12", "1.13"]`, `talos: ["1.11", "1.12", "1.13"]`, 1)),
			wantErr: "talos 1.11 has no checked tag in the header",
		},
		{
			name:    "a Talos minor claimed without its tag",
			data:    validCatalog(strings.Replace(validEntry, "checked: [v1.12.11, v1.13.9]", "checked: [v1.13.9]", 1)),
			wantErr: "talos 1.12 is claimed but its tag v1.12.11 is not in checked",
		},
		{
			name:    "a tag checked but not claimed",
			data:    validCatalog(strings.Replace(validEntry, `talos: ["1.12", "1.13"]`, `talos: ["1.13"]`, 1)),
			wantErr: "checked tag v1.12.11 is not claimed in talos",
		},
		{
			name:    "unknown field",
			data:    validCatalog(strings.Replace(validEntry, "    reason:", "    reasons: typo\n    reason:", 1)),
			wantErr: "error parsing catalog",
		},
		{
			name:    "header tag of another minor",
			data:    strings.Replace(validCatalog(validEntry), `{ talos: "1.12", tag: v1.12.11`, `{ talos: "1.12", tag: v1.11.6`, 1),
			wantErr: "tag v1.11.6 is not of Talos 1.12",
		},
		{
			name:    "no version",
			data:    strings.Replace(validCatalog(validEntry), `version: "1"`, `version: ""`, 1),
			wantErr: "version is empty",
		},
		{
			name:    "not YAML",
			data:    "{",
			wantErr: "error parsing catalog",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			_, err := extensions.Parse([]byte(tc.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestParseReportsEveryBadEntry(t *testing.T) {
	t.Parallel()

	second := strings.Replace(strings.Replace(validEntry, "id: broadcom", "id: other", 1), "    reason: Needs firmware.\n", "", 1)
	first := strings.Replace(validEntry, `vendor: "14e4"`, `vendor: "x"`, 1)

	_, err := extensions.Parse([]byte(validCatalog(first + second)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `entry 0 ("broadcom")`)
	assert.Contains(t, err.Error(), `entry 1 ("other"): reason is missing`)
}

func TestCatalogNamesAreCheckedPerMinor(t *testing.T) {
	t.Parallel()

	c, err := extensions.Load()
	require.NoError(t, err)

	// Extensions that appeared after 1.9 must not claim the minors before them.
	firstMinor := map[string]string{
		"siderolabs/mellanox-mstflint": "1.12",
		"siderolabs/xe":                "1.12",
		"siderolabs/intel-npu":         "1.13",
		"siderolabs/hailort":           "1.11",
		"siderolabs/tenstorrent":       "1.11",
	}

	for _, e := range c.Entries() {
		if first, ok := firstMinor[e.Extension]; ok {
			assert.Equal(t, first, e.Talos[0], e.ID)
		}

		assert.True(t, slices.IsSortedFunc(e.Talos, compareMinor), e.ID)
	}
}

// compareMinor orders "1.9" before "1.10".
func compareMinor(a, b string) int {
	minor := func(v string) int {
		_, m, _ := strings.Cut(v, ".")
		n, _ := strconv.Atoi(m)

		return n
	}

	return minor(a) - minor(b)
}
