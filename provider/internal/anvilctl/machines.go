package anvilctl

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/fleet"
	"github.com/cosi-project/runtime/pkg/state"
)

func getMachines(ctx context.Context, st state.State, p *printer, id string, opts getOptions) error {
	views, err := fleet.List(ctx, st, fleet.Options{ID: id, Query: opts.query, ShowConfig: opts.showConfig})
	if err != nil {
		return err
	}

	if p.format != "table" && p.format != "wide" {
		if id != "" {
			return p.structured(views[0])
		}

		return p.structured(views)
	}

	header := []string{"ID", "ARCH", "FIRMWARE", "ADDRESS", "ACCEPTANCE", "ALLOCATION", "INSTALLED", "POWER", "IDENTITY", "LAST BOOT"}

	// In Omni mode, Omni's view beside Anvil's.
	omniMode := slices.ContainsFunc(views, func(v fleet.Record) bool { return v.Omni != nil })
	if omniMode {
		header = append(header, "OMNI")
	}

	if p.format == "wide" {
		header = append(header, wideHeader...)
	}

	rows := [][]string{header}

	for _, v := range views {
		row := machineRow(v, time.Now())
		if omniMode {
			row = append(row, v.OmniSummary())
		}

		if p.format == "wide" {
			row = append(row, wideRow(v)...)
		}

		rows = append(rows, row)
	}

	return p.table(rows)
}

func machineRow(v fleet.Record, now time.Time) []string {
	acceptance := string(v.Intent.Acceptance)
	if v.Intent.Cordoned {
		acceptance += ",cordoned"
	}

	allocation, installed := "-", "-"
	if a := v.Intent.Allocation; a != nil {
		allocation = a.TalosVersion
		installed = "no"

		if v.Lifecycle().Installed() {
			installed = "yes"
		}
	}

	power := v.PowerSummary()

	lastBoot := "-"
	if !v.Machine.LastPXE.IsZero() {
		lastBoot = fmt.Sprintf("%s %s ago", orDash(v.Machine.LastDecision), now.Sub(v.Machine.LastPXE).Truncate(time.Second))
	}

	return []string{v.ID, orDash(v.Machine.Arch), orDash(v.Machine.Firmware), orDash(v.Machine.LastAddress), acceptance, allocation, installed, power, v.IdentitySummary(), lastBoot}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}

	return s
}
