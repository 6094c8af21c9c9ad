package pxe

import "errors"

// ErrIgnore is matched (errors.Is) by every error of Answer that means "this request is
// not for us": such requests are dropped silently, with a debug line and a counter.
var ErrIgnore = errors.New("request ignored")

// ErrMalformed is matched by errors of Answer for requests that could not be understood.
var ErrMalformed = errors.New("malformed request")

// ignoreError is one reason to ignore a request. The reasons are package-level values, so
// ignoring a packet allocates nothing, and their text doubles as a metric label.
//
// A reason with unserved set means a boot client asked and Anvil cannot boot it: the
// operator hears of it (once per machine, see unservedLog), with the text of unserved
// saying why and what would fix it. The others are traffic that is not for us.
type ignoreError struct{ reason, unserved string }

func (e *ignoreError) Error() string { return "ignored: " + e.reason }

func (e *ignoreError) Is(target error) bool { return target == ErrIgnore }

var (
	errNotBootRequest = &ignoreError{reason: "not_bootrequest"}
	errNotPXE         = &ignoreError{reason: "not_pxe"}
	errNoArch         = &ignoreError{"no_arch", "the PXE client names no architecture (no option 93, no Arch: in its vendor class)"}
	errUnknownArch    = &ignoreError{"unknown_arch", "the client's architecture (option 93) is one Anvil does not boot"}
	errNoARM64        = &ignoreError{"arm64_not_configured", "arm64 client: no arm64 boot file is configured (--ipxe-arm64-file), nor, for HTTP boot, arm64 agent assets with a UKI stub (make agent-arm64)"}
	errHTTPBoot       = &ignoreError{"uefi_http_boot", "UEFI HTTP boot client: no HTTP boot URL is configured"}
	errNotForUs       = &ignoreError{reason: "other_server"}
	errMessageType    = &ignoreError{reason: "message_type"}
	errNoAddress      = &ignoreError{"pool_exhausted", "the DHCP pool has no free address"}
	errOffersFull     = &ignoreError{"offers_full", "the DHCP server holds as many offers not yet taken as it keeps (4096): a flood of DISCOVERs from many MAC addresses?"}
	// A DECLINE of an address not offered or leased to the client that sent it.
	errDeclineNotOurs = &ignoreError{reason: "decline_not_ours"}
	// A DECLINE past the client's or the pool's share of declined addresses.
	errDeclineLimit = &ignoreError{reason: "decline_limit"}
)

// ignoreErrors lists the reasons, so that their counters exist from the start.
var ignoreErrors = []*ignoreError{
	errNotBootRequest, errNotPXE, errNoArch, errUnknownArch, errNoARM64, errHTTPBoot, errNotForUs, errMessageType, errNoAddress,
	errOffersFull, errDeclineNotOurs, errDeclineLimit,
}

// ignoreReason returns the metric label of an ignore error.
func ignoreReason(err error) string {
	var ie *ignoreError
	if errors.As(err, &ie) {
		return ie.reason
	}

	return "other"
}

// unservedReason returns why a boot client cannot be served, or "" when err is not about
// such a client.
func unservedReason(err error) string {
	var ie *ignoreError
	if errors.As(err, &ie) {
		return ie.unserved
	}

	return ""
}
