package extension

import (
	"debug/elf"
	"fmt"
)

// machines are the ELF machines of the architectures an extension is built for.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// checkAgent refuses what Talos could not start as the service's entrypoint: a missing
// file, anything but an ELF executable (the container has no shell to run a script), a
// dynamically linked one (it has no libc or loader either), another architecture's.
func checkAgent(agent, arch string) error {
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q (amd64 or arm64)", arch)
	}

	if agent == "" {
		return fmt.Errorf("no agent binary given")
	}

	f, err := elf.Open(agent)
	if err != nil {
		return fmt.Errorf("error reading the agent binary %s as an ELF executable: %w", agent, err)
	}

	defer f.Close()

	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("agent %s is dynamically linked; build it with CGO_ENABLED=0", agent)
		}
	}

	if f.Machine != want {
		return fmt.Errorf("agent %s is built for %s, not %s", agent, f.Machine, arch)
	}

	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("agent %s is not an executable (%s)", agent, f.Type)
	}

	return nil
}
