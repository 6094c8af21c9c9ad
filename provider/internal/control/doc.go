// Package control is the provider's control API, the one anvilctl talks to.
//
// It has two parts on one gRPC server: the COSI state API over a read-only view of the
// state, so every resource can be read and watched as with talosctl or omnictl, and the
// TransitionService, the only way a person changes what is asked of a machine. Each
// transition is validated against the machine's current state before it is written.
package control
