package labfactory

// FactoryArg is on the kernel line of every boot the stand-in's PXE script starts: the
// factory's base URL, where the stand-in Talos fetches the disk image it installs.
const FactoryArg = "anvil.lab.factory"
