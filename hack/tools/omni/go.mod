module github.com/anvil-metal/anvil/hack/tools/omni

go 1.26.5

tool (
	github.com/siderolabs/omni/cmd/omni
	github.com/siderolabs/omni/cmd/omnictl
)

require (
	github.com/siderolabs/omni v1.9.3
	// Omni v1.9.3 itself asks for client v1.8.1, which the module proxy refuses.
	github.com/siderolabs/omni/client v1.9.3
)

// Omni's own fork of crewjam/saml, as Omni's go.mod replaces it.
replace github.com/crewjam/saml => github.com/unix4ever/saml v0.0.0-20250630213700-66b137182abe
