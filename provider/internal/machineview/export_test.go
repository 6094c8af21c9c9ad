package machineview

// Stall holds the view's lock, so that it cannot take in events, until release is
// called: a test's stand-in for a consumer falling behind.
func (v *View) Stall() (release func()) {
	v.mu.Lock()

	return v.mu.Unlock
}

// AgentBootsNoted is how many agent tokens the view holds ahead of the state.
func (v *View) AgentBootsNoted() int {
	v.agentMu.Lock()
	defer v.agentMu.Unlock()

	return len(v.agentBoots)
}

// MaxAgentBoots bounds AgentBootsNoted.
const MaxAgentBoots = maxAgentBoots
