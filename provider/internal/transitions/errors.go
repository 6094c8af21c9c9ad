package transitions

import "errors"

// Code says why a transition was refused, so that each caller can say it its own way
// (the control API as a gRPC status, the Omni adapter as a condition).
type Code int

// Codes. An error of no Code (CodeOf returns CodeInternal) is a failure of the provider
// itself: the state could not be read or written.
const (
	CodeInternal Code = iota
	// CodeInvalid: the request is malformed (a bad version, label, address…).
	CodeInvalid
	// CodeNotFound: the machine is not known.
	CodeNotFound
	// CodeRefused: the machine's state does not allow it now (allocating a pending
	// machine, rejecting an allocated one…).
	CodeRefused
	// CodeManaged: another owner (Omni) decides this for the machine.
	CodeManaged
	// CodeUnavailable: this provider does not offer the transition.
	CodeUnavailable
)

// Error is a refused transition: its message says why, for a person.
type Error struct {
	Code Code
	Msg  string
	// Manager names the other owner of a CodeManaged refusal (omni).
	Manager string
	// Holding names the machine a claim's owner holds already, when that is why the
	// claim of another was refused.
	Holding string
}

func (e *Error) Error() string { return e.Msg }

// CodeOf returns the code of a refused transition, CodeInternal for any other error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}

	return CodeInternal
}

func refused(msg string) error { return &Error{Code: CodeRefused, Msg: msg} }

func invalid(err error) error { return &Error{Code: CodeInvalid, Msg: err.Error()} }
