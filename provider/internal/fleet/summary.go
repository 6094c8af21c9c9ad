package fleet

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/provider/internal/identity"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// LabelExtensionPrefix is the provider's controllers.LabelExtensionPrefix: the derived
// labels of suggested extensions.
const LabelExtensionPrefix = "anvil.dev/ext-"

// PowerSummary is "<backend> <state>", with what the provider wants when it differs and
// why the BMC could not be driven: "ipmi on", "api off (want on)", "redfish unknown
// [unreachable]"; "manual" for a machine without a BMC.
func (r Record) PowerSummary() string {
	want := resources.PowerState("")
	if r.Power != nil {
		want = r.Power.Desired
	}

	if r.Intent.Power == resources.PowerOn || r.Intent.Power == resources.PowerOff {
		want = r.Intent.Power
	}

	if r.BMC == nil || r.BMC.Kind == "" || r.BMC.Kind == "none" {
		if want != "" {
			return "manual (want " + string(want) + ")"
		}

		return "manual"
	}

	out := r.BMC.Kind + " " + string(r.PowerState())
	if want != "" && want != r.PowerState() {
		out += " (want " + string(want) + ")"
	}

	if c := r.PowerCondition(); c != "" && c != "ok" {
		out += " [" + c + "]"
	}

	return out
}

// PowerState is the power last read from the machine's BMC, unknown when none was.
func (r Record) PowerState() resources.PowerState {
	if r.Power != nil && r.Power.State != "" {
		return r.Power.State
	}

	return resources.PowerUnknown
}

// PowerCondition is how the BMC answered the last time ("ok", "unreachable", …), empty
// when nobody drove it.
func (r Record) PowerCondition() string {
	if r.Power == nil {
		return ""
	}

	return r.Power.Condition
}

// OmniSummary is what Omni decides of the machine: its acceptance, the Talos version of
// the cluster it is in, a power-off request; "-" when Omni does not have it.
func (r Record) OmniSummary() string {
	o := r.Omni
	if o == nil {
		return "-"
	}

	if o.Gone {
		return "gone"
	}

	col := string(o.Acceptance)

	if o.Cordoned {
		col += ",cordoned"
	}

	if o.ClusterTalosVersion != "" {
		col += " cluster " + o.ClusterTalosVersion
	}

	if o.PowerOffRequestID != "" {
		col += " power-off"
	}

	return col
}

// Extensions are the official extensions the machine's hardware calls for, from its
// anvil.dev/ext-* labels (an optional one marked with "?").
func (r Record) Extensions() []string {
	var out []string

	for k, value := range r.Labels {
		name, ok := strings.CutPrefix(k, LabelExtensionPrefix)
		if !ok {
			continue
		}

		if value == "optional" {
			name += "?"
		}

		out = append(out, name)
	}

	slices.Sort(out)

	return out
}

// KexecSummary is how the machine is handed to Talos: its mode, "agent cannot" when its
// agent runs as a Talos extension (no kexec in any mode), and "blocked" when the kexec
// deny list (or an agent that cannot) blocks auto.
func (r Record) KexecSummary() string {
	mode := r.Intent.Kexec
	if mode == "" {
		mode = "default"
	}

	switch {
	case r.Status != nil && r.Status.AgentKexecUnavailable != "":
		// An agent-mode Talos: its agent cannot kexec, whatever the mode.
		mode += " (agent cannot)"
	case r.Status != nil && len(r.Status.KexecBlockers) > 0:
		mode += " (blocked)"
	}

	return mode
}

// MACs are the machine's physical NICs as its agent saw them, else those seen booting.
func (r Record) MACs() []string {
	if r.Inventory != nil && len(r.Inventory.NICs) > 0 {
		out := make([]string, 0, len(r.Inventory.NICs))
		for _, n := range r.Inventory.NICs {
			if n.MAC != "" {
				out = append(out, n.MAC)
			}
		}

		return out
	}

	return r.Machine.MACs
}

// BMCAddress is the BMC the provider drives (its config), else the one the agent read;
// empty when neither is known.
func (r Record) BMCAddress() string {
	switch {
	case r.BMC != nil && r.BMC.Address != "":
		if r.BMC.Port != 0 {
			return net.JoinHostPort(r.BMC.Address, strconv.Itoa(int(r.BMC.Port)))
		}

		return r.BMC.Address
	case r.Inventory != nil && r.Inventory.BMC != nil && r.Inventory.BMC.Address != "":
		return r.Inventory.BMC.Address
	}

	return ""
}

// Memory prints MiB as GiB ("96GiB", "1.5GiB") or MiB below one GiB.
func Memory(mib uint64) string {
	if mib < 1024 {
		return fmt.Sprintf("%dMiB", mib)
	}

	return strconv.FormatFloat(float64(mib)/1024, 'f', -1, 64) + "GiB"
}

// DiskSize prints bytes in the disk makers' decimal units: "960G", "4T", "1.9T".
func DiskSize(b uint64) string {
	for _, u := range []struct {
		unit string
		n    float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}} {
		if float64(b) >= u.n {
			return strconv.FormatFloat(math.Round(float64(b)/u.n*10)/10, 'f', -1, 64) + u.unit
		}
	}

	return strconv.FormatUint(b, 10) + "B"
}

// IdentitySummary says how the machine proves who it is: "tpm" (its agent proved the
// EK recorded for it), "tpm,bound" (that EK is bound to it: accepted with it), "tpm,bound,
// unproven" (accepted with an EK its agent has not proved yet), "none" (its agent showed
// no TPM), "-" (no agent of it registered yet).
func (r Record) IdentitySummary() string {
	recorded, bound := r.Machine.EK, r.Intent.BoundEK

	switch {
	case bound != "" && recorded == "":
		return "tpm,bound,unproven"
	case bound != "":
		return "tpm,bound"
	case recorded != "":
		return "tpm"
	case r.Inventory != nil:
		return "none"
	default:
		return "-"
	}
}

// EK is the fingerprint of the TPM endorsement key the machine must prove: the one bound
// at its acceptance, else the one its agent proved first; "" when none.
func (r Record) EK() string { return identity.Expected(r.Intent.BoundEK, r.Machine.EK) }
