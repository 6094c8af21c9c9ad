module github.com/anvil-metal/anvil/hack/tools/deep-copy

go 1.26.5

tool github.com/siderolabs/deep-copy

require (
	github.com/siderolabs/deep-copy v0.5.8 // indirect
	golang.org/x/mod v0.27.0 // indirect
	golang.org/x/sync v0.16.0 // indirect
	golang.org/x/tools v0.36.0 // indirect
)
