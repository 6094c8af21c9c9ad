package fleetsim

import (
	"context"
	"fmt"
	"time"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// ending is how an agent's run ends: what the machine does next.
type ending int

const (
	endReboot   ending = iota + 1 // boot again after the reboot delay
	endOff                        // powered off until powered on
	endKexec                      // "Talos" runs, booted by kexec
	endPowerCut                   // power lost: off, nothing said
)

// actions are the orders' effects on a simulated machine: timed, reported as the real
// agent reports them, and ending the agent where the real actions end the machine's run.
type actions struct {
	m    *machine
	ends chan<- ending
}

// end tells the machine's run how the agent ends; the first ending wins.
func (a *actions) end(e ending) {
	select {
	case a.ends <- e:
	default:
	}
}

// Reboot never returns before the agent is gone, as a real reboot never returns.
func (a *actions) Reboot(ctx context.Context) error {
	a.end(endReboot)
	<-ctx.Done()

	return ctx.Err()
}

func (a *actions) PowerOff(ctx context.Context) error {
	a.end(endOff)
	<-ctx.Done()

	return ctx.Err()
}

func (a *actions) LoadKexec(ctx context.Context, _ *agentv1.Kexec) error {
	return sleep(ctx, a.m.fleet.cfg.KexecLoad)
}

func (a *actions) JumpKexec(context.Context) error {
	a.end(endKexec)

	return nil
}

func (a *actions) Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error) {
	cfg := a.m.fleet.cfg
	took, method := cfg.WipeFast, "fast"

	switch w.GetMode() {
	case agentv1.Wipe_MODE_ZEROES:
		took, method = cfg.WipeZeroes, "zeroes"
	case agentv1.Wipe_MODE_SECURE_ERASE:
		took, method = cfg.WipeSecure, "secure-erase"
	case agentv1.Wipe_MODE_FAST:
	}

	start := time.Now()

	if err := sleep(ctx, took); err != nil {
		return nil, fmt.Errorf("wipe %s abandoned: %w", w.GetGenerationId(), err)
	}

	report := &agentv1.WipeReport{GenerationId: w.GetGenerationId()}
	perDisk := uint64(time.Since(start).Milliseconds()) //nolint:gosec // a duration is positive

	for _, d := range a.m.id.Disks {
		written := d.Size
		if method == "fast" {
			written = 64 << 20 // signatures at both ends and a discard
		}

		report.Disks = append(report.Disks, &agentv1.DiskWipe{
			Device: "/dev/" + d.Name, Method: method, Bytes: written, DurationMs: perDisk, Verified: "read back: zeroes",
		})
	}

	return report, nil
}

func (a *actions) GetBMC(ctx context.Context) (*agentv1.BMCInfo, error) {
	if err := sleep(ctx, bmcCall); err != nil {
		return nil, err
	}

	cfg := a.m.fleet.cfg

	return &agentv1.BMCInfo{Address: cfg.BMCAddress, Port: cfg.BMCPort, User: "ADMIN"}, nil
}

func (a *actions) SetBMC(ctx context.Context, s *agentv1.SetBMC) (*agentv1.BMCInfo, error) {
	if err := sleep(ctx, bmcCall); err != nil {
		return nil, err
	}

	cfg := a.m.fleet.cfg

	return &agentv1.BMCInfo{Address: cfg.BMCAddress, Port: cfg.BMCPort, User: s.GetUser(), Password: s.GetPassword()}, nil
}

// bmcCall is what a local IPMI exchange (ipmitool over /dev/ipmi0) takes.
const bmcCall = 50 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}

	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
