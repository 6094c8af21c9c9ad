package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"

	goipmi "github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// wrapError says what was being done and, where it can tell, wraps power.ErrUnauthorized
// or power.ErrUnreachable. go-ipmi never puts the password in its errors; the endpoint
// text added by the callers leaves it out too (power.Endpoint.String).
func wrapError(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case isUnauthorized(err):
		return fmt.Errorf("error %s: %w: %w", what, power.ErrUnauthorized, err)
	case isUnreachable(err):
		return fmt.Errorf("error %s: %w: %w", what, power.ErrUnreachable, err)
	default:
		return fmt.Errorf("error %s: %w", what, err)
	}
}

// isUnauthorized: the BMC answered the session setup and refused the user or the
// password (a wrong password shows as a RAKP 2 code that does not match ours, or as the
// BMC rejecting our RAKP 3), or refused a command for want of privilege.
func isUnauthorized(err error) bool {
	if errors.Is(err, goipmi.ErrRAKPAuthentication) {
		return true
	}

	var status *types.RmcpStatusError
	if errors.As(err, &status) {
		return slices.Contains(refusedStatus, status.StatusCode())
	}

	if res, ok := types.IsResponseError(err); ok {
		return res.CompletionCode() == types.CodeInsufficientPrivilege
	}

	// go-ipmi v0.9.1 joins the per-cipher-suite errors of the session setup with %v, which
	// drops the chain: recognise its own error texts there.
	text := err.Error()
	if strings.Contains(text, goipmi.ErrRAKPAuthentication.Error()) {
		return true
	}

	for _, code := range refusedStatus {
		if strings.Contains(text, types.NewRmcpStatusError(code).Error()) {
			return true
		}
	}

	return false
}

// refusedStatus are the RMCP+ status codes of a session refused for its user, password
// or role.
var refusedStatus = []types.RmcpStatusCode{
	types.RmcpStatusCodeUnauthorizedName,
	types.RmcpStatusCodeUnauthorizedRoleOfPriLevel,
	types.RmcpStatusCodeInvalidRole,
	types.RmcpStatusCodeUnauthorizedGUID,
	types.RmcpStatusCodeInvalidIntegrityCheckValue,
}

// noDatagramMatched is the text of go-ipmi's unexported error for "no answer to this
// request before the read deadline" (v0.9.1, pkg/client/udpclient.go).
const noDatagramMatched = "no datagram matched before deadline"

// isUnreachable: no answer at all (timeout, the deadline, ICMP unreachable, no such host).
func isUnreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTDOWN) {
		return true
	}

	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}

	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}

	// The session setup's errors lose their chain (see isUnauthorized): match the texts.
	text := err.Error()

	for _, t := range []string{noDatagramMatched, os.ErrDeadlineExceeded.Error(), syscall.ECONNREFUSED.Error(), context.DeadlineExceeded.Error()} {
		if strings.Contains(text, t) {
			return true
		}
	}

	return false
}

// isRefusal: the BMC answered the command with a completion code other than success.
func isRefusal(err error) bool {
	if err == nil {
		return false
	}

	// go-ipmi also reports an answer it cannot unpack as a ResponseError, with code 0.
	res, ok := types.IsResponseError(err)

	return ok && res.CompletionCode() != types.CodeOK
}
