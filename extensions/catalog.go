package extensions

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"go.yaml.in/yaml/v4"
)

// OfficialPrefix starts the name of every extension Sidero Labs publishes.
const OfficialPrefix = "siderolabs/"

//go:embed catalog.yaml
var catalogYAML []byte

// Catalog is the reviewed mapping from hardware to official Talos system extensions.
type Catalog struct {
	version  string
	checked  []Check
	entries  []Entry
	matchers []matcher
}

// Check records one siderolabs/extensions release tag the catalog's names were checked at.
type Check struct {
	// Talos is the minor the tag belongs to, e.g. "1.11".
	Talos  string `yaml:"talos"`
	Tag    string `yaml:"tag"`
	Commit string `yaml:"commit"`
}

// Entry maps one kind of hardware to one extension, with the reason it needs it.
type Entry struct {
	ID string `yaml:"id"`
	// Extension is the official name, "siderolabs/<name>".
	Extension string `yaml:"extension"`
	Match     Match  `yaml:"match"`
	// Reason is one sentence: why this hardware needs the extension.
	Reason string `yaml:"reason"`
	// Optional entries name an extension that helps but that the hardware works without.
	Optional bool `yaml:"optional,omitempty"`
	// Checked are the release tags the name was found at; Talos the minors they stand for.
	Checked []string `yaml:"checked"`
	Talos   []string `yaml:"talos"`
}

// Suggestion is an extension the catalog suggests for a machine.
type Suggestion struct {
	Extension string
	// Reasons are "id: reason" for each entry that matched, in catalog order.
	Reasons []string
	// Optional is true when every entry that matched marks the extension optional.
	Optional bool
}

type catalogFile struct {
	Version string  `yaml:"version"`
	Checked []Check `yaml:"checked"`
	Entries []Entry `yaml:"entries"`
}

var (
	idPattern        = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	extensionPattern = regexp.MustCompile(`^siderolabs/[a-z0-9]+(-[a-z0-9]+)*$`)
	minorPattern     = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	tagPattern       = regexp.MustCompile(`^v([0-9]+\.[0-9]+)\.[0-9]+$`)
	commitPattern    = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Load parses and validates the catalog embedded in the binary.
func Load() (*Catalog, error) {
	c, err := Parse(catalogYAML)
	if err != nil {
		return nil, fmt.Errorf("error loading the embedded extensions catalog: %w", err)
	}

	return c, nil
}

// Parse parses and validates a catalog: a version, the tags checked (one per Talos minor)
// and entries that each have an id (unique), an official extension name, a non-empty match
// with valid hex IDs, a reason, and Talos minors backed by the tags they were checked at.
func Parse(data []byte) (*Catalog, error) {
	var file catalogFile

	if err := yaml.Load(data, &file, yaml.WithKnownFields(), yaml.WithUniqueKeys()); err != nil {
		return nil, fmt.Errorf("error parsing catalog: %w", err)
	}

	tagOf, err := validateHeader(file)
	if err != nil {
		return nil, err
	}

	c := &Catalog{
		version:  file.Version,
		checked:  file.Checked,
		entries:  file.Entries,
		matchers: make([]matcher, 0, len(file.Entries)),
	}

	var (
		errs []error
		seen = map[string]struct{}{}
	)

	for i, e := range file.Entries {
		m, err := validateEntry(e, tagOf, seen)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %d (%q): %w", i, e.ID, err))

			continue
		}

		c.matchers = append(c.matchers, m)
	}

	if err = errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("error validating catalog: %w", err)
	}

	return c, nil
}

// validateHeader returns the tag checked for each Talos minor.
func validateHeader(file catalogFile) (map[string]string, error) {
	if strings.TrimSpace(file.Version) == "" {
		return nil, errors.New("error validating catalog: version is empty")
	}

	if len(file.Checked) == 0 {
		return nil, errors.New("error validating catalog: no checked tags")
	}

	tagOf := map[string]string{}

	for i, ch := range file.Checked {
		m := tagPattern.FindStringSubmatch(ch.Tag)

		switch {
		case !minorPattern.MatchString(ch.Talos):
			return nil, fmt.Errorf("error validating catalog: checked[%d]: Talos minor %q is not like \"1.11\"", i, ch.Talos)
		case m == nil:
			return nil, fmt.Errorf("error validating catalog: checked[%d]: tag %q is not a release tag like v1.11.6", i, ch.Tag)
		case m[1] != ch.Talos:
			return nil, fmt.Errorf("error validating catalog: checked[%d]: tag %s is not of Talos %s", i, ch.Tag, ch.Talos)
		case !commitPattern.MatchString(ch.Commit):
			return nil, fmt.Errorf("error validating catalog: checked[%d]: commit %q is not a full commit hash", i, ch.Commit)
		}

		if _, dup := tagOf[ch.Talos]; dup {
			return nil, fmt.Errorf("error validating catalog: checked[%d]: Talos %s is checked twice", i, ch.Talos)
		}

		tagOf[ch.Talos] = ch.Tag
	}

	return tagOf, nil
}

func validateEntry(e Entry, tagOf map[string]string, seen map[string]struct{}) (matcher, error) {
	switch {
	case !idPattern.MatchString(e.ID):
		return matcher{}, errors.New("id must be lowercase words joined by '-'")
	case !extensionPattern.MatchString(e.Extension):
		return matcher{}, fmt.Errorf("extension %q is not an official name like siderolabs/intel-ucode", e.Extension)
	case strings.TrimSpace(e.Reason) == "":
		return matcher{}, errors.New("reason is missing")
	case len(e.Talos) == 0:
		return matcher{}, errors.New("talos versions are missing")
	case len(e.Checked) == 0:
		return matcher{}, errors.New("checked tags are missing")
	}

	if _, dup := seen[e.ID]; dup {
		return matcher{}, errors.New("id is used twice")
	}

	seen[e.ID] = struct{}{}

	// Each Talos minor claimed must be backed by that minor's tag, and each tag by a claim.
	for _, minor := range e.Talos {
		tag, ok := tagOf[minor]
		if !ok {
			return matcher{}, fmt.Errorf("talos %s has no checked tag in the header", minor)
		}

		if !slices.Contains(e.Checked, tag) {
			return matcher{}, fmt.Errorf("talos %s is claimed but its tag %s is not in checked", minor, tag)
		}
	}

	for _, tag := range e.Checked {
		m := tagPattern.FindStringSubmatch(tag)
		if m == nil || tagOf[m[1]] != tag {
			return matcher{}, fmt.Errorf("checked tag %q is not one of the header's tags", tag)
		}

		if !slices.Contains(e.Talos, m[1]) {
			return matcher{}, fmt.Errorf("checked tag %s is not claimed in talos", tag)
		}
	}

	m, err := compileMatch(e.Match)
	if err != nil {
		return matcher{}, fmt.Errorf("error in match: %w", err)
	}

	return m, nil
}

// Version is the catalog's own version.
func (c *Catalog) Version() string { return c.version }

// Len is the number of entries.
func (c *Catalog) Len() int { return len(c.entries) }

// Checked lists the release tags the catalog's names were checked at.
func (c *Catalog) Checked() []Check { return slices.Clone(c.checked) }

// Entries lists the entries, in catalog order, as copies.
func (c *Catalog) Entries() []Entry {
	out := make([]Entry, len(c.entries))

	for i, e := range c.entries {
		e.Match = e.Match.clone()
		e.Checked = slices.Clone(e.Checked)
		e.Talos = slices.Clone(e.Talos)
		out[i] = e
	}

	return out
}

// Suggest returns the extensions the catalog suggests for hw, one per extension, sorted by
// name. Entries whose Talos versions exclude talosVersion ("v1.11.3", "1.11") are left out;
// an empty talosVersion filters nothing, and one that does not parse matches no entry, as
// the catalog cannot vouch for any name there.
func (c *Catalog) Suggest(hw Hardware, talosVersion string) []Suggestion {
	minor, filter := "", talosVersion != ""
	if filter {
		var ok bool

		if minor, ok = talosMinor(talosVersion); !ok {
			return nil
		}
	}

	f := newFacts(hw)
	byName := map[string]*Suggestion{}

	for i := range c.entries {
		e := &c.entries[i]

		if filter && !slices.Contains(e.Talos, minor) {
			continue
		}

		if !c.matchers[i].matches(&f) {
			continue
		}

		s, ok := byName[e.Extension]
		if !ok {
			s = &Suggestion{Extension: e.Extension, Optional: true}
			byName[e.Extension] = s
		}

		s.Reasons = append(s.Reasons, e.ID+": "+e.Reason)
		s.Optional = s.Optional && e.Optional
	}

	out := make([]Suggestion, 0, len(byName))

	for _, s := range byName {
		out = append(out, *s)
	}

	slices.SortFunc(out, func(a, b Suggestion) int { return strings.Compare(a.Extension, b.Extension) })

	return out
}

// talosMinor reads "v1.11.3", "1.11.0-beta.1" or "1.11" as "1.11".
func talosMinor(v string) (string, bool) {
	sv, err := semver.ParseTolerant(strings.TrimSpace(v))
	if err != nil {
		return "", false
	}

	return fmt.Sprintf("%d.%d", sv.Major, sv.Minor), true
}
