package console

import (
	"fmt"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/fleet"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// noter turns changes of the state into a machine's recent events: acceptance,
// allocation, wipes, power and BMC condition (the boot's phases, installs and kexec
// handoffs among them, are noted by the boot timeline itself). It remembers
// what it saw of each machine; a first sight is not news.
type noter struct {
	trace *boottrace.Recorder

	mu   sync.Mutex
	seen map[string]noted
}

// noted is what the noter last saw of a machine, per resource.
type noted struct {
	intent *resources.MachineIntentSpec
	status *resources.MachineStatusSpec
	power  *resources.PowerStatusSpec
}

func newNoter(trace *boottrace.Recorder) *noter {
	return &noter{trace: trace, seen: map[string]noted{}}
}

func (n *noter) observe(r resource.Resource) {
	if n.trace == nil || r == nil {
		return
	}

	id := r.Metadata().ID()

	n.mu.Lock()
	defer n.mu.Unlock()

	prev := n.seen[id]

	var msgs []string

	switch r := r.(type) {
	case *resources.MachineIntent:
		cur := r.TypedSpec().DeepCopy()
		if prev.intent != nil {
			msgs = intentNews(prev.intent, &cur)
		}

		prev.intent = &cur
	case *resources.MachineStatus:
		cur := r.TypedSpec().DeepCopy()
		if prev.status != nil {
			msgs = statusNews(prev.status, &cur)
		}

		prev.status = &cur
	case *resources.PowerStatus:
		cur := r.TypedSpec().DeepCopy()
		if prev.power != nil {
			msgs = powerNews(prev.power, &cur)
		}

		prev.power = &cur
	default:
		return
	}

	n.seen[id] = prev

	for _, m := range msgs {
		n.trace.Note(id, m)
	}
}

func intentNews(prev, cur *resources.MachineIntentSpec) []string {
	var out []string

	if prev.Acceptance != cur.Acceptance {
		out = append(out, fmt.Sprintf("acceptance %s → %s", orNone(string(prev.Acceptance)), cur.Acceptance))
	}

	switch pa, ca := prev.Allocation, cur.Allocation; {
	case ca != nil && (pa == nil || pa.ID != ca.ID):
		out = append(out, fmt.Sprintf("allocated to Talos %s (allocation %s)", ca.TalosVersion, ca.ID))
	case ca == nil && pa != nil:
		out = append(out, "deallocated (allocation "+pa.ID+"): a wipe is owed")
	}

	if prev.Cordoned != cur.Cordoned {
		out = append(out, map[bool]string{true: "cordoned", false: "uncordoned"}[cur.Cordoned])
	}

	if prev.RebootID != cur.RebootID && cur.RebootID != "" {
		out = append(out, "reboot requested")
	}

	return out
}

func statusNews(prev, cur *resources.MachineStatusSpec) []string {
	var out []string

	if cur.WipedID != prev.WipedID && cur.WipedID != "" {
		msg := "wipe " + cur.WipedID + " finished"

		if w := cur.LastWipe; w != nil && w.ID == cur.WipedID {
			var bytes uint64
			for _, d := range w.Disks {
				bytes += d.Bytes
			}

			msg += fmt.Sprintf(": %d disks, %s written", len(w.Disks), fleet.DiskSize(bytes))
		}

		out = append(out, msg)
	}

	// Installs and kexec handoffs are on the boot timeline, noted there as they happen.

	if cur.BMCError != prev.BMCError && cur.BMCError != "" {
		out = append(out, "BMC provisioning failed: "+cur.BMCError)
	}

	return out
}

func powerNews(prev, cur *resources.PowerStatusSpec) []string {
	var out []string

	if prev.State != cur.State && cur.State != "" && cur.State != resources.PowerUnknown {
		out = append(out, fmt.Sprintf("power %s → %s", orNone(string(prev.State)), cur.State))
	}

	if prev.LastActionAt != cur.LastActionAt && cur.LastAction != "" {
		msg := "power action: " + cur.LastAction
		if cur.LastActionReason != "" {
			msg += " (" + cur.LastActionReason + ")"
		}

		out = append(out, msg)
	}

	if prev.Condition != cur.Condition && cur.Condition != "" {
		msg := "BMC " + cur.Condition
		if cur.Error != "" {
			msg += ": " + cur.Error
		}

		out = append(out, msg)
	}

	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}

	return s
}
