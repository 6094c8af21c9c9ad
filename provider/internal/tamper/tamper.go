// Package tamper raises the provider's security events: evidence that a party other
// than a machine (its proven agent, the Talos it handed over to) tried to act as it — a
// config token used from a second address, a report no order asked for, an identity
// that does not match the one accepted. Each event is counted
// (anvil_security_events_total{kind}), logged, put among the machine's events, and, for
// the kinds that say a secret may have leaked or the machine may not be itself, holds
// the machine (not handed out, its allocation not completed) until an operator looks.
package tamper

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Kind names what was seen.
type Kind string

// Kinds of security events.
const (
	// ConfigReplay: an allocation's metadata token presented from an address other than
	// the one that first fetched the configuration with it (a stolen token, or the real
	// machine after a thief): the configuration may have leaked. Holds the machine.
	ConfigReplay Kind = "config-replay"
	// UnsolicitedReport: an agent's report (BMC, wipe) with no such order outstanding.
	UnsolicitedReport Kind = "unsolicited-report"
	// ForeignEvent: a Talos install event from an address that did not fetch the
	// allocation's configuration.
	ForeignEvent Kind = "foreign-event"
	// TokenReplay: an agent token superseded by a newer boot presented again.
	TokenReplay Kind = "token-replay"
	// IdentityMismatch: a machine presenting a TPM other than the one bound to it, or
	// failing to prove the bound one. Holds the machine.
	IdentityMismatch Kind = "identity-mismatch"
	// BootScriptToken: a boot script's metadata token presented for a machine that is
	// handed over by kexec, whose Talos has the kexec kind: someone read the machine's
	// boot script. Refused, so nothing leaked; the machine is not held.
	BootScriptToken Kind = "boot-script-token" //nolint:gosec // a kind of event, not a credential
	// PlainConfigFetch: a metadata token presented over plain HTTP for an allocation whose
	// Talos fetches its configuration over HTTPS: not that Talos, so someone read the
	// token (a boot script). Refused before the token is bound, so nothing leaked and the
	// machine is not held.
	PlainConfigFetch Kind = "config-over-http"
)

// Kinds lists every kind, so the metric's series exist from the start.
var Kinds = []Kind{ConfigReplay, UnsolicitedReport, ForeignEvent, TokenReplay, IdentityMismatch, BootScriptToken, PlainConfigFetch}

// Event is one piece of evidence.
type Event struct {
	Machine string
	Kind    Kind
	// Remote is the address the offending request came from.
	Remote string
	// Detail says what happened, in words an operator reads (never a secret).
	Detail string
	// Hold says the machine is to be held until an operator looks.
	Hold bool
}

// Holder holds a machine for a reason (the transitions' Hold).
type Holder interface {
	Hold(ctx context.Context, machineID, reason string) error
}

// Noter puts a line among a machine's recent events (the boot trace's Note).
type Noter interface {
	Note(machineID, message string)
}

// Reporter raises security events.
type Reporter struct {
	holder Holder
	noter  Noter
	logger *zap.Logger
	events *prometheus.CounterVec
}

// New returns a Reporter; holder and noter may be nil (tests, tools without them).
func New(holder Holder, noter Noter, reg prometheus.Registerer, logger *zap.Logger) *Reporter {
	r := &Reporter{
		holder: holder, noter: noter, logger: logger,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_security_events_total",
			Help: "Security events by kind: config tokens replayed, unsolicited reports, install events from foreign addresses, superseded tokens presented, identity mismatches, boot-script tokens for machines handed over by kexec.",
		}, []string{"kind"}),
	}

	if r.logger == nil {
		r.logger = zap.NewNop()
	}

	for _, k := range Kinds {
		r.events.WithLabelValues(string(k))
	}

	if reg != nil {
		reg.MustRegister(r.events)
	}

	return r
}

// Report raises the event. A failure to hold the machine is returned (the caller
// refuses what it was asked either way); the event is counted and logged regardless.
func (r *Reporter) Report(ctx context.Context, ev Event) error {
	if r == nil {
		return nil
	}

	r.events.WithLabelValues(string(ev.Kind)).Inc()
	r.logger.Warn("security event", zap.String("kind", string(ev.Kind)), zap.String("machine", ev.Machine),
		zap.String("remote", ev.Remote), zap.String("detail", ev.Detail), zap.Bool("hold", ev.Hold))

	text := fmt.Sprintf("security event %s: %s", ev.Kind, ev.Detail)
	if ev.Remote != "" {
		text += " (from " + ev.Remote + ")"
	}

	if r.noter != nil && ev.Machine != "" {
		r.noter.Note(ev.Machine, text)
	}

	if !ev.Hold || r.holder == nil || ev.Machine == "" {
		return nil
	}

	if err := r.holder.Hold(ctx, ev.Machine, text); err != nil {
		return fmt.Errorf("error holding machine %s after a security event: %w", ev.Machine, err)
	}

	return nil
}
