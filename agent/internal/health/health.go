// Package health judges a machine's components before it is handed out
// (commissioning): each check says passed, failed with its reasons, or unknown with why
// it could not run, which is never a pass.
package health

import (
	"fmt"
	"strings"
)

// Status is a check's outcome.
type Status string

// Outcomes.
const (
	Passed Status = "passed"
	Failed Status = "failed"
	// Unknown is a check that could not run (a disk without SMART, a log the device
	// would not give): never a pass.
	Unknown Status = "unknown"
)

// Check is one component's check.
type Check struct {
	// Component names what was checked ("disk nvme0n1").
	Component string
	// Name names the check ("NVMe health log").
	Name   string
	Status Status
	// Reasons say why it failed, or why it is unknown.
	Reasons []string
	// Facts are the values read, for people (percentage used, media errors, ...).
	Facts []string
}

// String is the check on one line.
func (c Check) String() string {
	s := fmt.Sprintf("%s: %s %s", c.Component, c.Name, c.Status)
	if len(c.Reasons) > 0 {
		s += " (" + strings.Join(c.Reasons, "; ") + ")"
	}

	return s
}

// Overall is the machine's status from its checks: failed if any failed, unknown if any
// could not run (and none failed), passed only when every one passed.
func Overall(checks []Check) Status {
	status := Passed

	for _, c := range checks {
		switch c.Status {
		case Failed:
			return Failed
		case Unknown:
			status = Unknown
		case Passed:
		default:
			status = Unknown
		}
	}

	if len(checks) == 0 {
		return Unknown
	}

	return status
}
