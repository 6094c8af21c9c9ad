package pxe

import "errors"

// ErrIgnore is matched (errors.Is) by every error of Answer that means "this request is
// not for us": such requests are dropped silently, with a debug line and a counter.
var ErrIgnore = errors.New("request ignored")

// ErrMalformed is matched by errors of Answer for requests that could not be understood.
var ErrMalformed = errors.New("malformed request")

// ignoreError is one reason to ignore a request. The reasons are package-level values, so
// ignoring a packet allocates nothing, and their text doubles as a metric label.
type ignoreError struct{ reason string }

func (e *ignoreError) Error() string { return "ignored: " + e.reason }

func (e *ignoreError) Is(target error) bool { return target == ErrIgnore }

var (
	errNotBootRequest = &ignoreError{"not_bootrequest"}
	errNotPXE         = &ignoreError{"not_pxe"}
	errNoArch         = &ignoreError{"no_arch"}
	errUnknownArch    = &ignoreError{"unknown_arch"}
	errNoARM64        = &ignoreError{"arm64_not_configured"}
	errHTTPBoot       = &ignoreError{"uefi_http_boot"}
	errNotForUs       = &ignoreError{"other_server"}
	errMessageType    = &ignoreError{"message_type"}
	errNoAddress      = &ignoreError{"pool_exhausted"}
)

// ignoreErrors lists the reasons, so that their counters exist from the start.
var ignoreErrors = []*ignoreError{
	errNotBootRequest, errNotPXE, errNoArch, errUnknownArch, errNoARM64, errHTTPBoot, errNotForUs, errMessageType, errNoAddress,
}

// ignoreReason returns the metric label of an ignore error.
func ignoreReason(err error) string {
	var ie *ignoreError
	if errors.As(err, &ie) {
		return ie.reason
	}

	return "other"
}
