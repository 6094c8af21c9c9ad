package modules

import (
	"path"
	"testing"
)

func TestMatch(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", true},
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00008086d00001000sv00001AF4sd00000001bc02sc00i00", false},
		{"virtio:d00000001v*", "virtio:d00000001v00001AF4", true},
		{"virtio:d00000001v*", "virtio:d00000002v00001AF4", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"", "", true},
		{"", "x", false},
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"d[2-9]*", "d5x", true},
		{"d[2-9]*", "d1x", false},
		{"d[!0]*", "d1", true},
		{"d[!0]*", "d0", false},
		{"d[^0]*", "d0", false},
		{"d[]x]", "d]", true},
		{"d[abc", "da", false}, // unclosed class never matches
		{"dmi*:pn*/weird*", "dmi:bvnX:pnA/weird/thing:", true},
		{"acpi*:IPI0001:*", "acpi:IPI0001:", true},
		{"acpi*:IPI0001:*", "acpi:IPI0002:", false},
	} {
		if got := match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// FuzzMatch checks match against path.Match wherever the latter's rules
// are the same (no '/', no '\\', no '!' classes) and that it never panics.
func FuzzMatch(f *testing.F) {
	f.Add("pci:v*d*", "pci:v0001d0002")
	f.Add("a[b-d]?*", "acxx")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		got := match(pattern, name)

		for _, c := range pattern + name {
			if c == '/' || c == '\\' || c == '!' || c == '^' || c == '-' || c == ']' || c >= 0x80 {
				return
			}
		}

		want, err := path.Match(pattern, name)
		if err == nil && got != want {
			t.Fatalf("match(%q, %q) = %v, path.Match says %v", pattern, name, got, want)
		}
	})
}
