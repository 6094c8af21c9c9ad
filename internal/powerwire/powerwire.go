// Package powerwire is the wire format of the HTTP power API: the provider's api power
// backend speaks it, the lab's power server (hack/internal/powerapi) serves it.
//
//	GET  <base>/machines/<uuid>/power  → 200 {"state": "on"|"off"}
//	POST <base>/machines/<uuid>/power  {"action": "on"|"off"|"cycle"} → 204
//	POST <base>/machines/<uuid>/boot   {"device": "network", "once": true, "mode": ""|"legacy"|"uefi"} → 204
//
// Errors are {"error": "…"} with 404 for an unknown machine, 400 for a bad request and
// 401 when the credentials (HTTP basic, when the endpoint has a user) are refused.
package powerwire

// Wire types.
type (
	// PowerReply is the answer to GET …/power.
	PowerReply struct {
		State string `json:"state"`
	}
	// PowerRequest is the body of POST …/power.
	PowerRequest struct {
		Action string `json:"action"`
	}
	// BootRequest is the body of POST …/boot.
	BootRequest struct {
		Device string `json:"device"`
		Once   bool   `json:"once"`
		Mode   string `json:"mode,omitempty"`
	}
	// ErrorReply is the body of every error.
	ErrorReply struct {
		Error string `json:"error"`
	}
)

// Actions.
const (
	ActionOn    = "on"
	ActionOff   = "off"
	ActionCycle = "cycle"
)
