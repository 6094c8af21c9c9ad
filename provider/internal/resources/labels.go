package resources

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// LabelPrefix marks the labels the provider derives from a machine's inventory. It is
// reserved: neither --machine-labels nor a user may set a label under it (or under a
// subdomain of anvil.dev), so a derived label always says what the hardware is.
const LabelPrefix = "anvil.dev/"

// Label value and name limits, those of Kubernetes (and Omni): selectors written for
// either read the same here.
const (
	maxLabelValueLen  = 63
	maxLabelPrefixLen = 253
)

var (
	labelNameRe   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefixRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	invalidRunRe  = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// ValidateLabelKey checks a label key: an optional DNS-subdomain prefix and "/", then a
// name of at most 63 characters of [A-Za-z0-9._-] that starts and ends alphanumeric.
func ValidateLabelKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}

	switch {
	case key == "":
		return errors.New("label key is empty")
	case hasPrefix && (prefix == "" || len(prefix) > maxLabelPrefixLen || !labelPrefixRe.MatchString(prefix)):
		return fmt.Errorf("label key %q: the prefix must be a DNS subdomain (lower case, at most %d characters)", key, maxLabelPrefixLen)
	case len(name) > maxLabelValueLen || !labelNameRe.MatchString(name):
		return fmt.Errorf("label key %q: the name must be at most %d characters of [A-Za-z0-9._-], starting and ending with a letter or digit", key, maxLabelValueLen)
	}

	return nil
}

// ValidateLabelValue checks a label value: empty, or at most 63 characters of
// [A-Za-z0-9._-] that start and end alphanumeric.
func ValidateLabelValue(value string) error {
	if value == "" {
		return nil
	}

	if len(value) > maxLabelValueLen || !labelNameRe.MatchString(value) {
		return fmt.Errorf("label value %q must be at most %d characters of [A-Za-z0-9._-], starting and ending with a letter or digit", value, maxLabelValueLen)
	}

	return nil
}

// IsReservedLabelKey reports whether key is under the provider's own prefix.
func IsReservedLabelKey(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")

	return ok && (prefix == strings.TrimSuffix(LabelPrefix, "/") || strings.HasSuffix(prefix, "."+strings.TrimSuffix(LabelPrefix, "/")))
}

// ValidateUserLabel checks a label a person sets (--machine-labels, the SetLabels
// transition): valid, and not under the reserved prefix.
func ValidateUserLabel(key, value string) error {
	if err := ValidateLabelKey(key); err != nil {
		return err
	}

	if IsReservedLabelKey(key) {
		return fmt.Errorf("label key %q is under the reserved prefix %s: those labels are derived from the inventory", key, LabelPrefix)
	}

	return ValidateLabelValue(value)
}

// SanitizeLabelValue turns what hardware reports ("Dell Inc.", "Intel(R) Xeon(R)")
// into a valid label value: each run of other characters becomes "-", the ends are
// trimmed to a letter or digit, the length to 63. It returns "" when nothing is left.
func SanitizeLabelValue(s string) string {
	s = invalidRunRe.ReplaceAllString(strings.TrimSpace(s), "-")
	s = strings.Trim(s, "-_.")

	if len(s) > maxLabelValueLen {
		s = strings.TrimRight(s[:maxLabelValueLen], "-_.")
	}

	return s
}

// MachineLabelsType is the type of the MachineLabels resource.
const MachineLabelsType = resource.Type("MachineLabels.anvil.dev")

// MachineLabels carries a machine's effective labels as its own metadata labels: the
// static ones (--machine-labels), those derived from its inventory (under LabelPrefix)
// and the user's own (MachineIntent). Selectors (anvilctl get machines -l, --auto-accept)
// match them. MachineLabelsController is its only writer.
type MachineLabels = typed.Resource[MachineLabelsSpec, MachineLabelsExtension]

// MachineLabelsSpec says where each effective label came from.
type MachineLabelsSpec struct {
	Static  map[string]string `yaml:"static,omitempty" protobuf:"1"`
	Derived map[string]string `yaml:"derived,omitempty" protobuf:"2"`
	User    map[string]string `yaml:"user,omitempty" protobuf:"3"`
	// FromInventory is set once the derived labels come from the agent's inventory, not
	// only from the PXE boot: a selector on hardware can be decided then.
	FromInventory bool `yaml:"fromInventory" protobuf:"4"`
}

// Effective is the machine's label set: static, then derived, then the user's, a later
// source winning (derived keys are reserved, so only a user label overrides a static one).
func (s MachineLabelsSpec) Effective() map[string]string {
	out := make(map[string]string, len(s.Static)+len(s.Derived)+len(s.User))

	maps.Copy(out, s.Static)
	maps.Copy(out, s.Derived)
	maps.Copy(out, s.User)

	return out
}

// NewMachineLabels returns an empty MachineLabels for the machine.
func NewMachineLabels(id resource.ID) *MachineLabels {
	return typed.NewResource[MachineLabelsSpec, MachineLabelsExtension](
		resource.NewMetadata(NamespaceName, MachineLabelsType, id, resource.VersionUndefined),
		MachineLabelsSpec{},
	)
}

// MachineLabelsExtension provides the resource definition of MachineLabels.
type MachineLabelsExtension struct{}

// ResourceDefinition implements typed.Extension.
func (MachineLabelsExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             MachineLabelsType,
		Aliases:          []resource.Type{"machinelabels", "labels", "ml"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "From Inventory", JSONPath: "{.fromInventory}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[MachineLabelsSpec](MachineLabelsType, &MachineLabels{}))
}
