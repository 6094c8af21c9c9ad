//go:build lab

package ipmi

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvil-metal/anvil/internal/ipmisim"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

func dialSim(t *testing.T, s *sim) power.Client {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	c, err := Dial(ctx, s.endpoint())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(10 * time.Second)

	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}

		time.Sleep(50 * time.Millisecond)
	}
}

func stateOf(t *testing.T, c power.Client) bool {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	st, err := c.PowerState(ctx)
	if err != nil {
		t.Fatalf("PowerState: %v", err)
	}

	return st
}

func TestLabPowerAgainstIPMISim(t *testing.T) {
	s := startSim(t, simStartcmd)
	c := dialSim(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if stateOf(t, c) {
		t.Fatal("fresh simulator: on, want off")
	}

	if s.machinePID() != 0 {
		t.Fatal("fresh simulator: the machine runs already")
	}

	// Cycle of an off machine powers it on.
	steps := []struct {
		name    string
		do      func(context.Context) error
		want    bool
		running bool
	}{
		{"on", c.PowerOn, true, true},
		{"on again does nothing", c.PowerOn, true, true},
		{"off", c.PowerOff, false, false},
		{"off again does nothing", c.PowerOff, false, false},
		{"cycle of an off machine", c.PowerCycle, true, true},
	}

	for _, step := range steps {
		before := s.machinePID()

		if err := step.do(ctx); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}

		waitFor(t, step.name+": machine process", func() bool { return (s.machinePID() != 0) == step.running })
		waitFor(t, step.name+": reported state", func() bool { return stateOf(t, c) == step.want })

		if strings.HasSuffix(step.name, "does nothing") && s.machinePID() != before {
			t.Fatalf("%s: the machine process changed from %d to %d", step.name, before, s.machinePID())
		}
	}

	// Cycle of a running machine: ipmi_sim stops the machine and starts it again, so the
	// machine comes back as a new process.
	first := s.machinePID()

	if err := c.PowerCycle(ctx); err != nil {
		t.Fatalf("cycle of a running machine: %v", err)
	}

	waitFor(t, "a new machine process after the cycle", func() bool {
		pid := s.machinePID()

		return pid != 0 && pid != first
	})

	if !stateOf(t, c) {
		t.Fatal("after the cycle: off, want on")
	}

	// This simulator (no chassis program) refuses boot options: a refusal the caller can
	// tell from a dead BMC, so a power-on can still go ahead.
	for _, mode := range []power.BootMode{power.BootModeLegacy, power.BootModeUEFI} {
		err := c.SetPXEOnce(ctx, mode)
		if !errors.Is(err, power.ErrUnsupported) || errors.Is(err, power.ErrUnreachable) {
			t.Fatalf("SetPXEOnce(%s) on a BMC that refuses boot options: %v, want ErrUnsupported", mode, err)
		}
	}
}

func TestLabSetPXEOnceAgainstIPMISim(t *testing.T) {
	s := startSim(t, simChassisControl)
	c := dialSim(t, s)

	if out := s.ipmitool(t, "chassis", "bootparam", "get", "5"); strings.Contains(out, "Force PXE") {
		t.Fatalf("fresh simulator already boots from PXE:\n%s", out)
	}

	for _, mode := range []power.BootMode{power.BootModeAuto, power.BootModeLegacy, power.BootModeUEFI} {
		name := string(mode)
		if mode == power.BootModeAuto {
			name = "auto"
		}

		t.Run(name, func(t *testing.T) {
			writeFile(t, ipmisim.FileChassisBoot(s.chassis), "default\n", 0o644)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()

			if err := c.SetPXEOnce(ctx, mode); err != nil {
				t.Fatalf("SetPXEOnce(%q): %v", mode, err)
			}

			// Read back through the client and through ipmitool.
			flags, err := c.(*client).bootFlags(ctx)
			if err != nil {
				t.Fatalf("reading the boot flags back: %v", err)
			}

			if flags.BootDeviceSelector != types.BootDeviceSelectorForcePXE {
				t.Fatalf("boot device read back: %v, want force PXE", flags.BootDeviceSelector)
			}

			if out := s.ipmitool(t, "chassis", "bootparam", "get", "5"); !strings.Contains(out, "Boot Device Selector : Force PXE") {
				t.Fatalf("ipmitool reads back:\n%s", out)
			}
		})
	}

	log, err := os.ReadFile(ipmisim.ChassisLog(s.chassis))
	if err != nil {
		t.Fatal(err)
	}

	if n := strings.Count(string(log), "set boot pxe"); n != 3 {
		t.Fatalf("the simulator's chassis control saw %d PXE settings, want 3:\n%s", n, log)
	}
}

func TestLabWrongCredentialsAgainstIPMISim(t *testing.T) {
	s := startSim(t, simStartcmd)

	for _, tc := range []struct {
		name, user, password string
	}{
		{"wrong password", simUser, "not-the-password"},
		{"unknown user", "nobody", simPassword},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := s.endpoint()
			ep.Username, ep.Password = tc.user, tc.password

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			start := time.Now()

			c, err := Dial(ctx, ep)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded with wrong credentials")
			}

			if !errors.Is(err, power.ErrUnauthorized) {
				t.Fatalf("error does not wrap ErrUnauthorized: %v", err)
			}

			if errors.Is(err, power.ErrUnreachable) {
				t.Fatalf("a refusal counted as unreachable: %v", err)
			}

			// A refusal is one quick answer; one that sat through go-ipmi's timed-out
			// attempts would take their whole cycle, which bounds it on a loaded machine.
			if took := time.Since(start); took >= (retries+1)*attemptTimeout {
				t.Fatalf("refusal took %s, want a quick answer (no retries)", took)
			}

			if strings.Contains(err.Error(), tc.password) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func TestLabSlowBMCAgainstIPMISim(t *testing.T) {
	s := startSim(t, simStartcmd)
	r := startRelay(t, s.Config.LANPort)

	ep := s.endpoint()
	ep.Port = r.port

	const (
		deadline = time.Second
		// Room for a loaded machine, yet deadline+slack stays under the 3 s go-ipmi takes
		// to give up by itself ((retries+1) x attemptTimeout), so a call that ignored ctx
		// still fails.
		slack = 1500 * time.Millisecond
		delay = 3 * time.Second // beyond the deadline and go-ipmi's per-exchange timeout
	)

	// A session opened while the relay is quick, then the BMC slows down.
	setupCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := Dial(setupCtx, ep)

	cancel()

	if err != nil {
		t.Fatalf("Dial through the relay: %v", err)
	}

	r.delay.Store(int64(delay))

	calls := []struct {
		name string
		do   func(context.Context) error
	}{
		{"dial", func(ctx context.Context) error {
			c, err := Dial(ctx, ep)
			if err == nil {
				c.Close()
			}

			return err
		}},
		{"power state", func(ctx context.Context) error {
			_, err := c.PowerState(ctx)

			return err
		}},
		{"power on", c.PowerOn},
		{"set PXE once", func(ctx context.Context) error { return c.SetPXEOnce(ctx, power.BootModeUEFI) }},
	}

	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()

			start := time.Now()
			err := call.do(ctx)
			took := time.Since(start)

			if err == nil {
				t.Fatal("succeeded although every answer comes after the deadline")
			}

			if took > deadline+slack {
				t.Fatalf("returned after %s, past the %s deadline", took, deadline)
			}

			if !errors.Is(err, power.ErrUnreachable) {
				t.Fatalf("error does not wrap ErrUnreachable: %v", err)
			}
		})
	}

	start := time.Now()

	c.Close()

	if took := time.Since(start); took > closeTimeout+slack {
		t.Fatalf("Close took %s, want at most %s", took, closeTimeout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	if _, err := c.PowerState(ctx); !errors.Is(err, errClosed) {
		t.Fatalf("call after Close: %v, want the session-closed error", err)
	}
}
