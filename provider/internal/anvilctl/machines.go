package anvilctl

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// machineView is one machine with what was asked of it and what was observed.
type machineView struct {
	ID      string                       `yaml:"id"`
	Labels  map[string]string            `yaml:"labels,omitempty"`
	Machine resources.MachineSpec        `yaml:"machine"`
	Intent  resources.MachineIntentSpec  `yaml:"intent"`
	Status  *resources.MachineStatusSpec `yaml:"status,omitempty"`
	// Inventory is what the machine's agent reported.
	Inventory *resources.MachineInventorySpec `yaml:"inventory,omitempty"`
	// BMC is how its power is reached (never the password); Power what was seen of it.
	BMC   *resources.BMCConfigSpec   `yaml:"bmc,omitempty"`
	Power *resources.PowerStatusSpec `yaml:"power,omitempty"`
	// Omni is what Omni decides of the machine, in Omni mode (its node unique token
	// redacted).
	Omni *resources.OmniMachineSpec `yaml:"omni,omitempty"`
}

func getMachines(ctx context.Context, st state.State, p *printer, id string, opts getOptions) error {
	var machines []*resources.Machine

	if id != "" {
		m, err := safe.StateGetByID[*resources.Machine](ctx, st, id)
		if err != nil {
			if state.IsNotFoundError(err) {
				return fmt.Errorf("machine %q is not known", id)
			}

			return fmt.Errorf("error getting machine %q: %w", id, err)
		}

		machines = append(machines, m)
	} else {
		list, err := safe.StateListAll[*resources.Machine](ctx, st)
		if err != nil {
			return fmt.Errorf("error listing machines: %w", err)
		}

		machines = slices.Collect(list.All())
	}

	// The effective labels; with a selector, the provider's state picks the machines.
	labels, err := safe.StateListAll[*resources.MachineLabels](ctx, st, state.WithLabelQuery(resource.RawLabelQuery(opts.query)))
	if err != nil {
		return fmt.Errorf("error listing machine labels: %w", err)
	}

	labelsByID := make(map[string]*resources.MachineLabels, labels.Len())
	for ml := range labels.All() {
		labelsByID[ml.Metadata().ID()] = ml
	}

	if len(opts.query.Terms) > 0 {
		machines = slices.DeleteFunc(machines, func(m *resources.Machine) bool { return labelsByID[m.Metadata().ID()] == nil })
	}

	// Lists rather than one Get per machine: a few calls whatever the number of machines.
	intents, err := safe.StateListAll[*resources.MachineIntent](ctx, st)
	if err != nil {
		return fmt.Errorf("error listing machine intents: %w", err)
	}

	statuses, err := safe.StateListAll[*resources.MachineStatus](ctx, st)
	if err != nil {
		return fmt.Errorf("error listing machine statuses: %w", err)
	}

	inventories, err := safe.StateListAll[*resources.MachineInventory](ctx, st)
	if err != nil {
		return fmt.Errorf("error listing machine inventories: %w", err)
	}

	bmcs, err := safe.StateListAll[*resources.BMCConfig](ctx, st)
	if err != nil {
		return fmt.Errorf("error listing BMC configs: %w", err)
	}

	powers, err := safe.StateListAll[*resources.PowerStatus](ctx, st)
	if err != nil {
		return fmt.Errorf("error listing power statuses: %w", err)
	}

	omnis, err := safe.StateListAll[*resources.OmniMachine](ctx, st)
	if err != nil {
		return fmt.Errorf("error listing Omni's view of the machines: %w", err)
	}

	omniByID := make(map[string]*resources.OmniMachine, omnis.Len())
	for om := range omnis.All() {
		omniByID[om.Metadata().ID()] = om
	}

	bmcByID := make(map[string]*resources.BMCConfig, bmcs.Len())
	for b := range bmcs.All() {
		bmcByID[b.Metadata().ID()] = b
	}

	powerByID := make(map[string]*resources.PowerStatus, powers.Len())
	for p := range powers.All() {
		powerByID[p.Metadata().ID()] = p
	}

	inventoryByID := make(map[string]*resources.MachineInventory, inventories.Len())
	for inv := range inventories.All() {
		inventoryByID[inv.Metadata().ID()] = inv
	}

	intentByID := make(map[string]*resources.MachineIntent, intents.Len())
	for in := range intents.All() {
		intentByID[in.Metadata().ID()] = in
	}

	statusByID := make(map[string]*resources.MachineStatus, statuses.Len())
	for s := range statuses.All() {
		statusByID[s.Metadata().ID()] = s
	}

	views := make([]machineView, 0, len(machines))

	for _, m := range machines {
		v := machineView{ID: m.Metadata().ID(), Machine: m.TypedSpec().DeepCopy(), Intent: *resources.NewMachineIntent(m.Metadata().ID()).TypedSpec()}

		// Effective labels once the provider has computed them, the static ones until then.
		if ml, ok := labelsByID[v.ID]; ok {
			if l := ml.Metadata().Labels().Raw(); len(l) > 0 {
				v.Labels = l
			}
		} else if l := m.Metadata().Labels().Raw(); len(l) > 0 {
			v.Labels = l
		}

		if in, ok := intentByID[v.ID]; ok {
			v.Intent = in.TypedSpec().DeepCopy()
		}

		if s, ok := statusByID[v.ID]; ok {
			spec := s.TypedSpec().DeepCopy()
			v.Status = &spec
		}

		if inv, ok := inventoryByID[v.ID]; ok {
			spec := inv.TypedSpec().DeepCopy()
			v.Inventory = &spec
		}

		if b, ok := bmcByID[v.ID]; ok {
			spec := b.TypedSpec().DeepCopy()
			v.BMC = &spec
		}

		if ps, ok := powerByID[v.ID]; ok {
			spec := ps.TypedSpec().DeepCopy()
			v.Power = &spec
		}

		if om, ok := omniByID[v.ID]; ok {
			spec := redact(om, false).(*resources.OmniMachine).TypedSpec().DeepCopy() //nolint:forcetypeassert // redact keeps the type
			v.Omni = &spec
		}

		if a := v.Intent.Allocation; a != nil && a.Config != "" && !opts.showConfig {
			a.Config = redactedConfig(len(a.Config))
		}

		views = append(views, v)
	}

	if p.format != "table" && p.format != "wide" {
		if id != "" {
			return p.structured(views[0])
		}

		return p.structured(views)
	}

	header := []string{"ID", "ARCH", "FIRMWARE", "ADDRESS", "ACCEPTANCE", "ALLOCATION", "INSTALLED", "POWER", "LAST BOOT"}

	// In Omni mode, Omni's view beside Anvil's.
	omniMode := len(omniByID) > 0
	if omniMode {
		header = append(header, "OMNI")
	}

	if p.format == "wide" {
		header = append(header, wideHeader...)
	}

	rows := [][]string{header}

	for _, v := range views {
		row := v.row(time.Now())
		if omniMode {
			row = append(row, v.omniColumn())
		}

		if p.format == "wide" {
			row = append(row, v.wideRow()...)
		}

		rows = append(rows, row)
	}

	return p.table(rows)
}

func (v machineView) row(now time.Time) []string {
	acceptance := string(v.Intent.Acceptance)
	if v.Intent.Cordoned {
		acceptance += ",cordoned"
	}

	allocation, installed := "-", "-"
	if a := v.Intent.Allocation; a != nil {
		allocation = a.TalosVersion
		installed = "no"

		if (lifecycle.Machine{ID: v.ID, Intent: &v.Intent, Status: v.Status}).Installed() {
			installed = "yes"
		}
	}

	power := v.powerColumn()

	lastBoot := "-"
	if !v.Machine.LastPXE.IsZero() {
		lastBoot = fmt.Sprintf("%s %s ago", orDash(v.Machine.LastDecision), now.Sub(v.Machine.LastPXE).Truncate(time.Second))
	}

	return []string{v.ID, orDash(v.Machine.Arch), orDash(v.Machine.Firmware), orDash(v.Machine.LastAddress), acceptance, allocation, installed, power, lastBoot}
}

// omniColumn is what Omni decides of the machine: its acceptance, the Talos version of
// the cluster it is in, a power-off request; "-" when Omni does not have it.
func (v machineView) omniColumn() string {
	o := v.Omni
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

// powerColumn is "<backend> <state>", with what the provider wants when it differs and
// why the BMC could not be driven: "ipmi on", "api off (want on)", "redfish unknown
// [unreachable]"; "manual" for a machine without a BMC.
func (v machineView) powerColumn() string {
	want := resources.PowerState("")
	if v.Power != nil {
		want = v.Power.Desired
	}

	if v.Intent.Power == resources.PowerOn || v.Intent.Power == resources.PowerOff {
		want = v.Intent.Power
	}

	if v.BMC == nil || v.BMC.Kind == "" || v.BMC.Kind == "none" {
		if want != "" {
			return "manual (want " + string(want) + ")"
		}

		return "manual"
	}

	observed := resources.PowerUnknown
	if v.Power != nil && v.Power.State != "" {
		observed = v.Power.State
	}

	out := v.BMC.Kind + " " + string(observed)
	if want != "" && want != observed {
		out += " (want " + string(want) + ")"
	}

	if v.Power != nil && v.Power.Condition != "" && v.Power.Condition != "ok" {
		out += " [" + v.Power.Condition + "]"
	}

	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}

	return s
}
