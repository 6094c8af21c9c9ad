package machineview

// Serves says whether a machine's current allocation boots Talos of the schematic at
// the version: the boot assets the provider fetches from the Image Factory for whoever
// asks are those of its machines, no others. It goes over every machine: the few
// requests of a Talos boot cost microseconds with 10,000 machines.
func (v *View) Serves(schematic, version string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()

	for _, e := range v.byID {
		if e.Intent == nil || e.Intent.Allocation == nil {
			continue
		}

		if a := e.Intent.Allocation; a.SchematicID == schematic && a.TalosVersion == version {
			return true
		}
	}

	return false
}
