// Package disksel selects disks from a machine's inventory: the install disk of an
// allocation ("the smallest NVMe of at least 400 GB"), and the disks a wipe keeps. The
// provider resolves selectors against the inventory an agent reported; the agent
// evaluates the same selectors against the disks it sees when it wipes, so both read
// them alike.
//
// A selector is a comma-separated list of terms, all of which a disk must meet:
//
//	serial=S1234          the disk's serial (a glob: * stands for any text, as in Talos)
//	wwid=eui.0025*        its WWID (a glob)
//	model=SAMSUNG*        its model (a glob)
//	bus=/pci0000:00/*     its bus path (a glob)
//	name=nvme0n1          the agent kernel's name (a glob; names change between boots)
//	transport=nvme        nvme, sata, sas, virtio, usb, mmc, ... (exact)
//	type=nvme             Talos' disk types: nvme, ssd, hdd, sd
//	size>=400GB           size against a bound: =, >=, <=, >, < (GB, GiB, TB, ...)
//	pick=smallest         of several matches, the smallest (or largest) one
package disksel

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/ryanuber/go-glob"
)

// Disk is what a selector reads of a disk.
type Disk struct {
	// Name is the kernel's name ("nvme0n1", "vda").
	Name string
	// Size in bytes.
	Size       uint64
	Model      string
	Serial     string
	WWID       string
	Transport  string
	BusPath    string
	Rotational bool
	CDROM      bool
	Readonly   bool
}

// String describes the disk for a person choosing among candidates.
func (d Disk) String() string {
	parts := []string{humanize.Bytes(d.Size)}

	for _, p := range []struct{ key, value string }{
		{"transport", d.Transport}, {"model", d.Model}, {"serial", d.Serial}, {"wwid", d.WWID},
	} {
		if p.value != "" {
			parts = append(parts, p.key+" "+p.value)
		}
	}

	return d.Name + " (" + strings.Join(parts, ", ") + ")"
}

// Pick says which of several matching disks a selector takes.
type Pick string

// Picks.
const (
	// PickOnly takes a match only when it is the only one.
	PickOnly     Pick = ""
	PickSmallest Pick = "smallest"
	PickLargest  Pick = "largest"
)

// Selector is a parsed selector. The zero Selector matches every disk.
type Selector struct {
	terms []term
	pick  Pick
	text  string
}

type term struct {
	key, op, value string
	size           uint64
}

// globKeys are the terms matched as globs against the disk's field.
var globKeys = map[string]func(Disk) string{
	"serial": func(d Disk) string { return d.Serial },
	"wwid":   func(d Disk) string { return d.WWID },
	"model":  func(d Disk) string { return d.Model },
	"bus":    func(d Disk) string { return d.BusPath },
	"name":   func(d Disk) string { return d.Name },
}

// Types are Talos' install disk types.
var Types = []string{"nvme", "ssd", "hdd", "sd"}

// maxSelector bounds a selector's text: it comes from flags, API calls and forms.
const maxSelector = 1024

// Parse reads a selector; an empty text is the zero Selector.
func Parse(text string) (Selector, error) {
	text = strings.TrimSpace(text)
	if len(text) > maxSelector {
		return Selector{}, fmt.Errorf("disk selector is %d bytes long (at most %d)", len(text), maxSelector)
	}

	sel := Selector{text: text}
	if text == "" {
		return sel, nil
	}

	seen := map[string]bool{}

	for raw := range strings.SplitSeq(text, ",") {
		t, err := parseTerm(strings.TrimSpace(raw))
		if err != nil {
			return Selector{}, fmt.Errorf("disk selector %q: %w", text, err)
		}

		if t.key == "pick" {
			if sel.pick != PickOnly {
				return Selector{}, fmt.Errorf("disk selector %q: pick is given twice", text)
			}

			sel.pick = Pick(t.value)

			continue
		}

		// Two size bounds make a range; any other key twice is a mistake.
		if dup := t.key + t.op; seen[dup] || (t.key != "size" && seen[t.key]) {
			return Selector{}, fmt.Errorf("disk selector %q: %s is given twice", text, t.key)
		}

		seen[t.key], seen[t.key+t.op] = true, true
		sel.terms = append(sel.terms, t)
	}

	return sel, nil
}

func parseTerm(raw string) (term, error) {
	if raw == "" {
		return term{}, errors.New("an empty term")
	}

	// The operator is the first of <, >, = (with an = after < or >).
	at := strings.IndexAny(raw, "<>=")
	if at <= 0 {
		return term{}, fmt.Errorf("%q is not key=value", raw)
	}

	op := raw[at : at+1]
	if op != "=" && strings.HasPrefix(raw[at+1:], "=") {
		op += "="
	}

	t := term{key: strings.TrimSpace(raw[:at]), op: op, value: strings.TrimSpace(raw[at+len(op):])}

	if t.key == "size" {
		size, err := humanize.ParseBytes(t.value)
		if err != nil {
			return term{}, fmt.Errorf("size %q: want a size such as 400GB or 1.5TiB", t.value)
		}

		t.size = size

		return t, nil
	}

	if op != "=" {
		return term{}, fmt.Errorf("%q: only size compares with %s", raw, op)
	}

	return t, validTerm(t)
}

func validTerm(t term) error {
	if t.value == "" {
		return fmt.Errorf("%s has no value", t.key)
	}

	switch t.key {
	case "pick":
		if Pick(t.value) != PickSmallest && Pick(t.value) != PickLargest {
			return fmt.Errorf("pick=%s: want smallest or largest", t.value)
		}
	case "type":
		if !slices.Contains(Types, t.value) {
			return fmt.Errorf("type=%s: want one of %s", t.value, strings.Join(Types, ", "))
		}
	case "transport":
	default:
		if globKeys[t.key] == nil {
			return fmt.Errorf("unknown key %q (want serial, wwid, model, bus, name, transport, type, size, pick)", t.key)
		}
	}

	return nil
}

// String is the selector as it was written.
func (s Selector) String() string { return s.text }

// IsZero says whether the selector is empty (it matches every disk).
func (s Selector) IsZero() bool { return len(s.terms) == 0 && s.pick == PickOnly }

// Matches says whether the disk meets every term (pick aside).
func (s Selector) Matches(d Disk) bool {
	for _, t := range s.terms {
		if !t.matches(d) {
			return false
		}
	}

	return true
}

func (t term) matches(d Disk) bool {
	switch t.key {
	case "size":
		switch t.op {
		case ">=":
			return d.Size >= t.size
		case "<=":
			return d.Size <= t.size
		case ">":
			return d.Size > t.size
		case "<":
			return d.Size < t.size
		default:
			return d.Size == t.size
		}
	case "transport":
		return d.Transport == t.value
	case "type":
		return isType(d, t.value)
	default:
		return glob.Glob(t.value, globKeys[t.key](d))
	}
}

// isType reads a Talos disk type as Talos does: by transport for nvme and sd, by
// rotation for ssd and hdd.
func isType(d Disk, typ string) bool {
	switch typ {
	case "nvme":
		return d.Transport == "nvme"
	case "sd":
		return d.Transport == "mmc"
	case "hdd":
		return d.Rotational
	default: // ssd
		return !d.Rotational
	}
}

// Installable says whether Talos can be installed on the disk at all.
func Installable(d Disk) bool {
	return !d.CDROM && !d.Readonly && d.Size > 0 && d.Transport != "" && d.Transport != "dm"
}

// Error is a selector that resolved to no disk or to several: it lists the candidates,
// so that the person choosing can narrow it.
type Error struct {
	Selector string
	// Matches are the disks that matched (none, or more than one).
	Matches []Disk
	// Disks are the machine's installable disks.
	Disks []Disk
}

func (e *Error) Error() string {
	if len(e.Matches) == 0 {
		return fmt.Sprintf("install disk selector %q matches none of the machine's disks: %s", e.Selector, list(e.Disks))
	}

	return fmt.Sprintf("install disk selector %q matches %d disks: %s; narrow it (serial=…) or add pick=smallest or pick=largest",
		e.Selector, len(e.Matches), list(e.Matches))
}

func list(disks []Disk) string {
	if len(disks) == 0 {
		return "none"
	}

	s := make([]string, 0, len(disks))
	for _, d := range disks {
		s = append(s, d.String())
	}

	return strings.Join(s, "; ")
}

// Resolve picks the one installable disk the selector means among the machine's disks,
// or returns an *Error listing the candidates.
func (s Selector) Resolve(disks []Disk) (Disk, error) {
	var installable, matches []Disk

	for _, d := range disks {
		if !Installable(d) {
			continue
		}

		installable = append(installable, d)

		if s.Matches(d) {
			matches = append(matches, d)
		}
	}

	if s.pick != PickOnly && len(matches) > 1 {
		slices.SortStableFunc(matches, func(a, b Disk) int {
			if s.pick == PickLargest {
				a, b = b, a
			}

			switch {
			case a.Size < b.Size:
				return -1
			case a.Size > b.Size:
				return 1
			}

			return 0
		})

		// A tie for the smallest (largest) is as ambiguous as no pick at all.
		if matches[0].Size != matches[1].Size {
			matches = matches[:1]
		} else {
			tied := matches[:1]
			for _, d := range matches[1:] {
				if d.Size == matches[0].Size {
					tied = append(tied, d)
				}
			}

			matches = tied
		}
	}

	if len(matches) != 1 {
		return Disk{}, &Error{Selector: s.text, Matches: matches, Disks: installable}
	}

	return matches[0], nil
}

// Identity is how Talos' config names a disk stably: by serial or WWID, never by a
// kernel name, which differs between the agent's kernel and Talos' and between boots.
type Identity struct {
	Serial string `yaml:"serial,omitempty"`
	WWID   string `yaml:"wwid,omitempty"`
}

// String is the identity as a selector term.
func (id Identity) String() string {
	if id.Serial != "" {
		return "serial=" + id.Serial
	}

	return "wwid=" + id.WWID
}

// Selector is the identity as a selector that matches it alone.
func (id Identity) Selector() Selector {
	if id.Serial != "" {
		return Selector{terms: []term{{key: "serial", op: "=", value: id.Serial}}, text: id.String()}
	}

	return Selector{terms: []term{{key: "wwid", op: "=", value: id.WWID}}, text: id.String()}
}

// IdentityOf is the stable identity of disk d among the machine's disks: its serial when
// no other disk has it, else its WWID likewise; a disk with neither cannot be named in
// Talos' config.
func IdentityOf(d Disk, disks []Disk) (Identity, error) {
	unique := func(field func(Disk) string) bool {
		v := field(d)
		if v == "" || strings.Contains(v, "*") { // Talos reads * as a glob
			return false
		}

		for _, o := range disks {
			if o.Name != d.Name && field(o) == v {
				return false
			}
		}

		return true
	}

	switch {
	case unique(func(d Disk) string { return d.Serial }):
		return Identity{Serial: d.Serial}, nil
	case unique(func(d Disk) string { return d.WWID }):
		return Identity{WWID: d.WWID}, nil
	}

	return Identity{}, fmt.Errorf("disk %s has no serial or WWID of its own to name it by in Talos' config", d)
}

// ResolveIdentity is Resolve, then IdentityOf the disk: the one disk the selector means,
// and how Talos' config names it. Zero or several matches are an *Error.
func (s Selector) ResolveIdentity(disks []Disk) (Disk, Identity, error) {
	disk, err := s.Resolve(disks)
	if err != nil {
		return Disk{}, Identity{}, err
	}

	id, err := IdentityOf(disk, disks)
	if err != nil {
		return Disk{}, Identity{}, fmt.Errorf("install disk selector %q: %w", s.text, err)
	}

	return disk, id, nil
}
