package controlv1

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// The google.rpc.ErrorInfo details of the TransitionService's refusals, for clients that
// must tell one refusal from another without reading its message.
const (
	// ErrorDomain is the domain of every ErrorInfo the provider sends.
	ErrorDomain = "anvil.dev"
	// ReasonManaged: another owner decides the transition; metadata "manager" names it.
	ReasonManaged = "MANAGED"
	// ReasonOwnerHolds: the claim's owner holds another machine already; metadata
	// "machine" names it.
	ReasonOwnerHolds = "OWNER_HOLDS"
)

// ErrorInfo returns the metadata of err's ErrorInfo detail of the given reason, and
// whether err has one: what a client of the control API reads from a refusal.
func ErrorInfo(err error, reason string) (map[string]string, bool) {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain && info.GetReason() == reason {
			return info.GetMetadata(), true
		}
	}

	return nil, false
}
