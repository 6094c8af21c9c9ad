package extensions

import (
	"slices"
	"strings"
)

// Merge builds a schematic's extension list from what the catalog detected and what the
// user requested and excluded: sorted, without duplicates, detected ones the user excluded
// left out, and requested ones always kept (an explicit request wins over an exclusion).
// A bare name ("intel-ucode") is taken as the official extension ("siderolabs/intel-ucode").
func Merge(detected, requested, excluded []string) []string {
	excludedSet := map[string]struct{}{}

	for _, e := range excluded {
		if n := canonicalName(e); n != "" {
			excludedSet[n] = struct{}{}
		}
	}

	out := make([]string, 0, len(detected)+len(requested))

	for _, d := range detected {
		if n := canonicalName(d); n != "" {
			if _, skip := excludedSet[n]; !skip {
				out = append(out, n)
			}
		}
	}

	for _, r := range requested {
		if n := canonicalName(r); n != "" {
			out = append(out, n)
		}
	}

	slices.Sort(out)

	return slices.Compact(out)
}

func canonicalName(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.Contains(s, "/") {
		return s
	}

	return OfficialPrefix + s
}
