package config

import "github.com/anvil-metal/anvil/internal/siderolink"

// Omni is how the machine joins Omni: Omni's join kernel arguments, parsed.
type Omni = siderolink.Join

// SideroLinkAPI is siderolink.api, parsed.
type SideroLinkAPI = siderolink.API

// Omni parses Omni's parameters (siderolink.ParseJoin).
func (c Config) Omni() (Omni, error) {
	return siderolink.ParseJoin(c.SideroLinkAPI, c.EventsSink, c.KernelLog)
}
