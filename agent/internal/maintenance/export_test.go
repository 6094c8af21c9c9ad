package maintenance

// The builders of the statuses the package writes, for table tests.
var (
	MachineStatusOf   = machineStatus
	ExtensionStatusOf = extensionStatus
)
