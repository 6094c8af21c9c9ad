package agentapi

import (
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

// markRegistered marks the machine's agent registered on its boot timeline, with the
// firmware its boot script's request said.
func (s *Server) markRegistered(id string) {
	if s.opts.Trace == nil {
		return
	}

	var firmware string
	if e := s.opts.View.Get(id); e != nil && e.Machine != nil {
		firmware = e.Machine.Firmware
	}

	s.opts.Trace.Mark(id, boottrace.PhaseAgentRegistered, firmware, "")
}

// wipeOwed says whether the wipe of that generation is the one the machine owes (the
// lifecycle's next order for it), and in which mode. A report sent again (the agent
// reconnected before hearing it was recorded) is no longer owed, and not counted twice.
func (s *Server) wipeOwed(id, generation string) (string, bool) {
	e := s.opts.View.Get(id)
	if e == nil {
		return "", false
	}

	o := e.NextOrder(s.opts.Policy)
	if o.Kind != lifecycle.OrderWipe || o.Wipe == nil || o.Wipe.GenerationID != generation {
		return "", false
	}

	return o.Wipe.Mode, true
}
