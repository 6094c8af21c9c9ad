package extensions

import (
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v4"
)

//go:embed kexec-deny.yaml
var denyListYAML []byte

// DenyList names hardware that must not cross a kexec: the next kernel would inherit a
// device its driver cannot reset. --kexec=auto reboots through the firmware when it matches.
type DenyList struct {
	version  string
	entries  []DenyEntry
	matchers []matcher
}

// DenyEntry is one kind of hardware that breaks across kexec, with why and where that is
// documented.
type DenyEntry struct {
	ID    string `yaml:"id"`
	Match Match  `yaml:"match"`
	// Reason says what the old kernel leaves behind and why the new one cannot recover it.
	Reason string `yaml:"reason"`
	// Sources are public records of the problem: kernel commits, bug trackers, list threads.
	Sources []string `yaml:"sources"`
}

type denyListFile struct {
	Version string      `yaml:"version"`
	Entries []DenyEntry `yaml:"entries"`
}

// LoadDenyList parses and validates the deny list embedded in the binary.
func LoadDenyList() (*DenyList, error) {
	d, err := ParseDenyList(denyListYAML)
	if err != nil {
		return nil, fmt.Errorf("error loading the embedded kexec deny list: %w", err)
	}

	return d, nil
}

// ParseDenyList parses and validates a deny list: a version and entries that each have a
// unique id, a non-empty match, a reason and at least one http(s) source.
func ParseDenyList(data []byte) (*DenyList, error) {
	var file denyListFile

	if err := yaml.Load(data, &file, yaml.WithKnownFields(), yaml.WithUniqueKeys()); err != nil {
		return nil, fmt.Errorf("error parsing kexec deny list: %w", err)
	}

	if strings.TrimSpace(file.Version) == "" {
		return nil, errors.New("error validating kexec deny list: version is empty")
	}

	d := &DenyList{version: file.Version, entries: file.Entries}

	var (
		errs []error
		seen = map[string]struct{}{}
	)

	for i, e := range file.Entries {
		m, err := validateDenyEntry(e, seen)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %d (%q): %w", i, e.ID, err))

			continue
		}

		d.matchers = append(d.matchers, m)
	}

	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("error validating kexec deny list: %w", err)
	}

	return d, nil
}

func validateDenyEntry(e DenyEntry, seen map[string]struct{}) (matcher, error) {
	switch {
	case !idPattern.MatchString(e.ID):
		return matcher{}, errors.New("id must be lowercase words joined by '-'")
	case strings.TrimSpace(e.Reason) == "":
		return matcher{}, errors.New("reason is missing")
	case len(e.Sources) == 0:
		return matcher{}, errors.New("sources are missing: an entry needs a public record of the problem")
	}

	if _, dup := seen[e.ID]; dup {
		return matcher{}, errors.New("id is used twice")
	}

	seen[e.ID] = struct{}{}

	for _, s := range e.Sources {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return matcher{}, fmt.Errorf("source %q is not an http(s) URL", s)
		}
	}

	m, err := compileMatch(e.Match)
	if err != nil {
		return matcher{}, fmt.Errorf("error in match: %w", err)
	}

	return m, nil
}

// Version is the deny list's own version.
func (d *DenyList) Version() string { return d.version }

// Len is the number of entries.
func (d *DenyList) Len() int { return len(d.entries) }

// Entries lists the entries, in file order, as copies.
func (d *DenyList) Entries() []DenyEntry {
	out := make([]DenyEntry, len(d.entries))

	for i, e := range d.entries {
		e.Match = e.Match.clone()
		e.Sources = append([]string(nil), e.Sources...)
		out[i] = e
	}

	return out
}

// Match returns "id: reason (source)" for each entry hw matches, in file order; none means
// kexec is safe as far as the list knows.
func (d *DenyList) Match(hw Hardware) []string {
	f := newFacts(hw)

	var reasons []string

	for i := range d.entries {
		if d.matchers[i].matches(&f) {
			e := &d.entries[i]
			reasons = append(reasons, fmt.Sprintf("%s: %s (%s)", e.ID, e.Reason, e.Sources[0]))
		}
	}

	return reasons
}
