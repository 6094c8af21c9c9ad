package inventory

// The builders of the resources derived from other sources, for table tests.
var (
	CurrentAddresses   = currentAddresses
	KernelCmdlineOf    = kernelCmdline
	PlatformMetadataOf = platformMetadata
)
