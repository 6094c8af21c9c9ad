package machineview

// Stall holds the view's lock, so that it cannot take in events, until release is
// called: a test's stand-in for a consumer falling behind.
func (v *View) Stall() (release func()) {
	v.mu.Lock()

	return v.mu.Unlock
}
