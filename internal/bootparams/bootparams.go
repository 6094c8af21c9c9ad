// Package bootparams names the kernel command-line parameters the provider sets for the
// agent in its iPXE script and the agent reads back, and says which values on a kernel
// line are secret, hiding them wherever a line is shown (Redact).
package bootparams

const (
	// Provider is the provider's agent API endpoint, host:port.
	Provider = "anvil.provider"
	// CA is the SHA-256 fingerprint (hex) of the provider's CA certificate.
	CA = "anvil.ca"
	// Token is the agent's per-boot token.
	Token = "anvil.token"
	// MachineID is the machine's ID as the provider knows it.
	MachineID = "anvil.machine"
)

// Omni's join parameters, under the names Talos reads (machinery's constants.KernelParam*):
// the provider passes on the kernel arguments of Omni's ProviderJoinConfig, and the agent
// reads them back as Talos would.
const (
	// SideroLinkAPI is Omni's Provision API, grpc:// (plaintext) or https://, with the
	// join token as its "jointoken" query parameter.
	SideroLinkAPI = "siderolink.api"
	// EventsSink is Omni's event sink, [address]:port over SideroLink (plaintext gRPC).
	EventsSink = "talos.events.sink"
	// LoggingKernel is where the kernel log goes, tcp://[address]:port (or udp://) over
	// SideroLink, one JSON object per record.
	LoggingKernel = "talos.logging.kernel"
)
