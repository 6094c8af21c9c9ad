package controllers

import "time"

// OmniSync hears, in Omni mode, how far Omni's changes of a machine got, to time them
// (omnilink.SyncLag): applied to the machine's intent, then reported in its status for
// Omni.
type OmniSync interface {
	// Applied: the machine's intent carries Omni's view of it; changed says whether
	// that changed the intent.
	Applied(machineID string, changed bool)
	// Reported: the machine's status for Omni, computed from inputs read at started,
	// is stored.
	Reported(machineID string, started time.Time)
}
