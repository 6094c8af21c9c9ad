package redfish

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// noSessions tells a BMC without a usable SessionService (no link, 404, 405, 501…)
// from one that refused the credentials.
func noSessions(err error) bool {
	var re *schemas.Error
	if !errors.As(err, &re) {
		return false
	}

	code := re.HTTPReturnedStatusCode

	return code != http.StatusUnauthorized && code != http.StatusForbidden
}

// statusOf is the HTTP status of a Redfish error (also inside a collection's errors), 0 if none.
func statusOf(err error) int {
	var re *schemas.Error
	if errors.As(err, &re) {
		return re.HTTPReturnedStatusCode
	}

	var ce *schemas.CollectionError
	if errors.As(err, &ce) {
		for _, e := range ce.Failures {
			if code := statusOf(e); code != 0 {
				return code
			}
		}
	}

	return 0
}

// unreachable tells a BMC that did not answer (refused, timed out, cut off).
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}

	var ce *schemas.CollectionError
	if errors.As(err, &ce) {
		for _, e := range ce.Failures {
			if unreachable(e) {
				return true
			}
		}

		return false
	}

	var (
		opErr  *net.OpError
		netErr net.Error
	)

	return errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout())
}

// classify wraps err with what was being done and the power error it amounts to. A call
// whose time ran out is a BMC that did not answer in time, however the transport put it
// (a deadline, or the connection cut off under it).
func classify(ctx context.Context, doing string, err error) error {
	var verr *tls.CertificateVerificationError

	switch code := statusOf(err); {
	case ctx.Err() != nil:
		return fmt.Errorf("error %s: %w: %w (%w)", doing, power.ErrUnreachable, ctx.Err(), err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("error %s: %w: %w", doing, power.ErrUnauthorized, err)
	case errors.As(err, &verr):
		return fmt.Errorf("error %s: the BMC's certificate is not trusted (the endpoint's Insecure skips the check): %w", doing, err)
	case unreachable(err):
		return fmt.Errorf("error %s: %w: %w", doing, power.ErrUnreachable, err)
	default:
		return fmt.Errorf("error %s: %w", doing, err)
	}
}
