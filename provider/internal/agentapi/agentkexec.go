package agentapi

import (
	"go.uber.org/zap"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// withAgent is m as this session's agent makes it: whether that agent can kexec is its
// hello's word, which the machine's status has only once its inventory is recorded. An
// agent that cannot (a Talos extension: agent-mode Talos) is never ordered to kexec,
// even in the moment between its hello and its inventory.
func withAgent(m lifecycle.Machine, hello *agentv1.Hello) lifecycle.Machine {
	why := hello.GetKexecUnavailable()

	var status resources.MachineStatusSpec

	switch {
	case m.Status == nil && why == "":
		return m
	case m.Status != nil && m.Status.AgentKexecUnavailable == why:
		return m
	case m.Status != nil:
		status = m.Status.DeepCopy()
	}

	status.AgentKexecUnavailable = why
	m.Status = &status

	return m
}

// noteNoKexec says, in the log and on the machine's boot timeline, that an allocated
// machine is rebooted through its firmware rather than kexec'd because its agent cannot
// kexec.
func (s *Server) noteNoKexec(m lifecycle.Machine, sent *agentv1.Order, logger *zap.Logger) {
	if m.Status == nil {
		return
	}

	why := m.Status.AgentKexecUnavailable
	if why == "" || m.Allocation() == nil || sent.GetReboot() == nil || m.Installed() {
		return
	}

	logger.Info("no kexec: the agent cannot, so the machine goes to Talos through its firmware",
		zap.String("allocation", m.Allocation().ID), zap.String("reason", why))
	s.opts.Trace.Note(m.ID, "no kexec (the agent cannot: "+why+"): rebooting through the firmware into Talos")
}
