package ipmisim

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Machine is what the chassis control program drives: a lab machine
// (*machine.Machine).
type Machine interface {
	Running() bool
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Reset(ctx context.Context) error
	SetNextBootNetwork(on bool) error
	NextBootNetwork() bool
}

// Chassis is ipmi_sim's chassis control program for machine m (named name): args are
// what ipmi_sim appends to the command, "get <param>…" (answered on out as
// "<param>:<value>" lines) or "set <param> <value>…". It powers m on and off, resets it
// and keeps its boot device (a PXE override lasts one start, as IPMI's "next boot
// only" does); every change is logged to log, which is ipmi_sim's log.
func Chassis(ctx context.Context, name string, m Machine, args []string, out, log io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: get <param>… | set <param> <value>… (got %q)", args)
	}

	switch op, params := args[0], args[1:]; op {
	case "get":
		for _, p := range params {
			v, err := get(m, p)
			if err != nil {
				return err
			}

			fmt.Fprintf(out, "%s:%s\n", p, v)
		}

		return nil
	case "set":
		if len(params)%2 != 0 {
			return fmt.Errorf("set needs <param> <value> pairs, got %q", params)
		}

		var errs []error

		for i := 0; i < len(params); i += 2 {
			p, v := params[i], params[i+1]

			did, err := set(ctx, m, p, v)
			if err != nil {
				errs = append(errs, fmt.Errorf("error setting %s to %s on %s: %w", p, v, name, err))
				fmt.Fprintf(log, "chassis %s: %s %s failed: %v\n", name, p, v, err)

				continue
			}

			if did != "" {
				fmt.Fprintf(log, "chassis %s: %s\n", name, did)
			}
		}

		return errors.Join(errs...)
	default:
		return fmt.Errorf("unknown chassis operation %q (get or set)", op)
	}
}

func get(m Machine, param string) (string, error) {
	switch param {
	case "power":
		if m.Running() {
			return "1", nil
		}

		return "0", nil
	case "boot":
		if m.NextBootNetwork() {
			return "pxe", nil
		}

		return "none", nil
	default:
		return "", fmt.Errorf("the chassis has no readable %q", param)
	}
}

// set applies one setting and says what it did ("" for nothing worth logging).
func set(ctx context.Context, m Machine, param, value string) (string, error) {
	switch param {
	case "power":
		switch value {
		case "1":
			if m.Running() {
				return "", nil
			}

			return "power on (QEMU started)", m.Start(ctx)
		case "0":
			if !m.Running() {
				return "", nil
			}

			return "power off (QEMU stopped)", m.Stop(ctx)
		}
	case "shutdown":
		// No ACPI handling in the lab's guests: a soft shutdown is a power-off.
		if value == "1" && m.Running() {
			return "soft shutdown: power off (QEMU stopped)", m.Stop(ctx)
		}

		return "", nil
	case "reset":
		if value == "1" {
			return "reset", m.Reset(ctx)
		}

		return "", nil
	case "boot":
		switch value {
		case "pxe":
			return "next boot from the network, once", m.SetNextBootNetwork(true)
		case "none", "default":
			return "next boot as configured", m.SetNextBootNetwork(false)
		default:
			return "", fmt.Errorf("boot device %q is not supported (pxe, none or default)", value)
		}
	case "identify":
		return "", nil // no LED to blink
	default:
		return "", fmt.Errorf("the chassis has no settable %q", param)
	}

	return "", fmt.Errorf("value %q is not 0 or 1", value)
}
