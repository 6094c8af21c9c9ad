package power

import "time"

// Defaults of how the provider drives BMCs: the provider's flags, the power controller
// and the sweep all take them from here.
const (
	// DefaultPollInterval is how often each BMC's power state is read.
	DefaultPollInterval = 30 * time.Second
	// DefaultMinActionInterval is the least time between two power actions on one machine.
	DefaultMinActionInterval = time.Minute
	// DefaultConcurrency is the most BMCs talked to at once.
	DefaultConcurrency = 64
	// DefaultTimeout bounds each BMC call: dial, request, close.
	DefaultTimeout = 5 * time.Second
)
