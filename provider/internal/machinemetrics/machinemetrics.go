// Package machinemetrics counts the machines at scrape time: by lifecycle phase, by
// observed power state and by the condition of their BMC. Counting when scraped, from
// the boot services' view and one listing of the power statuses, keeps nothing between
// scrapes and can never drift from the state.
package machinemetrics

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// listTimeout bounds the listing of power statuses a scrape does.
const listTimeout = 5 * time.Second

// ConditionNone is the BMC condition of a machine without a power status (no BMC
// configuration yet).
const ConditionNone = "none"

// Label values always reported, at 0 when no machine has them.
var (
	phases = []lifecycle.Phase{
		lifecycle.PhaseUnknown, lifecycle.PhasePending, lifecycle.PhaseRejected, lifecycle.PhasePreparing,
		lifecycle.PhaseReady, lifecycle.PhaseAllocated, lifecycle.PhaseInstalled,
	}
	powerStates = []resources.PowerState{resources.PowerOn, resources.PowerOff, resources.PowerUnknown}
	// conditions are the power controller's (PowerStatusSpec.Condition), and none.
	conditions = []string{"ok", "manual", "hands-off", "unreachable", "unauthorized", "unsupported", "error", ConditionNone}
)

var (
	phaseDesc = prometheus.NewDesc("anvil_machines", "Machines, by lifecycle phase.", []string{"phase"}, nil)
	powerDesc = prometheus.NewDesc("anvil_machines_power",
		"Machines, by last observed power state (unknown: not read yet, or no BMC).", []string{"state"}, nil)
	conditionDesc = prometheus.NewDesc("anvil_machines_bmc_condition",
		"Machines, by the condition of their BMC as the power controller last found it (none: no BMC configured).", []string{"condition"}, nil)
)

// Collector is a prometheus.Collector of the machines' gauges.
type Collector struct {
	view   *machineview.View
	st     state.State
	policy lifecycle.Policy
}

// New returns the collector: phases from the view (as the lifecycle rules read them
// under policy), power and BMC conditions from the PowerStatuses in st.
func New(view *machineview.View, st state.State, policy lifecycle.Policy) *Collector {
	return &Collector{view: view, st: st, policy: policy}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- phaseDesc
	ch <- powerDesc
	ch <- conditionDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	entries := c.view.All()

	byPhase := map[string]int{}
	for _, p := range phases {
		byPhase[string(p)] = 0
	}

	for _, e := range entries {
		byPhase[string(e.Phase(c.policy))]++
	}

	emit(ch, phaseDesc, byPhase)

	// A replica cut off from etcd would wait on the listing for listTimeout and find
	// nothing: its scrape says why at once, and its other metrics (ready, the requests
	// it leaves unanswered) are what an operator reads then.
	if err := c.view.Serving(); err != nil {
		ch <- prometheus.NewInvalidMetric(powerDesc, err)
		ch <- prometheus.NewInvalidMetric(conditionDesc, err)

		return
	}

	byPower, byCondition, err := c.power(entries)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(powerDesc, err)
		ch <- prometheus.NewInvalidMetric(conditionDesc, err)

		return
	}

	emit(ch, powerDesc, byPower)
	emit(ch, conditionDesc, byCondition)
}

// power counts the view's machines by power state and BMC condition.
func (c *Collector) power(entries []*machineview.Entry) (byPower, byCondition map[string]int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()

	list, err := safe.StateListAll[*resources.PowerStatus](ctx, c.st)
	if err != nil {
		return nil, nil, fmt.Errorf("error listing power statuses: %w", err)
	}

	type seen struct {
		state     resources.PowerState
		condition string
	}

	statuses := make(map[string]seen, list.Len())
	for ps := range list.All() {
		statuses[ps.Metadata().ID()] = seen{state: ps.TypedSpec().State, condition: ps.TypedSpec().Condition}
	}

	byPower, byCondition = map[string]int{}, map[string]int{}

	for _, s := range powerStates {
		byPower[string(s)] = 0
	}

	for _, cond := range conditions {
		byCondition[cond] = 0
	}

	for _, e := range entries {
		s, ok := statuses[e.ID]

		state := resources.PowerUnknown
		if ok && (s.state == resources.PowerOn || s.state == resources.PowerOff) {
			state = s.state
		}

		condition := s.condition
		if condition == "" {
			condition = ConditionNone
		}

		byPower[string(state)]++
		byCondition[condition]++
	}

	return byPower, byCondition, nil
}

func emit(ch chan<- prometheus.Metric, desc *prometheus.Desc, counts map[string]int) {
	for label, n := range counts {
		m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, float64(n), label)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}

		ch <- m
	}
}
