package extensions

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Match says which hardware a catalog or deny-list entry is about. It matches a machine
// when any of its rules does.
type Match struct {
	PCI  []PCIMatch `yaml:"pci,omitempty"`
	CPUs []CPUMatch `yaml:"cpus,omitempty"`
	// Drivers match a driver bound anywhere: to a PCI device or in Hardware.Drivers.
	Drivers []string `yaml:"drivers,omitempty"`
}

// PCIMatch matches one PCI function; every field given must hold.
type PCIMatch struct {
	// Vendor is the 4-digit hex vendor ID, e.g. "14e4".
	Vendor string `yaml:"vendor"`
	// Devices are 4-digit hex device IDs or ranges "lo-hi"; empty means any device.
	Devices []string `yaml:"devices,omitempty"`
	// Exclude are device IDs or ranges that never match, even when Devices would.
	Exclude []string `yaml:"exclude,omitempty"`
	// Class and Subclass are 2-digit hex; Subclass needs Class.
	Class    string `yaml:"class,omitempty"`
	Subclass string `yaml:"subclass,omitempty"`
	// Drivers, when given, require the device to be bound to one of them.
	Drivers []string `yaml:"drivers,omitempty"`
}

// CPUMatch matches a CPU by vendor ("intel", "amd"; any spelling SMBIOS or cpuinfo uses
// reads the same) and, when given, family (compared case-insensitively).
type CPUMatch struct {
	Vendor string `yaml:"vendor"`
	Family string `yaml:"family,omitempty"`
}

// clone returns a deep copy, so callers of Entries cannot change the catalog.
func (m Match) clone() Match {
	out := Match{
		PCI:     slices.Clone(m.PCI),
		CPUs:    slices.Clone(m.CPUs),
		Drivers: slices.Clone(m.Drivers),
	}

	for i := range out.PCI {
		out.PCI[i].Devices = slices.Clone(out.PCI[i].Devices)
		out.PCI[i].Exclude = slices.Clone(out.PCI[i].Exclude)
		out.PCI[i].Drivers = slices.Clone(out.PCI[i].Drivers)
	}

	return out
}

// matcher is a Match with its IDs parsed and its names normalised once, at load.
type matcher struct {
	pci     []pciMatcher
	cpus    []CPUMatch // normalised
	drivers []string   // normalised
}

type pciMatcher struct {
	vendor   uint64
	devices  []idRange
	exclude  []idRange
	class    uint64 // noID: any
	subclass uint64 // noID: any
	drivers  []string
}

// noID stands for a class or subclass a rule does not constrain or a device does not report.
const noID = ^uint64(0)

type idRange struct{ lo, hi uint64 }

func compileMatch(m Match) (matcher, error) {
	if len(m.PCI) == 0 && len(m.CPUs) == 0 && len(m.Drivers) == 0 {
		return matcher{}, errors.New("match is empty: give pci, cpus or drivers")
	}

	var (
		out  matcher
		errs []error
	)

	for i, p := range m.PCI {
		pm, err := compilePCI(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("pci[%d]: %w", i, err))

			continue
		}

		out.pci = append(out.pci, pm)
	}

	for i, c := range m.CPUs {
		vendor := normalizeVendor(c.Vendor)
		if vendor == "" {
			errs = append(errs, fmt.Errorf("cpus[%d]: vendor is empty", i))

			continue
		}

		out.cpus = append(out.cpus, CPUMatch{Vendor: vendor, Family: normalizeWord(c.Family)})
	}

	drivers, err := compileDrivers(m.Drivers)
	if err != nil {
		errs = append(errs, fmt.Errorf("drivers: %w", err))
	}

	out.drivers = drivers

	return out, errors.Join(errs...)
}

func compilePCI(p PCIMatch) (pciMatcher, error) {
	out := pciMatcher{class: noID, subclass: noID}

	var err error

	if out.vendor, err = parseCatalogHex(p.Vendor, 4); err != nil {
		return out, fmt.Errorf("error parsing vendor: %w", err)
	}

	if out.devices, err = parseRanges(p.Devices); err != nil {
		return out, fmt.Errorf("error parsing devices: %w", err)
	}

	if out.exclude, err = parseRanges(p.Exclude); err != nil {
		return out, fmt.Errorf("error parsing exclude: %w", err)
	}

	if p.Class != "" {
		if out.class, err = parseCatalogHex(p.Class, 2); err != nil {
			return out, fmt.Errorf("error parsing class: %w", err)
		}
	}

	if p.Subclass != "" {
		if p.Class == "" {
			return out, errors.New("subclass given without class")
		}

		if out.subclass, err = parseCatalogHex(p.Subclass, 2); err != nil {
			return out, fmt.Errorf("error parsing subclass: %w", err)
		}
	}

	if out.drivers, err = compileDrivers(p.Drivers); err != nil {
		return out, fmt.Errorf("drivers: %w", err)
	}

	return out, nil
}

func compileDrivers(in []string) ([]string, error) {
	out := make([]string, 0, len(in))

	for i, d := range in {
		n := normalizeDriver(d)
		if n == "" {
			return nil, fmt.Errorf("driver %d is empty", i)
		}

		out = append(out, n)
	}

	return out, nil
}

// parseCatalogHex is strict, as reviewed data should be: exactly digits hex digits, no 0x.
func parseCatalogHex(s string, digits int) (uint64, error) {
	if len(s) != digits {
		return 0, fmt.Errorf("%q is not %d hex digits", s, digits)
	}

	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not hex", s)
	}

	return v, nil
}

func parseRanges(in []string) ([]idRange, error) {
	out := make([]idRange, 0, len(in))

	for _, s := range in {
		lo, hi, isRange := strings.Cut(s, "-")
		if !isRange {
			hi = lo
		}

		l, err := parseCatalogHex(lo, 4)
		if err != nil {
			return nil, err
		}

		h, err := parseCatalogHex(hi, 4)
		if err != nil {
			return nil, err
		}

		if l > h {
			return nil, fmt.Errorf("range %q runs backwards", s)
		}

		out = append(out, idRange{l, h})
	}

	return out, nil
}

// facts is a Hardware with its IDs parsed and its names normalised once per call.
type facts struct {
	pci     []pciFacts
	cpus    []CPU // normalised
	drivers map[string]struct{}
}

type pciFacts struct {
	vendor, device  uint64
	class, subclass uint64 // noID: not reported
	driver          string
}

func newFacts(hw Hardware) facts {
	f := facts{drivers: map[string]struct{}{}}

	for _, d := range hw.PCI {
		vendor, okVendor := parseHardwareHex(d.VendorID, 16)
		device, okDevice := parseHardwareHex(d.ProductID, 16)

		if !okVendor || !okDevice {
			continue // an unreadable device is no evidence of anything
		}

		pf := pciFacts{vendor: vendor, device: device, class: noID, subclass: noID, driver: normalizeDriver(d.Driver)}

		if v, ok := parseHardwareHex(d.ClassID, 8); ok {
			pf.class = v
		}

		if v, ok := parseHardwareHex(d.SubclassID, 8); ok {
			pf.subclass = v
		}

		if pf.driver != "" {
			f.drivers[pf.driver] = struct{}{}
		}

		f.pci = append(f.pci, pf)
	}

	for _, c := range hw.CPUs {
		if v := normalizeVendor(c.Vendor); v != "" {
			f.cpus = append(f.cpus, CPU{Vendor: v, Family: normalizeWord(c.Family)})
		}
	}

	for _, d := range hw.Drivers {
		if n := normalizeDriver(d); n != "" {
			f.drivers[n] = struct{}{}
		}
	}

	return f
}

// parseHardwareHex is lenient, as inventories differ: "0x14E4", "14e4" and " 14e4\n" are one ID.
func parseHardwareHex(s string, bits int) (uint64, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "0x")

	if s == "" {
		return 0, false
	}

	v, err := strconv.ParseUint(s, 16, bits)
	if err != nil {
		return 0, false
	}

	return v, true
}

func (m *matcher) matches(f *facts) bool {
	for i := range m.pci {
		for j := range f.pci {
			if m.pci[i].matches(&f.pci[j]) {
				return true
			}
		}
	}

	for _, want := range m.cpus {
		for _, have := range f.cpus {
			if want.Vendor == have.Vendor && (want.Family == "" || want.Family == have.Family) {
				return true
			}
		}
	}

	for _, d := range m.drivers {
		if _, ok := f.drivers[d]; ok {
			return true
		}
	}

	return false
}

func (p *pciMatcher) matches(d *pciFacts) bool {
	switch {
	case p.vendor != d.vendor:
		return false
	case len(p.devices) > 0 && !inRanges(p.devices, d.device):
		return false
	case inRanges(p.exclude, d.device):
		return false
	case p.class != noID && p.class != d.class:
		return false
	case p.subclass != noID && p.subclass != d.subclass:
		return false
	case len(p.drivers) > 0 && !slices.Contains(p.drivers, d.driver):
		return false
	}

	return true
}

func inRanges(ranges []idRange, id uint64) bool {
	for _, r := range ranges {
		if r.lo <= id && id <= r.hi {
			return true
		}
	}

	return false
}

// normalizeVendor folds the ways firmware and the kernel spell a CPU vendor into one
// word: "GenuineIntel", "Intel(R) Corporation" and "Intel" are all "intel".
func normalizeVendor(s string) string {
	w := normalizeWord(s)

	switch {
	case w == "":
		return ""
	case strings.Contains(w, "intel"):
		return "intel"
	case strings.Contains(w, "amd"), strings.Contains(w, "advancedmicrodevices"):
		return "amd"
	case strings.Contains(w, "hygon"):
		return "hygon"
	default:
		return w
	}
}

// normalizeWord lowercases s and keeps only its letters and digits, dropping "(R)" and
// "(TM)" marks, so "Advanced Micro Devices, Inc." becomes "advancedmicrodevicesinc".
func normalizeWord(s string) string {
	s = strings.ToLower(s)
	s = strings.NewReplacer("(r)", "", "(tm)", "", "®", "", "™", "").Replace(s)

	var b strings.Builder

	for _, r := range s {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		}
	}

	return b.String()
}

// normalizeDriver compares driver names as modprobe does: "-" and "_" are the same.
func normalizeDriver(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
}
