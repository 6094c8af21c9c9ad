// Package bootparams names the kernel command-line parameters the provider sets for the
// agent in its iPXE script and the agent reads back.
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
