package extensions

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizeVendor(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ in, want string }{
		{"GenuineIntel", "intel"},
		{"Intel(R) Corporation", "intel"},
		{"Intel", "intel"},
		{"  intel corporation ", "intel"},
		{"AuthenticAMD", "amd"},
		{"Advanced Micro Devices, Inc.", "amd"},
		{"AMD", "amd"},
		{"HygonGenuine", "hygon"},
		{"QEMU", "qemu"},
		{"", ""},
		{"(R)", ""},
	} {
		assert.Equal(t, tc.want, normalizeVendor(tc.in), tc.in)
	}
}

func TestParseHardwareHex(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in   string
		bits int
		want uint64
		ok   bool
	}{
		{"14e4", 16, 0x14e4, true},
		{"0x14E4", 16, 0x14e4, true},
		{" 0x8086\n", 16, 0x8086, true},
		{"02", 8, 2, true},
		{"0x0c", 8, 0xc, true},
		{"020000", 8, 0, false}, // a whole class code is not a class byte
		{"", 16, 0, false},
		{"0x", 16, 0, false},
		{"zz", 16, 0, false},
	} {
		got, ok := parseHardwareHex(tc.in, tc.bits)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestTalosMinor(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"v1.11.3", "1.11", true},
		{"1.11", "1.11", true},
		{"v1.12.0-beta.1", "1.12", true},
		{"1.9.6", "1.9", true},
		{"latest", "", false},
		{"", "", false},
	} {
		got, ok := talosMinor(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestPCIMatcher(t *testing.T) {
	t.Parallel()

	m, err := compileMatch(Match{PCI: []PCIMatch{{
		Vendor: "10de", Class: "03", Devices: []string{"1e00-ffff"}, Exclude: []string{"2330"}, Drivers: []string{"nvidia-drm"},
	}}})
	assert.NoError(t, err)

	for _, tc := range []struct {
		name string
		dev  PCIDevice
		want bool
	}{
		{"in range, bound", PCIDevice{VendorID: "10de", ProductID: "20b0", ClassID: "03", Driver: "nvidia_drm"}, true},
		{"range edge", PCIDevice{VendorID: "10de", ProductID: "1e00", ClassID: "03", Driver: "nvidia-drm"}, true},
		{"below range", PCIDevice{VendorID: "10de", ProductID: "1dff", ClassID: "03", Driver: "nvidia-drm"}, false},
		{"excluded", PCIDevice{VendorID: "10de", ProductID: "2330", ClassID: "03", Driver: "nvidia-drm"}, false},
		{"other class", PCIDevice{VendorID: "10de", ProductID: "20b0", ClassID: "04", Driver: "nvidia-drm"}, false},
		{"unknown class", PCIDevice{VendorID: "10de", ProductID: "20b0", Driver: "nvidia-drm"}, false},
		{"not bound", PCIDevice{VendorID: "10de", ProductID: "20b0", ClassID: "03"}, false},
		{"other vendor", PCIDevice{VendorID: "1002", ProductID: "20b0", ClassID: "03", Driver: "nvidia-drm"}, false},
	} {
		f := newFacts(Hardware{PCI: []PCIDevice{tc.dev}})
		assert.Equal(t, tc.want, m.matches(&f), tc.name)
	}
}
